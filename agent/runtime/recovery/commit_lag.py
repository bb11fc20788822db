"""CommitLag: how long after an epoch closes its commit is heard here, smoothed (pure state).

Contract: :meth:`CommitLag.observe` takes one lag (seconds from an epoch's close - its end plus
the allowed lateness - to this agent hearing, or as master making, its commit). The estimate
is TCP's retransmission timer (RFC 6298: ``srtt`` and ``rttvar`` with gains 1/8 and 1/4);
:meth:`CommitLag.wait` is ``srtt + 4 * rttvar`` clamped to ``[floor, cap]``; before the first
observation it is ``max(floor, INITIAL_WAIT)``, RFC 6298's initial timer (a job's first epochs
on hundreds of agents commit seconds after their close). Lags outside ``[0, IGNORED_ABOVE]``
are ignored: a catch-up or a restart commits epochs long closed, which says nothing about the
tree's pace.

Why: two recovery timers start at an epoch's close - an origin's checkpoint round (its
uncommitted epochs go to its hot replicas, ``checkpoints.py``) and a master's laggard probes
(``loss.py``). Both are meant to act only when the commit is *late*: in steady state the
epoch is committed before they fire, and nothing is sent. With fixed delays (0.25 s, 0.1 s)
that held on a quiet small tree, but where a roll-up takes longer (hundreds of agents per
process, a loaded host) every epoch sent its checkpoints and probed its origins: 1.6
checkpoint requests and 0.8 probes per agent per epoch at 32 agents in one process, work
that slows the roll-up further. Timing them from the commit lag this tree actually shows
keeps them for the late epochs. The cost: a crash that strikes an origin within the longer
wait loses the hot replica of that epoch (its master repairs by pull or flags the epoch, as
for any epoch not yet checkpointed); ``cap`` bounds it.
"""

from __future__ import annotations

#: a lag longer than this is a catch-up or a restart, not the tree's pace
IGNORED_ABOVE = 60.0
#: the wait before any commit was heard (RFC 6298's initial retransmission timer)
INITIAL_WAIT = 1.0


class CommitLag:
    """Smoothed commit lag of one job on this agent (see the module contract)."""

    def __init__(self) -> None:
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.observed = 0

    def observe(self, lag: float) -> None:
        if not 0.0 <= lag <= IGNORED_ABOVE:
            return
        self.observed += 1
        if self.srtt is None:
            self.srtt, self.rttvar = lag, lag / 2
            return
        self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - lag)
        self.srtt = 0.875 * self.srtt + 0.125 * lag

    def wait(self, floor: float, cap: float) -> float:
        """How long a timer meant for late commits waits after an epoch's close."""
        if self.srtt is None:
            return max(floor, min(cap, INITIAL_WAIT))
        return max(floor, min(cap, self.srtt + 4 * self.rttvar))

    def status(self) -> dict[str, float | int | None]:
        return {
            "srtt_s": None if self.srtt is None else round(self.srtt, 4),
            "rttvar_s": round(self.rttvar, 4),
            "observed": self.observed,
        }
