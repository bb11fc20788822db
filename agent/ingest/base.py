"""What every record input is: the :class:`Input` protocol, the :class:`Resumable` protocol of
inputs whose read position survives a restart, and :class:`RecordBatch`.

Contract of an :class:`Input`: ``poll()`` returns the records available now (never blocks,
never raises on bad data), ``batches()`` is an async iterator of non-empty record lists,
``stats()`` a JSON-able dict, ``close()`` releases resources. Lines are parsed by a
:class:`~agent.ingest.records.LineParser` (default: JSON lines with a ``ts`` timestamp; log
formats in :mod:`agent.ingest.formats`); bad lines are counted and quarantined
(:class:`~agent.ingest.records.Quarantine`, with a dead-letter file under the data directory,
see :func:`~agent.ingest.inputs.open_input`); they never stop an input.

A :class:`Resumable` input also has ``state()``: a JSON-able dict saying where a restarted
input should resume. Building the input again with ``state=`` that dict
(:func:`~agent.ingest.inputs.open_input` passes it on) resumes there, or where the input's own
contract says when the position no longer applies. Persisting the state is the runtime's job.
Only :class:`~agent.ingest.tail.FileTail` is resumable: a stream cannot be re-read and the
ingest queue lives in memory.

Implementations: :mod:`agent.ingest.tail` (a followed file), :mod:`agent.ingest.stream` (stdin
and the HTTP ingest queue).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol, runtime_checkable

Record = dict[str, Any]


class RecordBatch(list[Record]):
    """The records of one ``poll``; ``skipped``: lines a prefilter skipped unparsed."""

    skipped: int = 0


class ColumnarBatch(RecordBatch):
    """A ``poll`` on the columnar path (docs/ingest.md): ``parts`` in input order, each an
    Arrow table (one chunk's accepted records) or a list of records (a chunk that took the
    row path). ``len()`` is the number of records; iterating yields them as dicts (built
    from the tables on demand: the fallback for consumers without a batch path)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[Any] = []
        self._rows = 0

    def add(self, part: Any) -> None:
        n = part.num_rows if hasattr(part, "num_rows") else len(part)
        if n:
            self.parts.append(part)
            self._rows += n

    def __len__(self) -> int:
        return self._rows

    def __bool__(self) -> bool:
        return self._rows > 0

    def __iter__(self) -> Iterator[Record]:
        for part in self.parts:
            yield from (part.to_pylist() if hasattr(part, "to_pylist") else part)


@runtime_checkable
class Input(Protocol):
    """What the runtime needs from an input (see module docstring)."""

    name: str

    def poll(self) -> list[Record]: ...

    def batches(self) -> AsyncIterator[list[Record]]: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


@runtime_checkable
class Watchable(Protocol):
    """An input that can tell, cheaply and from any thread, that a poll now would find
    nothing (the agent's tick loop then leaves the record thread asleep). ``unchanged()``
    is a hint: False whenever it cannot tell."""

    def unchanged(self) -> bool: ...


@runtime_checkable
class Resumable(Protocol):
    """An input whose read position can be persisted and restored (see module docstring).

    Checked with ``isinstance`` (structurally: an object with a ``state`` method); an input
    that cannot resume must not define ``state``."""

    def state(self) -> dict[str, Any]: ...
