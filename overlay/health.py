"""How slow this node's own view of the network is: timeouts that stretch on evidence
(Lifeguard's local health multiplier, Dadgar et al. 2018, as in HashiCorp memberlist).

Contract: :class:`LocalHealth` is pure state with a ``level`` in ``[0, max_level]``. The only
evidence that raises it is a **late reply**: an authenticated reply that arrived after its
request had timed out. That proves the peer is alive and that this node's timeouts are shorter
than the round trips it sees now, whether its own event loop is behind (hundreds of agents in
one overloaded process) or the network is slow. Each late reply raises the level by one; every
``decay_after`` replies in time lower it by one. The failure detector multiplies its probe
timeout and its suspicion time (``fail_timeout``) by :attr:`LocalHealth.multiplier` =
``1 + level``, and the node its detection tick (``probe_interval``): a node that is behind
probes less often, so the load it adds falls while it recovers instead of feeding the
overload. Requests and routing hops keep their own timeouts (a late reply to one of them still
counts): a join waits on hop after hop, and the detector is where slow peers were taken for
dead.

Why not plain fixed timeouts: with a 0.5 s probe timeout, round trips of 0.8 s made every node
of a simulated 40-node overlay suspect all its contacts (1,139 failures declared in 60 s,
routes agreeing on a key's root for 47 % of keys); an overloaded 1,280-agent run on 2 cores
did the same. Why not measure the event loop's lag: it covers only one of the causes, and a
node whose loop keeps up still sees a slow network. A silent peer (crashed, partitioned) sends
no late reply, so its detection time stays the configured one unless late replies from others
stretched it, and then by at most ``1 + max_level``.
"""

from __future__ import annotations


class LocalHealth:
    """The local health level and the timeout multiplier it gives (see the module contract)."""

    def __init__(self, max_level: int, decay_after: int) -> None:
        if max_level < 0 or decay_after < 1:
            raise ValueError("need max_level >= 0 and decay_after >= 1")
        self.max_level = max_level
        self.decay_after = decay_after
        self.level = 0
        self._in_time = 0  # replies in time since the level last changed

    @property
    def multiplier(self) -> int:
        return 1 + self.level

    def late_reply(self) -> None:
        """A reply came after its request timed out: the timeouts are too short now."""
        self._in_time = 0
        self.level = min(self.max_level, self.level + 1)

    def reply_in_time(self) -> None:
        """A reply came before its timeout: after ``decay_after`` of them, shorten again."""
        if self.level == 0:
            return
        self._in_time += 1
        if self._in_time >= self.decay_after:
            self._in_time = 0
            self.level -= 1
