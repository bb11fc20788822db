"""Vetting untrusted DataSketches binaries before the C++ decoder sees them.

Contract: :func:`check_kll`, :func:`check_hll` and :func:`check_frequent` take the bytes of a
serialized sketch (from a peer, a checkpoint, a spill file) and return ``None`` when they are
a well-formed sketch of the exact layout :mod:`cbt.sketches` writes, or a string saying what is
wrong. They read the preamble and every length and index the decoder would trust: the
DataSketches C++ deserializers are not hardened against hostile input (fuzzing this binding
5.2 with mutated valid binaries crashed the process with SIGSEGV in
``kll_doubles_sketch.deserialize`` — a ``levels`` array out of order or past the capacity —
and in ``hll_union.update`` of a corrupted HLL), so no byte reaches them unchecked.

Layouts (little-endian; DataSketches' documented serialization, the same in Java and C++):

* KLL doubles, compact: 8-byte preamble (preamble ints, serial version 1 or 2, family 15,
  flags, k: u16, m: u8, unused); empty: nothing more; single item (flag bit 2): one double;
  else n: u64, min_k: u16, num_levels: u8, unused, ``num_levels`` u32 level offsets, min,
  max, then the retained doubles from ``levels[0]`` to the capacity that k, m and
  num_levels imply (:func:`kll_capacity`).
* HLL, compact, HLL_8 only: 8-byte preamble (preamble ints, serial version 1, family 7,
  lg_k, lg_arr, flags, list count / cur_min, mode byte: mode in bits 0-1, target type in
  bits 2-3); LIST mode: ``count`` u32 coupons; SET mode: count: u32 then coupons; HLL mode:
  HIP and kxq doubles, num_at_cur_min: u32, aux count: u32 (0 for HLL_8), ``2**lg_k`` one-byte
  registers.
* Frequent items (strings): preamble ints 1 (empty) or 4, serial version 1, family 10,
  lg_max_map_size, lg_cur_map_size, flags, unused; then num_active: u32, unused, stream
  weight: u64, offset: u64, ``num_active`` u64 weights, ``num_active`` strings (u32 length,
  UTF-8 bytes).
"""

from __future__ import annotations

import itertools
import math
import struct
from typing import NamedTuple

import numpy as np

_POW3 = [3**i for i in range(31)]
_KLL_MAX_LEVELS = 61
_HLL_MODE_LIST, _HLL_MODE_SET, _HLL_MODE_HLL = 0, 1, 2
_HLL_8 = 2
_HLL_FLAG_EMPTY, _HLL_FLAG_COMPACT, _HLL_FLAG_OUT_OF_ORDER = 4, 8, 16
_HLL_LIST_MAX = 8  # a LIST holds fewer than 8 coupons, then becomes a SET


