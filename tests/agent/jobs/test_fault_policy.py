"""The spec's ``fault_tolerance`` field (agent/jobs/fault_policy.py): every accepted form, the
refusals naming the field, the round trip through a spec, and a runtime change."""

from __future__ import annotations

import pytest

from agent.jobs.fault_policy import FaultPolicy, parse_policy
from agent.jobs.spec import JobSpec, JobSpecError

BASE = {"name": "wc", "creator": "t", "job_class": "wordcount"}


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (None, FaultPolicy()),
        ("passive", FaultPolicy()),
        ({"policy": "passive"}, FaultPolicy()),
        ({"policy": "replicated"}, FaultPolicy("replicated", 2)),
        ({"policy": "replicated", "replicas": 5}, FaultPolicy("replicated", 5)),
        ({"policy": "budget", "replica_budget": 1}, FaultPolicy("budget", 2, 1)),
        ({"policy": "budget", "replica_budget": 64}, FaultPolicy("budget", 2, 64)),
        (
            {"policy": "adaptive", "latency_target_ms": 1500},
            FaultPolicy("adaptive", 2, 0, 1500.0),
        ),
        (
            {"policy": "adaptive", "latency_target_ms": 800.5, "mirror_ratio": 1},
            FaultPolicy("adaptive", 2, 0, 800.5, 1.0),
        ),
    ],
)
def test_accepted_forms(raw, want) -> None:
    assert parse_policy(raw) == want
    spec = JobSpec.from_dict({**BASE, "fault_tolerance": raw} if raw is not None else BASE)
    assert spec.fault_tolerance == want
    assert JobSpec.from_dict(spec.to_dict()) == spec  # the round trip
    assert want.label() in (
        "passive",
        f"replicated:{want.replicas}",
        f"budget:{want.budget}",
        "adaptive:1500ms",
        "adaptive:800.5ms:rho=1",
    )


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("replicated", "passive"),
        ({"policy": "budget", "replicas": 2}, "replicated policy only"),
        ({"policy": "budget"}, "replica_budget must be an integer in [1, 64]"),
        ({"policy": "budget", "replica_budget": 0}, "replica_budget must be an integer"),
        ({"policy": "budget", "replica_budget": 65}, "replica_budget must be an integer"),
        ({"policy": "budget", "replica_budget": 2.0}, "replica_budget must be an integer"),
        ({"policy": "replicated", "replica_budget": 2}, "budget policy only"),
        ({"policy": "adaptive"}, "latency_target_ms must be a number in [50, 3600000]"),
        ({"policy": "adaptive", "latency_target_ms": 10}, "latency_target_ms must be"),
        ({"policy": "adaptive", "latency_target_ms": True}, "latency_target_ms must be"),
        (
            {"policy": "adaptive", "latency_target_ms": 900, "mirror_ratio": 1.5},
            "mirror_ratio must be a number in [0, 1]",
        ),
        ({"policy": "adaptive", "latency_target_ms": 900, "replicas": 2}, "adaptive policy takes"),
        ({"policy": "replicated", "latency_target_ms": 900}, "adaptive policy only"),
        ({"policy": "quorum"}, "policy must be one of"),
        ({"policy": "replicated", "replicas": 1}, "replicas must be an integer in [2, 5]"),
        ({"policy": "replicated", "replicas": 6}, "replicas must be an integer in [2, 5]"),
        ({"policy": "replicated", "replicas": True}, "replicas must be"),
        ({"policy": "replicated", "r": 2}, "unknown keys"),
        ({"policy": "passive", "replicas": 2}, "replicated policy only"),
        (3, "must be"),
    ],
)
def test_refusals_name_the_field(raw, says) -> None:
    with pytest.raises(JobSpecError) as info:
        JobSpec.from_dict({**BASE, "fault_tolerance": raw})
    assert "fault_tolerance" in str(info.value) and says in str(info.value)


def test_a_runtime_change_switches_the_policy() -> None:
    spec = JobSpec.from_dict(BASE)
    changed = spec.with_changes(fault_tolerance={"policy": "replicated", "replicas": 3})
    assert changed.fault_tolerance.replicated and changed.fault_tolerance.replicas == 3
    assert changed.with_changes(fault_tolerance="passive").fault_tolerance == FaultPolicy()
    budget = changed.with_changes(fault_tolerance={"policy": "budget", "replica_budget": 3})
    assert budget.fault_tolerance.planned and budget.fault_tolerance.budget == 3
    assert budget.fault_tolerance.label() == "budget:3"
