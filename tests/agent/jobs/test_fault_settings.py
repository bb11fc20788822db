"""The per-job fault-tolerance settings (issue 14): ``straggler_epochs``,
``tentative_deadline`` and ``checkpoint_replicas`` in the spec - defaults, bounds refused
naming the field, the default deadline's formula -, changeable at runtime (``parse_change``
/ ``JobChange.apply``), and set by ``elf submit`` / ``elf change`` flags."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

import agent.cli as cli_module
from agent.errors import BadRequest
from agent.jobs.changes import parse_change
from agent.jobs.ql_job import spec_from_query
from agent.jobs.spec import JobSpec, JobSpecError

BASE = {"name": "f", "creator": "t", "job_class": "wordcount"}


def test_defaults_and_the_default_deadline() -> None:
    spec = JobSpec.from_dict(BASE)
    assert (spec.straggler_epochs, spec.tentative_deadline, spec.checkpoint_replicas) == (
        2,
        None,
        2,
    )
    assert spec.tentative_deadline_for(0) == 0.3  # 1 s epochs: the floor
    assert JobSpec.from_dict({**BASE, "epoch_seconds": 30}).tentative_deadline_for(0) == 3.0
    assert JobSpec.from_dict({**BASE, "tentative_deadline": 0}).tentative_deadline_for(0) is None
    assert JobSpec.from_dict({**BASE, "tentative_deadline": 1.5}).tentative_deadline_for(0) == 1.5
    assert JobSpec.from_dict(spec.to_dict()) == spec
    custom = JobSpec.from_dict(
        {**BASE, "straggler_epochs": 0, "tentative_deadline": 0.05, "checkpoint_replicas": 8}
    )
    assert JobSpec.from_dict(custom.to_dict()) == custom


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("straggler_epochs", -1),
        ("straggler_epochs", 1025),
        ("straggler_epochs", 1.5),
        ("straggler_epochs", True),
        ("tentative_deadline", -0.1),
        ("tentative_deadline", 0.01),
        ("tentative_deadline", 3601),
        ("tentative_deadline", "1"),
        ("checkpoint_replicas", 9),
        ("checkpoint_replicas", -1),
        ("checkpoint_replicas", None),
    ],
)
def test_bad_values_are_refused_naming_the_field(field: str, value: Any) -> None:
    with pytest.raises(JobSpecError) as ei:
        JobSpec.from_dict({**BASE, field: value})
    assert ei.value.field == field


def test_the_settings_change_at_runtime_and_bad_ones_are_400s() -> None:
    spec = JobSpec.from_dict(spec_from_query("q", "t", "SELECT count(*) FROM *"))
    change = parse_change({"straggler_epochs": 3, "tentative_deadline": 0.5})
    new = change.apply(spec)
    assert new is not None
    assert (new.straggler_epochs, new.tentative_deadline) == (3, 0.5)
    new = parse_change({"checkpoint_replicas": 0}).apply(new)
    assert new is not None and new.checkpoint_replicas == 0
    with pytest.raises(BadRequest) as ei:
        parse_change({"straggler_epochs": -2}).apply(spec)
    assert ei.value.field == "straggler_epochs"
    with pytest.raises(BadRequest) as ei:
        parse_change({"tentative_deadline": 0.001}).apply(spec)
    assert ei.value.field == "tentative_deadline"


class _Client:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(("submit", spec))
        return {"ok": True}

    def change(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((name, body))
        return {"ok": True}


def test_submit_and_change_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _Client()
    monkeypatch.setattr(cli_module, "api_client", lambda *a: client)
    run = CliRunner().invoke
    r = run(cli_module.cli, ["submit", "--name", "w", "--job", "wordcount",
                             "--straggler-epochs", "3", "--tentative-deadline", "0.4",
                             "--checkpoint-replicas", "1"])  # fmt: skip
    assert r.exit_code == 0, r.output
    r = run(cli_module.cli, ["submit", "--name", "q", "--query", "SELECT count(*) FROM *",
                             "--straggler-epochs", "0"])  # fmt: skip
    assert r.exit_code == 0, r.output
    r = run(cli_module.cli, ["change", "w", "--tentative-deadline", "0"])
    assert r.exit_code == 0, r.output
    (_, w), (_, q), change = client.sent
    assert (w["straggler_epochs"], w["tentative_deadline"], w["checkpoint_replicas"]) == (
        3,
        0.4,
        1,
    )
    assert q["straggler_epochs"] == 0 and "tentative_deadline" not in q
    assert change == ("w", {"tentative_deadline": 0.0})
    JobSpec.from_dict(w)  # what the flags produce is a valid spec


@pytest.mark.parametrize(
    ("flag", "policy"),
    [
        ("passive", {"policy": "passive"}),
        ("replicated:3", {"policy": "replicated", "replicas": 3}),
        ("budget:4", {"policy": "budget", "replica_budget": 4}),
        ("adaptive:2000", {"policy": "adaptive", "latency_target_ms": 2000}),
    ],
)
def test_the_fault_tolerance_flag_gives_a_valid_policy(
    monkeypatch: pytest.MonkeyPatch, flag: str, policy: dict[str, Any]
) -> None:
    client = _Client()
    monkeypatch.setattr(cli_module, "api_client", lambda *a: client)
    r = CliRunner().invoke(
        cli_module.cli,
        ["submit", "--name", "w", "--job", "wordcount", "--fault-tolerance", flag],
    )
    assert r.exit_code == 0, r.output
    ((_, spec),) = client.sent
    assert spec["fault_tolerance"] == policy
    JobSpec.from_dict(spec)  # the agent accepts it
