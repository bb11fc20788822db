"""Files only their owner may read: secrets read from them, raw log lines written to them.

Contract:

* :func:`read_private` reads a secret (the cluster secret, an API token) from a file and
  **refuses** (:class:`~agent.errors.ConfigError` naming the file, its mode and the fix) a file
  whose permissions let anyone but its owner read or write it. The one exception is the
  PostgreSQL rule for root-managed keys: a file owned by root may be group-readable (``0640``,
  ``root:elf``) so an administrator can hand it to the agent's group. The check is made on the
  opened file (``fstat``), so a swap between the check and the read is not possible. On
  platforms without POSIX modes (Windows) nothing is checked.
* :func:`open_private` opens a file for appending or writing that is created ``0600`` from the
  start (``os.open`` with the mode: there is no moment when it exists with wider permissions),
  and narrows an existing file to ``0600`` (a file an older version created ``0644``).
* :func:`private_dir` creates a directory ``0700`` (narrowing an existing one it owns).

Why refuse instead of warn: a secret readable by other local users is already disclosed; a
warning in a log nobody reads on the day it matters protects nothing, while a refusal at start
costs one ``chmod 600``. ``ssh`` refuses private keys the same way.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from agent.errors import ConfigError

PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700
_CHECK_MODES = os.name == "posix"


def insecure_mode(st: os.stat_result) -> bool:
    """Whether a file with status ``st`` may be read or written by someone but its owner (a
    root-owned file may be group-readable, nothing more: the PostgreSQL rule)."""
    if not _CHECK_MODES:
        return False
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid == 0 and not mode & 0o037:  # root:group 0640 or narrower
        return False
    return bool(mode & 0o077)


def read_private(path: str | os.PathLike[str], where: str) -> bytes:
    """The bytes of ``path`` (a secret), or :class:`ConfigError` naming ``where`` (the setting
    it came from) when it cannot be read or is readable by others (see module docstring)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if insecure_mode(st):
            mode = stat.S_IMODE(st.st_mode)
            raise ConfigError(
                f"{where}: {path} is readable by others (mode {mode:04o}); a secret file must "
                f"be private to its owner: chmod 600 {path}"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read()
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read {path}: {exc.strerror}") from None
    finally:
        os.close(fd)


def private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and parents) with mode ``0700``; an existing directory this process
    owns is narrowed to ``0700``. Returns it as a :class:`Path`."""
    p = Path(path)
    p.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    if _CHECK_MODES:
        with contextlib.suppress(OSError):  # not ours (a shared parent): leave it
            if p.stat().st_uid == os.geteuid():
                p.chmod(PRIVATE_DIR_MODE)
    return p


def open_private(path: str | os.PathLike[str], *, append: bool = True) -> int:
    """A file descriptor of ``path`` opened for writing (``append``: at its end, else
    truncated), created ``0600`` and narrowed to ``0600`` if it already existed wider. The
    caller closes it (``os.fdopen(fd, "ab")`` takes it over)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE_MODE)
    if _CHECK_MODES:
        try:
            if stat.S_IMODE(os.fstat(fd).st_mode) != PRIVATE_FILE_MODE:
                os.fchmod(fd, PRIVATE_FILE_MODE)
        except OSError:
            os.close(fd)
            raise
    return fd


def create_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to a **new** file ``path`` created ``0600`` (``O_EXCL``: an existing
    file, or a symlink planted in its place, is an error rather than overwritten)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
