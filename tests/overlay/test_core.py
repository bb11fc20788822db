"""Sans-IO pieces: ids, wire framing, prefix routing table, leaf set, failure detector."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from overlay import MessageTooLarge, NodeInfo, Tunables, key_for
from overlay.ids import MAX_ID, digit, from_bytes, shared_prefix_digits, to_bytes
from overlay.leafset import LeafSet
from overlay.membership import Membership
from overlay.routing import PrefixTable
from overlay.wire import REQUEST, RESPONSE, Codec, InProcessCodec, WireError

ids160 = st.integers(min_value=0, max_value=MAX_ID)
SECRET = b"0123456789abcdef0123456789abcdef"


def info(i: int) -> NodeInfo:
    return NodeInfo(i, "10.0.0.1", 1 + i % 60000)


@given(ids160, ids160, ids160)
def test_longer_shared_prefix_is_xor_closer(a: int, b: int, k: int) -> None:
    if shared_prefix_digits(a, k) > shared_prefix_digits(b, k):
        assert a ^ k < b ^ k


@given(ids160)
def test_id_bytes_round_trip_and_digits(a: int) -> None:
    assert from_bytes(to_bytes(a)) == a
    assert "".join(f"{digit(a, i):x}" for i in range(40)) == f"{a:040x}"


def test_key_for_is_sha1() -> None:
    assert key_for("abc") == 0xA9993E364706816ABA3E25717850C26C9CD0D89D


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_wire_round_trip_and_rejections() -> None:
    clock = Clock()
    codec = Codec(SECRET, clock=clock, max_datagram=1024, max_skew=30)
    data = codec.encode(REQUEST, [b"12345678", "ping", [b"x" * 20, "h", 1, "d"], [[]]])
    frame = codec.decode(data)
    assert frame.type == REQUEST and frame.payload[1] == "ping"
    with pytest.raises(WireError, match="replay"):
        codec.decode(data)
    tampered = bytearray(codec.encode(RESPONSE, [b"12345678", True, 1]))
    tampered[25] ^= 1
    with pytest.raises(WireError, match="bad_mac"):
        codec.decode(bytes(tampered))
    old = codec.encode(RESPONSE, [b"12345678", True, 1])
    clock.now += 31
    with pytest.raises(WireError, match="stale_timestamp"):
        codec.decode(old)
    with pytest.raises(MessageTooLarge):
        codec.encode(RESPONSE, [b"12345678", True, b"x" * 1000])
    with pytest.raises(WireError, match="too_large"):
        codec.decode(b"x" * 1025)
    with pytest.raises(WireError, match="malformed"):
        codec.decode(b"x" * 10)
    assert len(codec.replays) == 1
    clock.now += 61  # nonces expire after 2 × skew
    codec.decode(codec.encode(RESPONSE, [b"12345678", True, 1]))
    assert len(codec.replays) == 1


def test_in_process_codec_keeps_the_payload_checks_and_the_wire_size() -> None:
    clock = Clock()
    codec = InProcessCodec(SECRET, clock=clock, max_datagram=1024, max_skew=30)
    wire = Codec(SECRET, clock=clock, max_datagram=1024, max_skew=30)
    payload = [b"12345678", "ping", [b"x" * 20, "h", 1, "d"], [[("a", 1)]]]
    env = codec.encode(REQUEST, payload)
    assert len(env) == len(wire.encode(REQUEST, payload))  # metrics count real sizes
    frame = codec.decode(env)
    assert frame.type == REQUEST
    assert frame.payload == [b"12345678", "ping", [b"x" * 20, "h", 1, "d"], [[["a", 1]]]]
    with pytest.raises(WireError, match="bad_mac"):  # another cluster's secret
        InProcessCodec(b"another-secret-0123456789", clock=clock).decode(env)
    with pytest.raises(MessageTooLarge):
        codec.encode(RESPONSE, [b"12345678", True, b"x" * 1000])
    with pytest.raises(WireError, match="malformed"):
        codec.decode(codec.encode(RESPONSE, [b"1234", True, 1]))
    # raw bytes (a forged or foreign datagram) still get every check of the real codec
    with pytest.raises(WireError, match="bad_mac"):
        codec.decode(b"x" * 100)
    assert codec.decode(wire.encode(RESPONSE, [b"12345678", True, 1])).payload[2] == 1


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_next_hop_corrects_a_digit_and_always_gets_closer(seed: int) -> None:
    rng = random.Random(seed)
    me = rng.getrandbits(160)
    table = PrefixTable(me, slot_capacity=2)
    known = [rng.getrandbits(160) for _ in range(300)]
    for i in known:
        table.add(info(i))
    assert len(table) <= 2 * 15 * 40
    for _ in range(20):
        key = rng.getrandbits(160)
        nh = table.next_hop(key)
        if nh is None:
            assert all((i ^ key) >= (me ^ key) for i in table._all)
            continue
        assert nh.id ^ key < me ^ key
        p = shared_prefix_digits(me, key)
        if any(shared_prefix_digits(i.id, key) > p for i in table):
            assert shared_prefix_digits(nh.id, key) > p


def test_designated_entry_is_per_node_not_per_key() -> None:
    # Two nodes with the same first digit route to different entries of the same slot.
    rng = random.Random(1)
    targets = [info((0x3 << 156) | rng.getrandbits(156)) for _ in range(40)]
    a = PrefixTable(0x1 << 156 | rng.getrandbits(156))
    b = PrefixTable(0x1 << 156 | rng.getrandbits(156))
    for t in targets:
        a.add(t)
        b.add(t)
    key = 0x3 << 156
    assert a.next_hop(key).id != b.next_hop(key).id


def test_prefix_table_remove_keeps_designated_valid() -> None:
    rng = random.Random(2)
    me = rng.getrandbits(160)
    table = PrefixTable(me, slot_capacity=3)
    nodes = [info(rng.getrandbits(160)) for _ in range(100)]
    for n in nodes:
        table.add(n)
    for n in list(table):
        table.remove(n.id)
        for d in table.designated():
            assert d.id in table
    assert len(table) == 0 and table.designated() == []


def test_leaf_set_keeps_k_closest() -> None:
    rng = random.Random(3)
    me = rng.getrandbits(160)
    ls = LeafSet(me, 8)
    nodes = [info(rng.getrandbits(160)) for _ in range(50)]
    for n in nodes:
        ls.offer(n)
    expect = sorted(nodes, key=lambda n: n.id ^ me)[:8]
    assert ls.members() == expect
    ls.remove(expect[0].id)
    rest = [n for n in nodes if n is not expect[0]]
    ls.rebuild(rest)
    assert ls.members() == sorted(rest, key=lambda n: n.id ^ me)[:8]


def test_failure_detector_needs_several_misses_then_timeout() -> None:
    t = Tunables(misses_before_suspect=3, fail_timeout=2.0, tombstone_ttl=10)
    m = Membership(0, t)
    peer = info(5)
    assert m.learn(peer, 0.0, direct=True) == "new"
    assert not m.missed(5, 1.0) and not m.missed(5, 1.5)
    assert m.heard(5, 1.6) is False  # reply resets the miss count
    assert not m.missed(5, 2.0) and not m.missed(5, 2.1)
    assert m.missed(5, 2.2) and m.is_suspected(5)
    assert m.due_failures(3.0) == []
    assert m.due_failures(4.2) == [5]
    m.remove(5, 4.2, "failed")
    assert m.learn(peer, 5.0, direct=False) is None  # tombstoned against second-hand news
    assert m.learn(peer, 5.0, direct=True) == "new"  # but the node itself may come back
    rumours = m.take_rumours()
    assert rumours == [] or rumours[0][0] == "failed"


def test_rumours_ignored_for_recently_heard_and_self() -> None:
    m = Membership(0, Tunables(fail_timeout=2.0))
    m.learn(info(9), 10.0, direct=True)
    assert not m.accept_rumour("failed", 9, 11.0)
    assert not m.accept_rumour("failed", 0, 11.0)
    assert m.accept_rumour("failed", 9, 13.0)
    assert [r[0] for r in m.take_rumours()] == ["failed"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=63), max_size=60), st.integers(0, 2**32))
def test_indexed_crawl_heap_matches_kademlia_heap(pushes: list[int], seed: int) -> None:
    """The set-indexed heap installed for kademlia's crawler behaves like the package's own
    (linear-scan) NodeHeap: same members, same order, same pops and removals."""
    from kademlia.node import Node, NodeHeap

    from overlay.kademlia_compat import IndexedNodeHeap

    rng = random.Random(seed)
    me = Node(to_bytes(rng.getrandbits(160)))
    pool = [Node(to_bytes(rng.getrandbits(160)), "10.0.0.1", 7000 + i) for i in range(64)]
    ref, fast = NodeHeap(me, 20), IndexedNodeHeap(me, 20)
    for step, i in enumerate(pushes):
        batch = [pool[i], pool[(i * 7) % 64]]
        ref.push(batch)
        fast.push(batch)
        if step % 9 == 4:
            gone = [pool[i].id]
            ref.remove(gone)
            fast.remove(gone)
        if step % 11 == 10:
            assert ref.popleft().id == fast.popleft().id
        assert [n.id for n in ref] == [n.id for n in fast]
        assert all((n in ref) == (n in fast) for n in pool)
        assert [n.id for n in ref.get_uncontacted()] == [n.id for n in fast.get_uncontacted()]


def test_kademlia_shim_is_installed_by_start_not_by_import() -> None:
    """Importing the overlay leaves kademlia alone; install() (what OverlayNode.start calls)
    swaps in the indexed heap and is idempotent. A fresh interpreter: this one has started
    nodes already."""
    import subprocess
    import sys

    script = (
        "import kademlia.crawling as kc\n"
        "import overlay\n"
        "from overlay import kademlia_compat as k\n"
        "assert kc.NodeHeap is not k.IndexedNodeHeap, 'patched at import time'\n"
        "k.install()\n"
        "k.install()\n"
        "assert kc.NodeHeap is k.IndexedNodeHeap\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_every_overlay_exception_derives_from_overlay_error() -> None:
    import importlib
    import inspect
    import pkgutil

    import overlay
    from overlay import OverlayError

    found = []
    for mod in pkgutil.iter_modules(overlay.__path__):
        module = importlib.import_module(f"overlay.{mod.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__.startswith("overlay"):
                found.append(cls)
                assert issubclass(cls, OverlayError), cls
    assert len(found) >= 8  # the API errors, WireError, SimulationStalled


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0, max_value=2**32), st.integers(min_value=0, max_value=60))
@example(23, 4)  # found by a CI run: the live hop differs from a fresh table's
def test_suspected_contacts_are_the_last_resort_before_this_node_is_the_root(
    seed: int, suspected: int
) -> None:
    """overlay/neighbourhood.py: with some contacts retired on suspicion and some failed,
    ``next_hop`` is a live contact when one is closer, else the closest closer suspect, else
    None; every hop is strictly closer to the key (no loops)."""
    from overlay.neighbourhood import Neighbourhood

    rng = random.Random(seed)
    me = rng.getrandbits(160)
    hood = Neighbourhood(me, slot_capacity=2, leaf_set_size=8)
    for i in [rng.getrandbits(160) for _ in range(120)]:
        hood.admit(info(i))
    contacts = [c.id for c in hood.contacts()]
    rng.shuffle(contacts)
    suspects = set(contacts[:suspected])
    failed = set(contacts[suspected : suspected + 10])
    for i in suspects:
        hood.retire(i, suspected=True)
    for i in failed:
        hood.retire(i)
    reference = Neighbourhood(me, slot_capacity=2, leaf_set_size=8)  # live contacts only
    for c in hood.contacts():
        reference.admit(c)
    for _ in range(30):
        key = rng.getrandbits(160)
        hop = hood.next_hop(key)
        live = reference.next_hop(key)
        closer_suspects = [s for s in suspects if s ^ key < me ^ key]
        if live is not None:
            # a live contact closer to the key (not necessarily the fresh table's choice: which
            # contacts sit in the leaf set and which in the prefix table depends on the order
            # they came and went - seen with seed 23, 4 suspects)
            assert hop is not None and hop.id not in suspects
        elif closer_suspects:
            assert hop is not None and hop.id == min(closer_suspects, key=lambda s: s ^ key)
        else:
            assert hop is None
        assert hop is None or hop.id ^ key < me ^ key
        assert hop is None or hop.id not in failed
