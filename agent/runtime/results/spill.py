"""Spilled epoch results of one job's master: compressed snapshot bytes in files.

Contract: :class:`ResultSpill` owns one private directory (under ``parent``: the agent's data
directory's ``results/`` when it has one, else the system temp directory). :meth:`write`
stores ``Snapshot.to_bytes()`` output for (tree, epoch) atomically (a temporary file renamed
over the final name) with mode 0600 and returns its size; :meth:`read` returns the bytes
(raising ``OSError`` if the file is gone); :meth:`delete` removes one; :meth:`close` removes
the directory and everything in it (a stopped job leaves nothing behind). ``bytes_on_disk``
is what the files hold now. The bytes are the checksummed wire format, so a damaged file is
detected by ``Snapshot.from_bytes`` when read back. Nothing here is pickled.

This module does file I/O only; callers run it off the event loop (a thread).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path


class ResultSpill:
    """A job's spill directory (see module contract)."""

    def __init__(self, parent: str | os.PathLike[str] | None, job: str) -> None:
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True, mode=0o700)
        # the job name is user data: the directory is named by its hash, never by the name
        tag = hashlib.sha256(job.encode()).hexdigest()[:16]
        self.directory = tempfile.mkdtemp(prefix=f"results-{tag}-", dir=parent)
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.directory, True)
        self._sizes: dict[tuple[int, int], int] = {}
        self._lock = threading.Lock()  # writes run in threads; sizes are read on the loop

    def _path(self, tree: int, epoch: int) -> str:
        return os.path.join(self.directory, f"{tree:040x}-{epoch}.snap")

    @property
    def bytes_on_disk(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    @property
    def files(self) -> int:
        with self._lock:
            return len(self._sizes)

    def write(self, tree: int, epoch: int, data: bytes) -> int:
        """Store (tree, epoch)'s snapshot bytes; returns their size."""
        path = self._path(tree, epoch)
        tmp = f"{path}.tmp-{threading.get_ident()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with self._lock:
            self._sizes[(tree, epoch)] = len(data)
        return len(data)

    def read(self, tree: int, epoch: int) -> bytes:
        with open(self._path(tree, epoch), "rb") as f:
            return f.read()

    def delete(self, tree: int, epoch: int) -> None:
        with self._lock:
            self._sizes.pop((tree, epoch), None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(tree, epoch))

    def close(self) -> None:
        """Remove every spilled file and the directory."""
        with self._lock:
            self._sizes.clear()
        self._finalizer()
