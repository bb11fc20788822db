"""Spill store: compressed buffers written to files and read back on demand.

Contract: :meth:`SpillStore.write` atomically writes a compressed run's columns to a new
file in the store's private directory (temp file + ``os.replace``, so a crash never leaves a
half-written file under the final name) and returns its path; :meth:`read` returns exactly the
bytes written or raises :class:`~cbt.errors.SpillError` (missing, truncated, bad magic or
checksum mismatch); :meth:`delete` removes one file; :meth:`close` removes the directory. A
store that is garbage collected without ``close`` still removes its directory.

File layout (little-endian): ``b"CBTSPIL1"`` | u32 column count c | u32 CRC-32 of all
columns | c u64 column lengths | the columns (hashes, sizes, keys, values).
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import weakref
import zlib
from pathlib import Path

from cbt.errors import SpillError

_MAGIC = b"CBTSPIL1"
_HEADER = struct.Struct("<8sII")


class SpillStore:
    """A private directory of spill files under ``parent`` (a fresh temp dir if None)."""

    def __init__(self, parent: str | os.PathLike[str] | None = None) -> None:
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        self.directory = tempfile.mkdtemp(prefix="cbt-spill-", dir=parent)
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.directory, True)
        self._seq = 0
        self.files = 0
        self.bytes_on_disk = 0
        self.writes = 0
        self.reads = 0

    def write(self, cols: list[bytes]) -> str:
        self._seq += 1
        path = os.path.join(self.directory, f"run-{self._seq:08d}.cbt")
        crc = 0
        for col in cols:
            crc = zlib.crc32(col, crc)
        header = _HEADER.pack(_MAGIC, len(cols), crc) + struct.pack(
            f"<{len(cols)}Q", *map(len, cols)
        )
        tmp = path + ".tmp"
        # 0600 from the start: spilled keys and values are user data (the directory is 0700
        # already, mkdtemp's mode; the file mode keeps it private if the directory is moved)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            for col in cols:
                f.write(col)
        os.replace(tmp, path)
        self.files += 1
        self.writes += 1
        self.bytes_on_disk += len(header) + sum(map(len, cols))
        return path

    def read(self, path: str) -> list[bytes]:
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise SpillError(f"spill file {path} unreadable: {e}") from e
        if len(data) < _HEADER.size:
            raise SpillError(f"spill file {path} truncated: {len(data)} bytes, header incomplete")
        magic, ncols, crc = _HEADER.unpack_from(data)
        if magic != _MAGIC or ncols > 16:
            raise SpillError(f"spill file {path} has a bad header")
        pos = _HEADER.size + 8 * ncols
        if len(data) < pos:
            raise SpillError(f"spill file {path} truncated inside its header")
        lengths = struct.unpack_from(f"<{ncols}Q", data, _HEADER.size)
        if len(data) != pos + sum(lengths):
            raise SpillError(
                f"spill file {path} has {len(data)} bytes, expected {pos + sum(lengths)}"
            )
        cols = []
        check = 0
        for n in lengths:
            col = data[pos : pos + n]
            check = zlib.crc32(col, check)
            cols.append(col)
            pos += n
        if check != crc:
            raise SpillError(f"spill file {path} fails its CRC-32 check")
        self.reads += 1
        return cols

    def delete(self, path: str) -> None:
        try:
            size = os.path.getsize(path)
            os.remove(path)
        except FileNotFoundError:
            return
        self.files -= 1
        self.bytes_on_disk -= size

    def clear(self) -> None:
        for name in os.listdir(self.directory):
            os.remove(os.path.join(self.directory, name))
        self.files = 0
        self.bytes_on_disk = 0

    def close(self) -> None:
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive
