"""What one job on one agent reports: its roles, status, progress and timings.

Contract (:class:`JobReport`, one per job runtime, read on the event loop): every call here is
cheap and never waits - it reads the runtime's state, the worker only through the copy the
record thread publishes, never the live worker.

* :meth:`~JobReport.roles` (``worker`` with an input here, ``forwarder`` with children in a
  tree, ``master`` at a root) and :attr:`~JobReport.is_master` (the root of the job's first
  tree).
* :meth:`~JobReport.status` is the job's ``/status`` entry: trees, barriers (and straggler
  leaps), senders, worker, CPU budget, stored results, memory, multicasts, counters, then the
  fault-tolerance fields (:meth:`~agent.runtime.job.host.RecoveryHooks.status`) and the lake.
* :meth:`~JobReport.outflow` is where each tree stands here, for the agent's durable read
  positions (agent/runtime/recovery/offsets.py); :attr:`~JobReport.clock` the worker's
  event-time clock.
* :meth:`~JobReport.timings` is the epoch and control latency evidence (wall-clock seconds).
"""

from __future__ import annotations

import time
from typing import Any

from agent.runtime.epochs.clock import EpochClock
from agent.runtime.job.host import JobHost, tree_view
from agent.runtime.recovery.offsets import TreeOutflow


class JobReport:
    """What one job reports here (see the module contract)."""

    def __init__(self, host: JobHost) -> None:
        self.host = host

    @property
    def clock(self) -> EpochClock | None:
        """The worker's event-time clock; None when this agent has no input of the job."""
        worker = self.host.worker
        return worker.clock if worker is not None else None

    def outflow(self) -> list[TreeOutflow] | None:
        """Where each of the job's trees stands here: its barrier's next epoch, the oldest
        epoch its parent has not acknowledged, whether this agent masters it; None while a
        tree has no barrier yet."""
        host = self.host
        out = []
        for tid in host.tree_list:
            combiner = host.combiners.get(tid)
            if combiner is None:
                return None
            view = tree_view(host, tid)
            is_root = view is not None and view.is_root
            sender = host.senders.get(tid)
            oldest = None
            if sender is not None and not is_root:  # a root's emitted epochs are stored
                queued = sender.pending()["queued"]
                oldest = queued[0] if queued else None
            upto = host.recovery.readable_upto(tid)
            out.append(TreeOutflow(combiner.next_epoch, oldest, is_root, upto))
        return out

    @property
    def is_master(self) -> bool:
        """Whether this agent is the root of the job's first tree now."""
        view = tree_view(self.host, self.host.tree_list[0])
        return bool(view is not None and view.is_root)

    def roles(self) -> list[str]:
        """This agent's roles in the job: worker, forwarder, master."""
        host = self.host
        roles = []
        if host.worker is not None:
            roles.append("worker")
        views = [v for t in host.tree_list if (v := tree_view(host, t)) is not None]
        if any(v.children and not v.is_root for v in views):
            roles.append("forwarder")
        if any(v.is_root for v in views):
            roles.append("master")
        return roles

    def status(self) -> dict[str, Any]:
        """The job's status here (see the module contract)."""
        host = self.host
        views = [v for t in host.tree_list if (v := tree_view(host, t)) is not None]
        store, control = host.store, host.control
        return {
            "app_id": f"{host.app_id:040x}",
            "tree_ids": [f"{t:040x}" for t in host.tree_list],
            "roles": self.roles(),
            "inputs": host.inputs,
            "trees": [v.to_dict() for v in views],
            "barrier": {f"{t:040x}": c.pending() for t, c in host.combiners.items()},
            "stragglers": self._stragglers(),
            "upstream": {f"{t:040x}": s.pending() for t, s in host.senders.items()},
            "worker": host.pipeline.worker_stats(),
            "cpu": host.pipeline.cpu_status(),
            "results": {f"{t:040x}": store.epochs(t)[-8:] for t in store.trees()},
            "memory": {"results": store.stats(), **self._worker_memory()},
            "multicasts_received": len(control.multicasts),
            "multicast_stats": control.multicast_stats[-8:],
            "counters": dict(host.counters),
            **host.recovery.status(),
            "lake": host.lake.stats() if host.lake is not None else None,
            # as master: the late records the origins reported (results/late_ledger.py)
            "late_reported": host.late_ledger.stats() if self.is_master else None,
        }

    def _stragglers(self) -> dict[str, Any]:
        """Straggler leaping here (every tree's barrier) and tentative previews as master."""
        host = self.host
        combiners = host.combiners.values()
        leaps = sorted(
            (leap for c in combiners for leap in c.leaps), key=lambda leap: leap.emitted_at
        )
        return {
            "straggler_epochs": host.spec.straggler_epochs,
            "leapt": sum(c.counters["leapt"] for c in combiners),
            "leapt_epochs": sum(c.counters["leapt_epochs"] for c in combiners),
            "stale_leapt": sum(c.counters["stale_leapt"] for c in combiners),
            "recent_leaps": [leap.to_dict() for leap in leaps[-16:]],
            "tentative_deadline": host.spec.tentative_deadline_for(
                host.spec.schedule.epoch_of(time.time())
            ),
            "previews": host.previews.stats(),
        }

    def _worker_memory(self) -> dict[str, Any]:
        worker = self.host.worker
        if worker is None:
            return {}
        return {
            "worker_bytes": worker.memory_bytes(),
            "worker_budget_bytes": worker.memory_budget_bytes,
        }

    def timings(self, recent: int = 64) -> dict[str, Any]:
        """Epoch and control latency evidence (wall-clock seconds), for operators and the
        benchmark: when this agent sent each recent epoch upward, when the epochs it masters
        completed, and when the recent control multicasts were sent and received."""
        host = self.host
        store, control = host.store, host.control
        sent = list(host.pipeline.sent_at.items())[-recent:]
        return {
            "sent_at": [[f"{t:040x}", e, at] for (t, e), at in sent],
            "completed_at": [
                [f"{t:040x}", e, r.completed_at]
                for t in store.trees()
                for e in store.epochs(t)[-recent:]
                if (r := store.get(t, e)) is not None
            ],
            "multicasts_received": [
                {k: m.get(k) for k in ("kind", "epoch", "sent_at", "received_at")}
                for m in control.multicasts[-recent:]
            ],
            "multicasts_sent": control.multicast_stats[-recent:],
            "changes_applied": [[v, at] for v, at in host.changes.changes_applied.items()],
            # as master: per epoch, closed (epoch clock) / preview / stored / final times
            "epochs": host.previews.timeline(recent),
            "leaps": [leap.to_dict() for c in host.combiners.values() for leap in c.leaps],
        }
