"""JobSpec validation (errors name the field), round trips, and the job class registry."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.jobs.job import (
    Job,
    JobContext,
    UnknownJobClass,
    create_job,
    job_class,
    job_names,
    load_entry_points,
    maybe_await,
    parse_spec,
    register_job,
)
from agent.jobs.spec import JobSpec, JobSpecError

BASE = {"name": "wc", "creator": "alice", "job_class": "test-echo"}


@register_job("test-echo")
class Echo(Job):
    default_aggregator = "sum"

    def map(self, record: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(record["k"], record.get("v", 1))]


def test_defaults_and_round_trip() -> None:
    spec = JobSpec.from_dict(BASE)
    assert (spec.aggregator, spec.epoch_seconds, spec.mode, spec.trees) == (
        "count",
        1.0,
        "batch",
        1,
    )
    assert spec.effective_idle_timeout == 1.0 and spec.max_future == 600.0
    full = {
        **BASE,
        "aggregator": "topk",
        "aggregator_params": {"k": 3},
        "epoch_seconds": 2,
        "allowed_lateness": 5,
        "idle_timeout": 0,
        "max_future": None,
        "start_epoch": 17,
        "trees": 4,
        "mode": "window",
        "window_size": 10,
        "window_slide": 5,
        "inputs": ["access", "ingest"],
        "params": {"field": "text", "nested": {"a": [1, 2]}},
    }
    spec = JobSpec.from_dict(full)
    assert spec.effective_idle_timeout is None and spec.max_future is None
    assert spec.inputs == ("access", "ingest")
    again = JobSpec.from_dict(spec.to_dict())
    assert again == spec and again.to_dict() == spec.to_dict()
    assert JobSpec.from_json(__import__("json").dumps(full)) == spec
    assert spec.with_changes(window_slide=2).window_slide == 2
    assert hash(spec) == hash(again)


@pytest.mark.parametrize(
    ("patch", "field", "fragment"),
    [
        ({"name": ""}, "name", "letters"),
        ({"name": "a b"}, "name", "letters"),
        ({"name": 3}, "name", "letters"),
        ({"creator": ""}, "creator", "non-empty"),
        ({"job_class": "../x"}, "job_class", "letters"),
        ({"aggregator": "median"}, "aggregator", "unknown aggregator"),
        ({"aggregator": "topk", "aggregator_params": {"kk": 1}}, "aggregator_params", ""),
        ({"aggregator_params": [1]}, "aggregator_params", "JSON object"),
        ({"epoch_seconds": 0}, "epoch_seconds", "[0.1, 86400]"),
        ({"epoch_seconds": "1"}, "epoch_seconds", "number"),
        ({"epoch_seconds": 1e9}, "epoch_seconds", "[0.1, 86400]"),
        ({"allowed_lateness": -1}, "allowed_lateness", "[0, 3600]"),
        ({"allowed_lateness": float("nan")}, "allowed_lateness", "number"),
        ({"idle_timeout": True}, "idle_timeout", "number"),
        ({"start_epoch": 1.5}, "start_epoch", "integer"),
        ({"max_future": -1}, "max_future", "[0, 604800]"),
        ({"trees": 0}, "trees", "[1, 64]"),
        ({"trees": 65}, "trees", "[1, 64]"),
        ({"mode": "stream"}, "mode", "batch, window, iterative"),
        ({"window_size": 0}, "window_size", "[1, 10000]"),
        ({"window_size": 3, "window_slide": 4}, "window_slide", "window_size=3"),
        ({"inputs": "access"}, "inputs", "list"),
        ({"inputs": [""]}, "inputs", "list"),
        ({"params": None}, "params", "JSON object"),
        ({"colour": "red"}, "colour", "unknown field"),
    ],
)
def test_errors_name_the_field(patch: dict[str, Any], field: str, fragment: str) -> None:
    with pytest.raises(JobSpecError) as info:
        JobSpec.from_dict({**BASE, **patch})
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")
    assert fragment in str(info.value)


@pytest.mark.parametrize("missing", ["name", "creator", "job_class"])
def test_required_fields(missing: str) -> None:
    data = dict(BASE)
    del data[missing]
    with pytest.raises(JobSpecError, match=f"^{missing}: is required"):
        JobSpec.from_dict(data)


def test_not_an_object_and_bad_json() -> None:
    with pytest.raises(JobSpecError, match=r"^spec: must be a JSON object"):
        JobSpec.from_dict([1])
    with pytest.raises(JobSpecError, match=r"^spec: not valid JSON"):
        JobSpec.from_json(b"{")


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["epoch_seconds", "trees", "mode", "window_size", "window_slide", "x"]),
        st.none() | st.booleans() | st.integers(-5, 100) | st.floats() | st.text(max_size=5),
    )
)
def test_from_dict_only_raises_jobspec_errors(patch: dict[str, Any]) -> None:
    try:
        spec = JobSpec.from_dict({**BASE, **patch})
    except JobSpecError as exc:
        assert exc.field in {*patch, "spec"}
    else:
        assert JobSpec.from_dict(spec.to_dict()) == spec


def test_spec_params_are_a_private_copy() -> None:
    params = {"a": [1]}
    spec = JobSpec.from_dict({**BASE, "params": params})
    params["a"].append(2)
    assert spec.params == {"a": [1]}


def test_registry_lookup_by_name_only() -> None:
    assert job_class("test-echo") is Echo
    assert "test-echo" in job_names()
    with pytest.raises(UnknownJobClass, match=r"unknown job class 'os\.system'"):
        job_class("os.system")
    with pytest.raises(TypeError):
        register_job("not-a-job")(dict)  # type: ignore[type-var]

    @register_job("test-dup")
    class One(Job):
        pass

    with pytest.raises(ValueError, match="already registered"):

        @register_job("test-dup")
        class Two(Job):
            pass

    assert load_entry_points("elf.jobs.none-installed") == []


def test_parse_spec_uses_the_class_default_aggregator() -> None:
    assert parse_spec(BASE).aggregator == "sum"
    assert parse_spec({**BASE, "aggregator": "max"}).aggregator == "max"
    with pytest.raises(JobSpecError, match=r"^job_class: unknown job class"):
        parse_spec({**BASE, "job_class": "nope"})


async def test_job_defaults_and_context_protocol() -> None:
    job = create_job(parse_spec(BASE))
    assert isinstance(job, Echo) and job.registered_name == "test-echo"
    assert list(job.map({"k": "a", "v": 2})) == [("a", 2)]
    assert job.make_aggregator().name == "sum"
    assert "answers no queries" in (await maybe_await(job.on_query({})))["error"]
    assert job.feedback_for(0, None) is None  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError):
        Job(parse_spec(BASE)).map({})

    class Ctx:
        node_id = 7
        is_master = True
        feedback = None

        async def subscribe(self, app_id: int) -> None: ...
        async def send_to(self, node_id: int, paos: Any) -> None: ...
        async def multicast(self, message: dict[str, Any]) -> None: ...
        async def route(self, app_id: int, message: dict[str, Any]) -> dict[str, Any]:
            return {}

    ctx = Ctx()
    assert isinstance(ctx, JobContext)
    job.bind(ctx)
    assert job.context is ctx

    async def hook() -> int:
        return 3

    assert await maybe_await(hook()) == 3 and await maybe_await(4) == 4


def test_entry_points_and_local_modules_register_classes(monkeypatch: pytest.MonkeyPatch) -> None:
    import agent.jobs.job as jobmod

    class FakeEP:
        def __init__(self, name: str, target: Any) -> None:
            self.name, self.target = name, target

        def load(self) -> Any:
            if isinstance(self.target, Exception):
                raise self.target
            return self.target

    class Plugin(Job):
        def map(self, record: dict[str, Any]) -> list[tuple[str, int]]:
            return []

    eps = [FakeEP("test-plugin", Plugin), FakeEP("test-broken", ImportError("no module"))]
    monkeypatch.setattr(jobmod, "entry_points", lambda group: eps if group == "elf.jobs" else [])
    loaded = load_entry_points()
    assert loaded[0] == "test-plugin" and loaded[1].startswith("test-broken: ImportError")
    assert job_class("test-plugin") is Plugin
    jobmod.load_job_modules(["apps.wordcount"])  # may already be imported: then a no-op
    assert job_class("wordcount").__module__ == "apps.wordcount"
