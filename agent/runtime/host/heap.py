"""Giving freed memory back to the operating system after a job stops.

Contract: :func:`trim_heap` asks the C allocator to return free heap pages (glibc's
``malloc_trim(0)``) and reports whether it could. A stopped job's snapshots are freed at once
(``JobRuntime.release``), but glibc keeps freed arenas mapped, so without a trim the agent's
RSS would not shrink although the memory is free for reuse. On other C libraries it does
nothing and returns False. It takes milliseconds (it walks the free lists), so it runs once
per stopped job, never per epoch.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # musl and others have no malloc_trim
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Return free heap memory to the OS if the C library can; True if it tried."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
