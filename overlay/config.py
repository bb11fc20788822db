"""Tunables of an overlay node, with defaults for production clusters.

Contract: a frozen dataclass; tests pass shorter timings via ``dataclasses.replace``. With the
defaults a node takes one contact to probe every ``probe_interval`` and skips those heard from
lately (overlay/detector.py): about 1.24 probes + 1.24 probe replies per second, plus one
leaf-set refresh every 5-40 s and one slot lookup every 2-32 s (the longer periods while its
neighbourhood does not change: ≈ 2.7 maintenance datagrams per node per second, 4.2 when
every turn probed, under the paper's 10), suspects a
silent peer after ``misses_before_suspect`` consecutive unanswered probes (≈ 1.5 s once it is
probed) and declares it failed ``fail_timeout`` seconds later. Late replies stretch those
detection timeouts up to fivefold while round trips are slow (``health_max_level``,
overlay/health.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tunables:
    """Timings (seconds) and sizes of one overlay node."""

    ksize: int = 20  # Kademlia k: bucket size and lookup width
    alpha: int = 3  # Kademlia lookup parallelism
    leaf_set_size: int = 8
    slot_capacity: int = 3  # contacts kept per routing-table slot (designated + backups)
    request_timeout: float = 1.0
    request_retries: int = 2
    # a graceful leave waits this long for its notices' acknowledgements, then stops anyway:
    # the notice only speeds up what failure detection does regardless, and a contact that is
    # itself gone (another logical agent of the same stopping process) never answers
    leave_wait: float = 0.2
    probe_interval: float = 0.5
    probe_timeout: float = 0.5
    misses_before_suspect: int = 3
    fail_timeout: float = 2.0  # suspected this long without a reply → failed
    # Late replies (after their timeout) stretch the probe timeout, probe_interval and
    # fail_timeout by 1 + level, level <= health_max_level; every health_decay_after replies
    # in time lower it by one (overlay/health.py). 0 keeps the timeouts fixed.
    health_max_level: int = 4
    health_decay_after: int = 4
    leaf_refresh_interval: float = 5.0
    slot_refresh_interval: float = 2.0  # one routing-table slot re-looked-up per interval
    # while the neighbourhood does not change, both intervals double after each refresh up
    # to these (overlay/trickle.py); a node admitted or retired resets them
    leaf_refresh_max_interval: float = 40.0
    slot_refresh_max_interval: float = 32.0
    kademlia_refresh_interval: float = 600.0
    gossip_sends: int = 12  # times each failure/leave rumour is piggybacked on probes
    gossip_per_message: int = 6
    # contacts closest to a node declared failed on evidence (a refused connection) that are
    # told at once (overlay.detector); 0 = rumour it on probes only
    evidence_fanout: int = 4
    tombstone_ttl: float = 60.0  # ignore second-hand news of a failed node this long
    rejoin_interval: float = 10.0  # how often to re-ping a few failed nodes (heals partitions)
    rejoin_batch: int = 2
    graveyard_size: int = 256  # failed nodes remembered for re-pinging
    graveyard_ttl: float = 3600.0
    max_hops: int = 64
    route_timeout: float = 10.0
    max_datagram: int = 8192
    max_skew: float = 30.0  # accepted clock skew for datagram timestamps
    # UDP receive buffer asked of the kernel (SO_RCVBUF, bytes; 0 = the OS default). Linux caps
    # it at net.core.rmem_max (raise that sysctl for bursts); stats()["socket"]["rcvbuf"] shows
    # what was granted, stats()["drops"]["kernel_rcvbuf"] what still overflowed.
    recv_buffer: int = 4 << 20
    socket_stats_interval: float = 10.0  # kernel drops sampled (WARNING on growth) this often

    def __post_init__(self) -> None:
        if self.misses_before_suspect < 1 or self.leaf_set_size < 1 or self.ksize < 1:
            raise ValueError("sizes and miss counts must be positive")
        if (
            min(
                self.request_timeout,
                self.probe_interval,
                self.probe_timeout,
                self.socket_stats_interval,
                self.leave_wait,
            )
            <= 0
        ):
            raise ValueError("timings must be positive")
        if (
            self.leaf_refresh_max_interval < self.leaf_refresh_interval
            or self.slot_refresh_max_interval < self.slot_refresh_interval
        ):
            raise ValueError("a refresh's max interval must be >= its interval")
        if self.health_max_level < 0 or self.health_decay_after < 1:
            raise ValueError("need health_max_level >= 0 and health_decay_after >= 1")
        if self.recv_buffer < 0:
            raise ValueError("recv_buffer must be >= 0 (0: the OS default)")
