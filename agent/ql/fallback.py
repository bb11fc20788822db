"""The Arrow path's way out: :class:`Unsupported`, raised where a chunk cannot be evaluated
exactly on Arrow, so the caller runs the row path for it.

Contract: importing this module loads nothing heavy (no pyarrow, no numpy), so the callers
that only catch it - the epoch worker, the tailer, the columnar readers - do not pull the
Arrow stack into an agent that has not met a columnar batch yet (``docs/agent-runtime.md``,
"Scale": heavy libraries load where used).
"""

from __future__ import annotations


class Unsupported(Exception):
    """This chunk cannot be evaluated exactly on Arrow; run it on the row path."""
