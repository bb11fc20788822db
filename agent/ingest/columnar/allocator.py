"""The C allocator tuned for chunked columnar work: freed chunk memory is kept for reuse.

Contract: :func:`keep_chunk_memory` sets glibc's ``M_MMAP_THRESHOLD`` (32 MiB) and
``M_TRIM_THRESHOLD`` (64 MiB) for the calling process, once, and says whether it could (False
on a C library without ``mallopt``: musl, macOS; nothing changes there). The agent daemon,
the parallel ingest's worker processes and ``elf run`` call it at start.

Why: every columnar chunk allocates and frees the same few buffers of 1-8 MiB (the chunk's
bytes, the numpy positions, Arrow's temporaries). With glibc's defaults such a buffer is
``mmap``-ed and unmapped again, or the heap top above 128 KiB is trimmed back to the kernel,
so the next chunk page-faults its memory in afresh: measured at 20-25 % of a worker
process's time (nginx status query, 4 MiB chunks: 205 ms of CPU per 200 000 lines with the
defaults, 155 ms with these settings, same process, same chunks). Fixed thresholds keep those
buffers in the heap. Memory bound: memory is returned to the kernel once 64 MiB is free at
the heap's top, so a process's RSS stays at most 64 MiB above what it uses; what it uses is
bounded by the chunk size and the CBT budget (docs/ingest.md, "Memory").
"""

from __future__ import annotations

import ctypes
import ctypes.util

#: glibc's mallopt parameter numbers (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's upper limit for this setting on 64-bit
TRIM_THRESHOLD_BYTES = 64 << 20

_done: bool | None = None


def keep_chunk_memory() -> bool:
    """Apply the settings (see module docstring); True when the C library took them."""
    global _done
    if _done is not None:
        return _done
    _done = False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    ok = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1 and ok
    _done = ok
    return ok
