"""A spec accepted is a spec that runs; a spec that would overload the cluster is refused.

Issue 13, findings 2 and 3: every bound of ``JobSpec.from_dict`` names its field; the job
class's ``setup()`` is dry-run at ``parse_spec`` (a failure names the param); the start epoch is
bounded around now at submission (``agent/runtime/host/admission.py``); changes obey the same
bounds. The hypothesis test checks the contract itself: whatever ``validate`` accepts, the
runtime objects every agent builds can be built and the spec travels (msgpack, int64).
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import BadRequest
from agent.jobs.changes import JobChange, parse_change
from agent.jobs.job import Job, parse_spec, register_job
from agent.jobs.spec import (
    MAX_SPEC_BYTES,
    MIN_EPOCH_SECONDS,
    JobSpec,
    JobSpecError,
)
from agent.runtime.host import admission
from agent.runtime.host.admission import check_start_window
from agent.tunables import RuntimeTunables

BASE = {"name": "b", "creator": "t", "job_class": "test-bounded"}
NOW = 1_800_000_000.0
DEEP: Any = 1
for _ in range(17):  # params.deep nested 17 lists deep: one level past MAX_JSON_DEPTH
    DEEP = [DEEP]


@register_job("test-bounded")
class Bounded(Job):
    """Validates its params like the apps do; ``explode`` raises a non-ValueError."""

    def setup(self) -> None:
        n = self.params.get("min_length", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"params.min_length must be an integer >= 1, got {n!r}")
        if self.params.get("explode"):
            raise KeyError("boom")
        if self.params.get("one_tree") and self.spec.trees != 1:
            raise ValueError("trees: this class needs 1 tree")

    def map_keys(self, record: dict[str, Any]) -> list[str]:
        return [str(record.get("k"))]


def refused(patch: dict[str, Any]) -> JobSpecError:
    with pytest.raises(JobSpecError) as info:
        parse_spec({**BASE, **patch})
    return info.value


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        # finding 3: epochs too short to run, or that flood the lake
        ({"epoch_seconds": 1e-9}, "epoch_seconds"),
        ({"epoch_seconds": 1e-4}, "epoch_seconds"),
        ({"epoch_seconds": 0.099}, "epoch_seconds"),
        ({"trees": 64}, "trees"),  # 64 lake files per second with 1 s epochs
        ({"trees": 2, "epoch_seconds": 0.1}, "epoch_seconds"),
        ({"epoch_schedule": [[10, 0.01]]}, "epoch_schedule"),
        ({"trees": 16, "epoch_schedule": [[10, 0.5]]}, "epoch_schedule"),
        ({"allowed_lateness": 3601}, "allowed_lateness"),
        ({"epoch_seconds": 0.1, "allowed_lateness": 200}, "allowed_lateness"),  # 2000 epochs
        ({"idle_timeout": 1e9}, "idle_timeout"),
        ({"max_future": 1e12}, "max_future"),
        ({"mode": "window", "window_size": 10**6}, "window_size"),
        ({"top_k": 10**6}, "top_k"),
        ({"top_k": 2**64}, "top_k"),
        ({"top_k": 10, "top_k_approximate": 1e6}, "top_k_approximate"),
        ({"aggregator": "topk", "aggregator_params": {"k": 10**6}}, "aggregator_params"),
        (
            {"aggregator": "composite", "aggregator_params": {"parts": [["topk", {"k": 10**9}]]}},
            "aggregator_params",
        ),
        ({"inputs": [f"i{n}" for n in range(65)]}, "inputs"),
        ({"inputs": ["../etc"]}, "inputs"),
        # finding 2: values no agent can run
        ({"start_epoch": -5}, "start_epoch"),
        ({"start_epoch": 2**63}, "start_epoch"),
        ({"start_epoch": 2**64}, "start_epoch"),
        ({"aggregator_since": -1}, "aggregator_since"),
        ({"params": {"min_length": "3"}}, "params.min_length"),
        ({"params": {"min_length": 0}}, "params.min_length"),
        ({"params": {"other": 2**63}}, "params.other"),
        ({"params": {"other": -(2**63) - 1}}, "params.other"),
        ({"params": {"a": {"b": [1, 2, 2**64]}}}, "params.a.b[2]"),
        ({"params": {"x": math.nan}}, "params.x"),
        ({"params": {"x": math.inf}}, "params.x"),
        ({"aggregator_params": {"k": 2**70}}, "aggregator_params.k"),
        ({"params": {"deep": DEEP}}, "params.deep" + "[0]" * 16),
        ({"params": {"x": "y" * MAX_SPEC_BYTES}}, "spec"),
        ({"params": {"explode": True}}, "params"),
        ({"params": {"one_tree": True}, "trees": 2}, "trees"),
    ],
)
def test_each_bound_names_its_field(patch: dict[str, Any], field: str) -> None:
    exc = refused(patch)
    assert exc.field == field, str(exc)
    assert str(exc).startswith(f"{field}: ")


def test_the_limits_themselves_are_accepted() -> None:
    for patch in [
        {"epoch_seconds": MIN_EPOCH_SECONDS},
        {"trees": 16},
        {"trees": 64, "epoch_seconds": 4},
        {"start_epoch": 2**53},
        {"params": {"a": 2**63 - 1, "b": -(2**63), "c": 1.5}},
        {"allowed_lateness": 3600, "epoch_seconds": 4},
        {"allowed_lateness": 1024},
        {"mode": "window", "window_size": 10_000, "window_slide": 10_000},
        {"top_k": 10_000, "top_k_approximate": 100},
    ]:
        spec = parse_spec({**BASE, **patch})
        assert JobSpec.from_dict(spec.to_dict()) == spec


def test_a_setup_failure_names_the_param_once() -> None:
    exc = refused({"params": {"min_length": "3"}})
    assert str(exc) == "params.min_length: must be an integer >= 1, got '3'"
    exc = refused({"params": {"explode": True}})
    assert "KeyError" in str(exc) and "boom" in str(exc)


def test_validate_answers_400_with_the_field() -> None:
    with pytest.raises(BadRequest) as info:
        admission.validate({**BASE, "params": {"min_length": "3"}})
    assert info.value.status == 400 and info.value.field == "params.min_length"
    assert "params.min_length" in str(info.value)


# ---- the start epoch's window around now (submission only) --------------------------------
@pytest.mark.parametrize("seconds", [0.1, 1.0, 5.0, 3600.0])
def test_start_window_edges(seconds: float) -> None:
    tun = RuntimeTunables()
    spec = parse_spec({**BASE, "epoch_seconds": seconds, "start_epoch": 0})
    current = math.floor(NOW / seconds)
    behind = min(tun.max_catchup_epochs, math.floor(tun.max_catchup_seconds / seconds))
    ahead = math.ceil(tun.max_start_ahead_seconds / seconds)
    for ok in (current - behind, current, current + ahead):
        check_start_window(spec.with_changes(start_epoch=ok), NOW, tun)
    for bad in (0, current - behind - 1, current + ahead + 1):
        with pytest.raises(BadRequest) as info:
            check_start_window(spec.with_changes(start_epoch=bad), NOW, tun)
        assert info.value.field == "start_epoch"


def test_start_window_follows_the_tunables() -> None:
    spec = parse_spec({**BASE, "start_epoch": math.floor(NOW) - 100})
    check_start_window(spec, NOW, RuntimeTunables())
    with pytest.raises(BadRequest, match="at most 50 epochs"):
        check_start_window(spec, NOW, RuntimeTunables(max_catchup_epochs=50))
    with pytest.raises(BadRequest, match="at most 10 epochs"):
        check_start_window(spec, NOW, RuntimeTunables(max_catchup_seconds=10.0))
    check_start_window(parse_spec(BASE), NOW, RuntimeTunables())  # null: the root fills "now"


# ---- changes obey the same bounds ----------------------------------------------------------
def test_a_change_of_epoch_length_obeys_the_floor_and_the_lake_rate() -> None:
    with pytest.raises(BadRequest) as info:
        parse_change({"epoch_seconds": 1e-4})
    assert info.value.field == "epoch_seconds"
    spec = parse_spec({**BASE, "trees": 4, "start_epoch": 1})
    with pytest.raises(BadRequest) as info:
        JobChange(epoch_seconds=0.2).apply(spec, NOW)  # 4 trees / 0.2 s = 20 files per second
    assert info.value.field == "epoch_seconds"
    assert JobChange(epoch_seconds=0.25).apply(spec, NOW) is not None  # 16 per second


def test_a_change_of_params_is_dry_run() -> None:
    spec = parse_spec({**BASE, "start_epoch": 1})
    with pytest.raises(BadRequest) as info:
        JobChange(params={"min_length": "3"}).apply(spec, NOW)
    assert info.value.field == "params.min_length"
    with pytest.raises(BadRequest) as info:
        JobChange(fields=(("allowed_lateness", 1e6),)).apply(spec, NOW)
    assert info.value.field == "allowed_lateness"


# ---- the contract: accepted ⇒ runs ---------------------------------------------------------
json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(2**65), 2**65)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)
wide_number = (
    st.integers(-(2**65), 2**65)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 0.1, 1, 5, 64, 1e-9, 1e-4, 2**53, 2**63])
)
field_values = st.fixed_dictionaries(
    {},
    optional={
        "epoch_seconds": wide_number,
        "trees": wide_number,
        "start_epoch": st.none() | wide_number,
        "allowed_lateness": wide_number,
        "idle_timeout": st.none() | wide_number,
        "max_future": st.none() | wide_number,
        "top_k": st.none() | wide_number,
        "top_k_approximate": st.none() | wide_number,
        "mode": st.sampled_from(["batch", "window", "iterative"]),
        "window_size": wide_number,
        "window_slide": wide_number,
        "aggregator": st.sampled_from(["count", "sum", "topk", "max"]),
        "aggregator_params": st.dictionaries(st.sampled_from(["k"]), wide_number, max_size=1),
        "params": st.dictionaries(
            st.sampled_from(["min_length", "x", "y"]), json_value, max_size=3
        ),
    },
)


def _ints(v: Any) -> list[int]:
    if isinstance(v, bool):
        return []
    if isinstance(v, int):
        return [v]
    if isinstance(v, dict):
        return [i for x in v.values() for i in _ints(x)]
    if isinstance(v, list | tuple):
        return [i for x in v for i in _ints(x)]
    return []


@settings(max_examples=300, deadline=None)
@given(field_values)
def test_an_accepted_spec_runs_and_travels(patch: dict[str, Any]) -> None:
    try:
        spec = admission.validate({**BASE, **patch})
    except BadRequest as exc:
        assert exc.field is not None  # every refusal names a field
        assert exc.field.split(".")[0].split("[")[0] in {*patch, "spec", "params"}
        return
    wire = spec.to_dict()
    assert len(msgpack.packb(wire, use_bin_type=True)) <= MAX_SPEC_BYTES
    assert all(-(2**63) <= i < 2**63 for i in _ints(wire))
    assert JobSpec.from_dict(wire) == spec
    assert spec.trees / spec.epoch_seconds <= 16
    admission._dry_run_runtime(spec)  # what every agent builds
