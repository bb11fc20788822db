"""Wake-ups when a tailed file's directory changes (Linux inotify), shared per event loop.

Contract: :func:`watch_file` ``(path, on_change)`` asks the kernel to report changes in the
directory holding ``path`` (a write, a create, a move in or out, a delete, an attribute change:
what appending, rotating, truncating or re-creating a log does) and returns a
:class:`FileWatch` handle, or ``None`` when it cannot: not Linux, no running event loop,
``inotify_simple`` missing, or the kernel's limits reached (``fs.inotify.max_user_instances``,
``max_user_watches``). ``on_change()`` then runs **on the event loop** after such a change,
as a hint only: it carries no data and may be spurious (another file of the directory) or
coalesced (many writes, one call). A subscriber therefore still checks the file itself, and
keeps a slow safety poll (the tick loop's ``IDLE_TICK_SECONDS``) for what inotify cannot see
(a file on a network file system, a queue overflow that lost an event it then reports to
every subscriber). ``None`` means: poll as before.

Why: an agent that tails a quiet log used to wake every ``tick_seconds`` (0.1 s) to ``stat``
it; with hundreds of logical agents per process that was the largest idle cost of a job
(issue "A lightweight agent"). All the logical agents of a process share one inotify
descriptor (one ``add_reader`` on the loop) and one kernel watch per directory; the default
``max_user_instances`` is 128 per user, so one per agent would not scale. Bounds: one
descriptor per event loop, one watch per distinct directory, a subscriber list per watch;
a read drains at most ``READ_BYTES`` per wake-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import weakref
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

READ_BYTES = 64 * 1024  # drained per wake-up; more stays queued in the kernel for the next

# ``inotify_simple.flags`` values (inotify.h), spelled here so a missing library costs nothing
_MODIFY, _ATTRIB, _CLOSE_WRITE = 0x2, 0x4, 0x8
_MOVED_FROM, _MOVED_TO, _CREATE, _DELETE = 0x40, 0x80, 0x100, 0x200
_DELETE_SELF, _MOVE_SELF, _Q_OVERFLOW, _IGNORED = 0x400, 0x800, 0x4000, 0x8000
WATCHED = (
    _MODIFY | _ATTRIB | _CLOSE_WRITE | _MOVED_FROM | _MOVED_TO | _CREATE | _DELETE
    | _DELETE_SELF | _MOVE_SELF
)  # fmt: skip

_BY_LOOP: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWatcher] = (
    weakref.WeakKeyDictionary()
)


class FileWatch:
    """One subscription (:func:`watch_file`); :meth:`close` ends it (idempotent)."""

    def __init__(self, owner: _LoopWatcher, directory: str, on_change: Callable[[], None]) -> None:
        self._owner: _LoopWatcher | None = owner
        self.directory = directory
        self.on_change = on_change

    @property
    def active(self) -> bool:
        """False once closed, or once the kernel dropped the watch (its directory went away):
        the subscriber is back to polling."""
        return self._owner is not None

    def close(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.unsubscribe(self)


def watch_file(path: str, on_change: Callable[[], None]) -> FileWatch | None:
    """Subscribe ``on_change`` to changes of ``path``'s directory (module contract), or
    ``None`` where inotify cannot serve (the caller polls)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    watcher = _BY_LOOP.get(loop)
    if watcher is None:
        watcher = _LoopWatcher.open(loop)
        if watcher is None:
            return None
        _BY_LOOP[loop] = watcher
    return watcher.subscribe(os.path.dirname(os.path.abspath(path)) or "/", on_change)


class _LoopWatcher:
    """The inotify descriptor of one event loop and its watches (private to this module)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, inotify: Any) -> None:
        self.loop = loop
        self.inotify = inotify
        self.wd_of: dict[str, int] = {}
        self.subscribers: dict[int, list[FileWatch]] = {}
        self.reading = False

    @classmethod
    def open(cls, loop: asyncio.AbstractEventLoop) -> _LoopWatcher | None:
        try:
            import inotify_simple
        except ImportError:
            return None
        try:
            inotify = inotify_simple.INotify(nonblocking=True)
        except OSError as exc:  # not Linux, or max_user_instances reached
            log.warning("file changes are polled (inotify unavailable: %s)", exc)
            return None
        return cls(loop, inotify)

    def subscribe(self, directory: str, on_change: Callable[[], None]) -> FileWatch | None:
        wd = self.wd_of.get(directory)
        if wd is None:
            try:
                wd = self.inotify.add_watch(directory, WATCHED)
            except OSError as exc:  # no such directory yet, or max_user_watches reached
                log.info("changes in %s are polled (no inotify watch: %s)", directory, exc)
                return None
            self.wd_of[directory] = wd
            self.subscribers[wd] = []
        handle = FileWatch(self, directory, on_change)
        self.subscribers[wd].append(handle)
        if not self.reading:
            self.loop.add_reader(self.inotify.fileno(), self.drain)
            self.reading = True
        return handle

    def unsubscribe(self, handle: FileWatch) -> None:
        wd = self.wd_of.get(handle.directory)
        if wd is None:
            return
        subs = self.subscribers[wd]
        with contextlib.suppress(ValueError):
            subs.remove(handle)
        if subs:
            return
        del self.subscribers[wd], self.wd_of[handle.directory]
        with contextlib.suppress(OSError):  # the directory is gone: the kernel dropped it
            self.inotify.rm_watch(wd)
        self._stop_reading_when_idle()

    def _stop_reading_when_idle(self) -> None:
        if not self.subscribers and self.reading:
            self.loop.remove_reader(self.inotify.fileno())
            self.reading = False

    def drain(self) -> None:
        """Loop callback: read the queued events and tell each affected subscriber once."""
        try:
            data = os.read(self.inotify.fileno(), READ_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:  # the descriptor broke: everybody polls from now on
            log.warning("inotify read failed, file changes are polled: %r", exc)
            self.loop.remove_reader(self.inotify.fileno())
            self.reading = False
            self._notify(list(self.subscribers))
            return
        wds: set[int] = set()
        dropped: list[int] = []
        overflow = False
        offset = 0
        while offset + 16 <= len(data):  # struct inotify_event: wd, mask, cookie, len, name
            wd = int.from_bytes(data[offset : offset + 4], "little", signed=True)
            mask = int.from_bytes(data[offset + 4 : offset + 8], "little")
            size = int.from_bytes(data[offset + 12 : offset + 16], "little")
            offset += 16 + size
            if mask & _Q_OVERFLOW:
                overflow = True
            elif wd in self.subscribers:
                wds.add(wd)
            if mask & _IGNORED and wd in self.subscribers:
                dropped.append(wd)
        self._notify(list(self.subscribers) if overflow else sorted(wds))
        for wd in dropped:
            self._forget(wd)

    def _forget(self, wd: int) -> None:
        """The kernel dropped watch ``wd`` (its directory went away): its subscribers, told
        of the change just now, are inactive from here on and poll."""
        for handle in self.subscribers.pop(wd, []):
            handle._owner = None
        for directory, w in list(self.wd_of.items()):
            if w == wd:
                del self.wd_of[directory]
        self._stop_reading_when_idle()

    def _notify(self, wds: list[int]) -> None:
        for wd in wds:
            for handle in list(self.subscribers.get(wd, ())):
                try:
                    handle.on_change()
                except Exception:  # one subscriber's bug must not stop the others' wake-ups
                    log.exception("file change callback failed")
