"""PositionReplica, the replica of a master position, as pure state: hypothesis drives a master
P, its members (children c1..ck and the replica's own agent S, itself a child of P) and the
replica through random interleavings of deliveries to P and to the replica, kills P at a
random moment and lets S take over (its own barrier becoming the root's). Every epoch S
stores must equal a Counter of every contribution, lacking only P's own share where P never
got it to the replica: no epoch tentative for any other reason, none counted twice, none
missing (Hwang's replication transparency, for the master position)."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.runtime.recovery.position_replica import PositionReplica
from cbt import CompressedBufferTree, Snapshot
from srt import EpochCombiner

P, S = 100, 200  # the master and the replica's agent
WORDS = st.lists(st.sampled_from("abcdef"), min_size=0, max_size=4).map(Counter)


def snap_of(words: Counter) -> Snapshot:
    tree = CompressedBufferTree(aggregator="sum")
    for word, n in words.items():
        tree.insert(word, n)
    return tree.flush()


def lineage(*origins: int) -> frozenset[int]:
    return frozenset(origins)


def barrier(emit, *, local: bool, children=()) -> EpochCombiner:
    return EpochCombiner(
        job="j",
        tree=1,
        expect_local=local,
        children=children,
        emit=emit,
        first_epoch=0,
        origin=S if local else None,
    )


@st.composite
def runs(draw):
    k = draw(st.integers(1, 3))
    epochs = draw(st.integers(1, 4))
    children = list(range(1, k + 1))
    data = {(m, e): draw(WORDS) for m in [*children, P, S] for e in range(epochs)}
    # each sender's stream to each target, in epoch order; the interleaving is random
    streams = {(m, t): list(range(epochs)) for m in children for t in ("P", "R")}
    streams |= {(P, "R"): list(range(epochs))}  # the master's own share, to the replica
    order: list[tuple[int, str]] = []
    left = {key: len(v) for key, v in streams.items()}
    while any(left.values()):
        key = draw(st.sampled_from(sorted(k for k, n in left.items() if n)))
        order.append(key)
        left[key] -= 1
    own_local_at = draw(st.lists(st.integers(0, len(order)), min_size=epochs, max_size=epochs))
    kill_at = draw(st.integers(0, len(order)))
    return children, epochs, data, order, sorted(own_local_at), kill_at


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs())
def test_after_the_master_dies_every_epoch_is_exact_but_for_its_own_share(run) -> None:
    children, epochs, data, order, own_local_at, kill_at = run
    stored: dict[int, tuple[Counter, frozenset[int] | None]] = {}

    def store(epoch: int, snap: Snapshot, origins) -> None:
        if epoch in stored:  # a second arrival of an epoch: only a duplicate may come twice
            assert origins is not None and origins <= stored[epoch][1]
            return
        stored[epoch] = (Counter(snap.to_dict()), origins)

    master = barrier(lambda e, s: None, local=False, children=[*children, S])
    replica = PositionReplica(
        P, lambda emit: barrier(emit, local=False, children=[*children, S, P])
    )
    replica.set_members(P, [*children, S, P])
    alive = {"P": True}
    own_up: list[tuple[int, Snapshot, frozenset[int] | None]] = []  # S's own emits, queued

    def own_emit(epoch: int, snap: Snapshot) -> None:
        origins = own.lineage_of(epoch)
        if replica.handover is None:  # a child of P: to the master and to its replica
            own_up.append((epoch, snap, origins))
            replica.offer(S, epoch, snap, origins)
        elif replica.owns(epoch):
            replica.offer(S, epoch, snap, origins)
        else:
            store(epoch, snap, origins)

    own = barrier(own_emit, local=True)
    sent = {key: 0 for key in {(m, t) for m, t in order}}
    p_has: dict[int, set[int]] = {}  # epochs the master acknowledged, per member
    took_over = False
    step = 0

    def take_over() -> None:
        kept, handover, members = replica.take_over(S, own.next_epoch, store)
        for epoch, snap, origins in kept:
            store(epoch, snap, origins)
        own.set_children(own.children | members, start=handover + 1)
        # the members re-send what the dead master never acknowledged, to S now
        for m in children:
            for e in range(epochs):
                if e not in p_has.get(m, set()):
                    deliver_to_s(m, e)

    def deliver_to_s(m: int, e: int) -> None:
        snap, origins = snap_of(data[(m, e)]), lineage(m)
        if replica.owns(e):
            replica.offer(m, e, snap, origins)
        else:
            own.offer_child(m, e, snap, origins)

    local_next = 0
    for step, (m, target) in enumerate(order):
        while local_next < epochs and own_local_at[local_next] <= step:
            own.offer_local(local_next, snap_of(data[(S, local_next)]))
            local_next += 1
        if step == kill_at and not took_over:
            alive["P"] = False
            took_over = True
            take_over()
        e = sent[(m, target)]
        sent[(m, target)] += 1
        snap, origins = snap_of(data[(m, e)]), lineage(m)
        if target == "P":
            if alive["P"]:
                master.offer_child(m, e, snap, origins)
                p_has.setdefault(m, set()).add(e)
            # else: re-sent to S at the take-over (or later, below)
        elif m == P:
            if alive["P"]:
                replica.offer(P, e, snap, origins)
        elif replica.owns(e) or replica.handover is None:
            replica.offer(m, e, snap, origins)
        else:
            own.offer_child(m, e, snap, origins)
    while local_next < epochs:
        own.offer_local(local_next, snap_of(data[(S, local_next)]))
        local_next += 1
    if not took_over:
        take_over()
    # after the take-over the members' streams to the dead master went to S (re-sent above
    # for what P never acknowledged; later ones: the P-stream deliveries below kill_at)
    for m in children:
        for e in range(sent.get((m, "P"), 0), epochs):
            deliver_to_s(m, e)

    assert sorted(stored) == list(range(epochs))
    got_p = {e for e, (_, origins) in stored.items() if origins is not None and P in origins}
    for e in range(epochs):
        want = sum((data[(m, e)] for m in [*children, S]), Counter())
        if e in got_p:
            want += data[(P, e)]
        words, origins = stored[e]
        assert words == +want, (e, words, want)
        assert origins is not None and origins - {P} == {*children, S}, (e, origins)
    # the master's own share is there exactly for the epochs it got to the replica in time
    p_sent = sent.get((P, "R"), 0) if kill_at >= len(order) else order[:kill_at].count((P, "R"))
    assert got_p == set(range(p_sent))
    assert replica.done


def test_a_member_that_stopped_reaching_the_replica_holds_at_most_max_open_epochs() -> None:
    """Member 2's epochs stop reaching the replica (its bounded sender dropped them): past
    ``max_open`` open epochs the replica stops waiting for it, emits what it holds, and waits
    for it again once the master's next announcement names it."""
    emitted: list[int] = []
    replica = PositionReplica(
        P, lambda emit: barrier(lambda e, s: emit(e, s), local=False), max_open=3
    )
    replica.set_members(P, [1, 2])
    replica.offer(2, 0, snap_of(Counter(b=1)), lineage(2))
    for e in range(6):
        replica.offer(1, e, snap_of(Counter(a=1)), lineage(1))
    emitted = sorted(replica.kept)
    assert emitted and len(replica.barrier.first_arrivals()) <= 3
    assert replica.unblocked == 1 and 2 not in replica.members
    assert replica.kept[0][1] == {1, 2}  # what both delivered is whole
    assert all(replica.kept[e][1] == {1} for e in emitted[1:])  # then it lacks member 2
    replica.set_members(P, [1, 2])  # the next announcement
    assert 2 in replica.members


def test_an_inner_replica_stops_waiting_for_a_member_that_died_with_the_holder() -> None:
    """A holder and one of its children die together (one failure domain): the released
    replica must not wait for the dead child for good - it sends up what the live members
    delivered, the dead child absent (named by lineage), and finishes once they left."""
    sent: list[tuple[int, frozenset[int] | None]] = []
    replica = PositionReplica(
        P, lambda emit: barrier(lambda e, s: emit(e, s), local=False), inner=True
    )
    replica.set_members(P, [P, 1, 2])
    replica.offer(1, 0, snap_of(Counter(a=1)), lineage(1))
    replica.holder_gone()
    replica.release(0, lambda e, s, lin: sent.append((e, lin)))
    assert sent == []  # epoch 0 still waits for member 2
    assert replica.member_failed(2) and not replica.member_failed(2)
    assert sent == [(0, frozenset({1}))]
    assert replica.member_left(1) and replica.finished