def _cap_aux_aux(k: int, depth: int) -> int:
    return (((k << 1) << depth) // _POW3[depth] + 1) >> 1


def _cap_aux(k: int, depth: int) -> int:
    if depth <= 30:
        return _cap_aux_aux(k, depth)
    half = depth // 2
    return _cap_aux_aux(_cap_aux_aux(k, half), depth - half)


class _Family(NamedTuple):
    """What the first 8 bytes of one sketch family must say before any other byte is read."""

    id: int
    name: str
    layout: str  # the preamble's struct format: preamble ints, serial version, family, ...
    param: str  # the parameter the job fixes (k, lg_k, lg_max_map_size)
    param_at: int  # its index among the preamble's fields
    version_1: bool  # serial version 1 only (KLL checks its versions per layout)


_KLL = _Family(15, "KLL", "<BBBBHB", "k", 4, False)
_HLL = _Family(7, "HLL", "<8B", "lg_k", 3, True)
_FREQUENT = _Family(10, "frequent items", "<6B", "lg_max_map_size", 3, True)


def _preamble(blob: bytes, family: _Family, want: int) -> tuple[int, ...] | str:
    """The preamble's fields, or what is wrong: too short, another family, another serial
    version, another parameter than the job's ``want``."""
    if len(blob) < 8:
        return f"{len(blob)} bytes is shorter than the preamble"
    fields = struct.unpack_from(family.layout, blob)
    ver, fam, param = fields[1], fields[2], fields[family.param_at]
    if fam != family.id:
        return f"family id {fam}, expected {family.id} ({family.name})"
    if family.version_1 and ver != 1:
        return f"serial version {ver}, expected 1"
    if param != want:
        return f"{family.param}={param}, this job's sketches have {family.param}={want}"
    return fields


def kll_capacity(k: int, m: int, num_levels: int) -> int:
    """The item capacity of a KLL sketch (DataSketches' ``compute_total_capacity``)."""
    return sum(max(m, _cap_aux(k, num_levels - h - 1)) for h in range(num_levels))


def check_kll(blob: bytes, k: int) -> str | None:
    """None if ``blob`` is a well-formed compact KLL doubles sketch of ``k`` (module doc)."""
    head = _preamble(blob, _KLL, k)
    if isinstance(head, str):
        return head
    size = len(blob)
    pre, ver, _, flags, _, m = head
    if m != 8:
        return f"m={m}, expected 8"
    if flags & ~0b111:
        return f"unknown flags {flags:#x}"
    if flags & 1:  # empty
        return None if (pre, size) == (2, 8) and ver in (1, 2) else "malformed empty sketch"
    if flags & 4:  # single item
        if (pre, ver, size) != (2, 2, 16):
            return "malformed single-item sketch"
        return None if not math.isnan(struct.unpack_from("<d", blob, 8)[0]) else "NaN item"
    if (pre, ver) != (5, 1) or size < 20:
        return f"preamble ints {pre} / serial version {ver} of a full sketch, expected 5 / 1"
    n, min_k, num_levels = struct.unpack_from("<QHB", blob, 8)
    if not 1 <= num_levels <= _KLL_MAX_LEVELS:
        return f"{num_levels} levels"
    if not 8 <= min_k <= k:
        return f"min_k={min_k} outside [8, k]"
    head = 20 + 4 * num_levels
    if size < head + 16:
        return f"{size} bytes cannot hold {num_levels} levels"
    levels = list(struct.unpack_from(f"<{num_levels}I", blob, 20))
    capacity = kll_capacity(k, m, num_levels)
    levels.append(capacity)
    if any(a > b for a, b in itertools.pairwise(levels)):
        return "level offsets out of order or past the capacity"
    retained = capacity - levels[0]
    if size != head + 16 + 8 * retained:
        return f"{size} bytes, {head + 16 + 8 * retained} expected for {retained} items"
    if retained == 0 or n < retained:
        return f"n={n} with {retained} retained items"
    values = np.frombuffer(blob, dtype="<f8", offset=head)
    if np.isnan(values).any():
        return "NaN items"
    lo, hi, items = values[0], values[1], values[2:]
    if lo > hi or items.min() < lo or items.max() > hi:
        return "items outside the sketch's min and max"
    return None


def check_hll(blob: bytes, lg_k: int) -> str | None:
    """None if ``blob`` is a well-formed compact HLL_8 sketch of ``lg_k`` (module doc)."""
    head = _preamble(blob, _HLL, lg_k)
    if isinstance(head, str):
        return head
    size = len(blob)
    pre, _, _, _, lg_arr, flags, count, mode_byte = head
    mode, tgt = mode_byte & 3, (mode_byte >> 2) & 3
    if mode_byte >> 4 or tgt != _HLL_8:
        return f"mode byte {mode_byte:#x}: only compact HLL_8 sketches are read"
    if flags & ~(_HLL_FLAG_EMPTY | _HLL_FLAG_COMPACT | _HLL_FLAG_OUT_OF_ORDER) or not (
        flags & _HLL_FLAG_COMPACT
    ):
        return f"flags {flags:#x}: only compact sketches are read"
    if mode == _HLL_MODE_LIST:
        if pre != 2 or lg_arr != 3 or count >= _HLL_LIST_MAX:
            return "malformed LIST preamble"
        if flags & _HLL_FLAG_EMPTY and count:
            return "an empty sketch with coupons"
        return _check_coupons(blob, 8, count)
    if mode == _HLL_MODE_SET:
        if pre != 3 or size < 12 or not 5 <= lg_arr <= 26:
            return "malformed SET preamble"
        (n,) = struct.unpack_from("<I", blob, 8)
        if n * 4 > 3 * (1 << lg_arr) or n < _HLL_LIST_MAX:
            return f"{n} coupons in a set of 2**{lg_arr} slots"
        return _check_coupons(blob, 12, n)
    if mode != _HLL_MODE_HLL or pre != 10:
        return f"mode {mode} with {pre} preamble ints"
    if count != 0:
        return f"cur_min {count}, 0 in HLL_8"
    if size != 40 + (1 << lg_k):
        return f"{size} bytes, {40 + (1 << lg_k)} expected for 2**{lg_k} registers"
    hip, kxq0, kxq1 = struct.unpack_from("<3d", blob, 8)
    at_min, aux = struct.unpack_from("<II", blob, 32)
    if aux != 0:
        return "aux entries in an HLL_8 sketch"
    if not all(math.isfinite(x) and x >= 0 for x in (hip, kxq0, kxq1)):
        return "non-finite or negative estimator state"
    regs = np.frombuffer(blob, dtype=np.uint8, offset=40)
    if int(regs.max()) > 64 - lg_k + 1:
        return "register values past 64 - lg_k + 1"
    if int(np.count_nonzero(regs == 0)) != at_min:
        return "num_at_cur_min does not match the registers"
    return None


def canonical_hll(blob: bytes) -> bytes:
    """``blob`` (a compact HLL_8) as a function of its registers or coupons alone.

    A compact SET lists its coupons in hash-table order, which depends on the insertion
    history: sorted, equal sketches give equal bytes (deserializing re-inserts them, so the
    order carries nothing). A dense sketch fed values directly carries its HIP accumulator
    and estimates with it, one that went through a union is flagged out of order and uses the
    composite estimator on its registers: the same registers could give two estimates
    depending on the tree's shape. Marked out of order with a zero HIP accumulator, every
    copy estimates from the registers (Spark reading the lake too)."""
    mode = blob[7] & 3 if len(blob) >= 8 else -1
    if mode == _HLL_MODE_HLL and len(blob) >= 16:
        flags = blob[5] | _HLL_FLAG_OUT_OF_ORDER
        return blob[:5] + bytes([flags]) + blob[6:8] + bytes(8) + blob[16:]
    offset = {_HLL_MODE_LIST: 8, _HLL_MODE_SET: 12}.get(mode)
    if offset is None or len(blob) <= offset:
        return blob
    coupons = np.sort(np.frombuffer(blob, dtype="<u4", offset=offset))
    return blob[:offset] + coupons.astype("<u4").tobytes()


def canonical_frequent(blob: bytes) -> bytes:
    """``blob`` (a frequent-strings sketch) with its items in ascending order of their UTF-8
    bytes (the map's order depends on the insertion history; deserializing re-inserts them)."""
    if len(blob) < 32 or blob[0] != 4:
        return blob
    (active,) = struct.unpack_from("<I", blob, 8)
    weights = struct.unpack_from(f"<{active}Q", blob, 32)
    pos, items = 32 + 8 * active, []
    for _ in range(active):
        (length,) = struct.unpack_from("<I", blob, pos)
        items.append(blob[pos + 4 : pos + 4 + length])
        pos += 4 + length
    order = sorted(range(active), key=items.__getitem__)
    out = [blob[:32], struct.pack(f"<{active}Q", *(weights[i] for i in order))]
    for i in order:
        out += [struct.pack("<I", len(items[i])), items[i]]
    return b"".join(out)


def _check_coupons(blob: bytes, offset: int, n: int) -> str | None:
    if len(blob) != offset + 4 * n:
        return f"{len(blob)} bytes, {offset + 4 * n} expected for {n} coupons"
    coupons = np.frombuffer(blob, dtype="<u4", offset=offset)
    values = coupons >> 26
    if n and (int(values.min()) < 1 or int(values.max()) > 63):
        return "coupon values outside [1, 63]"
    if len(np.unique(coupons)) != n:
        return "duplicate coupons"
    return None


def check_frequent(blob: bytes, lg_max_map_size: int) -> str | None:
    """None if ``blob`` is a well-formed frequent-strings sketch of ``lg_max_map_size``."""
    head = _preamble(blob, _FREQUENT, lg_max_map_size)
    if isinstance(head, str):
        return head
    size = len(blob)
    pre, _, _, lg_max, lg_cur, flags = head
    if not 3 <= lg_cur <= lg_max:
        return f"lg_cur_map_size={lg_cur} outside [3, {lg_max}]"
    if flags & ~0b101:
        return f"unknown flags {flags:#x}"
    if flags & 0b101:  # empty
        return None if (pre, size) == (1, 8) else "malformed empty sketch"
    if pre != 4 or size < 32:
        return f"{pre} preamble ints in a non-empty sketch, expected 4"
    (active,) = struct.unpack_from("<I", blob, 8)
    total, _offset = struct.unpack_from("<QQ", blob, 16)
    if not 1 <= active <= 3 * (1 << lg_cur) // 4:
        return f"{active} active items in a map of 2**{lg_cur} slots"
    pos = 32 + 8 * active
    if size < pos + 4 * active:
        return f"{size} bytes cannot hold {active} items"
    weights = np.frombuffer(blob, dtype="<u8", offset=32, count=active)
    if int(weights.min()) == 0 or int(weights.sum(dtype=np.uint64)) > total or total >= 1 << 62:
        return "item weights are zero or exceed the stream weight"
    seen = set()
    for _ in range(active):
        if pos + 4 > size:
            return "item lengths run past the end"
        (length,) = struct.unpack_from("<I", blob, pos)
        pos += 4
        if pos + length > size:
            return "an item runs past the end"
        try:
            item = blob[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError:
            return "an item is not UTF-8"
        if item in seen:
            return "duplicate items"
        seen.add(item)
        pos += length
    if pos != size:
        return f"{size - pos} bytes after the last item"
    return None
