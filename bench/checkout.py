"""A git commit of this repository as a directory, for benchmarks that run a baseline's
agents side by side with this tree's (``LocalCluster(cwd=...)``)."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[Path]:
    """This repository's tree at ``ref``, extracted into a temporary directory (``git
    archive``: no worktree left behind)."""
    repo = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="elf-baseline-") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", ref],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)
