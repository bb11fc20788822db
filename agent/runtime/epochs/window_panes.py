"""Whether this agent's snapshot of an epoch holds its whole share: panes and windows.

Contract: :func:`whole_share` decides, for one closed epoch of a job on this agent, whether
the snapshot the worker emitted for it may be contributed as this origin's complete share
(its id in the lineage) or only as an absence marker (``srt.dataplane.lineage.absent``: no
records, "this origin is missing from the epoch"; the master then reports the epoch
tentative, lacking it, unless it already holds the origin's real share - a re-send is then
harmless). Pure function of the job's spec, so it is shared by every caller and unit-tested.

A worker holds whole **panes** from ``panes_from`` on: its own start epoch (a restarted agent
resumes past what it had passed on, ``agent/runtime/recovery/offsets.py``) or, when the job started
on
an input other jobs had already read and the records could not be re-read, the epoch after
the last incomplete one. A **window** snapshot (``mode: "window"``) merges the panes of
``spec.window_bounds(epoch)``; the job's own first windows legitimately have fewer panes
(nothing before the submitted start epoch exists anywhere), but a window that needs a pane
before ``panes_from`` is short on this agent and must never be counted as whole: its records
from the missing panes are not in it. Outside window mode (and for a window job's empty
filler epochs) the snapshot is the epoch's pane alone.
"""

from __future__ import annotations

from typing import Protocol


class WindowedSpec(Protocol):
    """What this module reads of a :class:`~agent.jobs.spec.JobSpec`."""

    @property
    def start_epoch(self) -> int | None: ...
    def window_bounds(self, epoch: int) -> tuple[int, int] | None: ...


def panes_from(spec: WindowedSpec, incomplete_until: int | None) -> int | None:
    """The first epoch from which this agent's panes are whole (None: no bound known)."""
    start = spec.start_epoch
    if incomplete_until is None:
        return start
    return incomplete_until + 1 if start is None else max(start, incomplete_until + 1)


def whole_share(
    spec: WindowedSpec,
    epoch: int,
    *,
    submitted_start: int | None,
    incomplete_until: int | None = None,
) -> bool:
    """Whether the snapshot of ``epoch`` holds every record of this agent's share (module
    docstring). ``spec`` is the running (possibly resumed) spec, ``submitted_start`` the
    start epoch the job was submitted with."""
    first = panes_from(spec, incomplete_until)
    if first is None:
        return True
    bounds = spec.window_bounds(epoch) or (epoch, epoch)  # filler: the epoch's own pane
    needed = bounds[0] if submitted_start is None else max(bounds[0], submitted_start)
    return first <= needed
