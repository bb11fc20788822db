"""One input's chunk parser and which inputs take the columnar path.

Contract: :class:`ChunkReader` parses a chunk of whole lines of one format into a
:class:`~agent.ingest.columnar.chunk.ParsedChunk` with the vectorized kernels
(``agent.ingest.columnar.parse.parse_chunk``) when they are installed, else the reference
row parser (:mod:`agent.ingest.columnar.rowparse`); ``Unsupported`` from either means "take
the row path for this chunk". :func:`install_columnar` (called by the runtime every tick,
cached like the prefilter) sets ``input.columnar`` on each file tail whose every reading job
has a batch path (an ELF QL query, or a job class with ``map_batch``), projected to the
fields they read; None (the row path) otherwise, when the runtime's ``columnar`` setting is
off, or for JSON lines whose timestamp field is not ``ts``. The reader it installs carries
the reading jobs' :class:`~agent.ingest.columnar.aggregate.AggregationPlan` (``plan``; None
when they cannot be pre-aggregated elsewhere): a tail's parse helpers aggregate the chunks
they parse for it, and :meth:`ChunkReader.table_of` parses such a chunk again when a worker
needs its rows.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

from agent.ingest.columnar.aggregate import plan_for
from agent.ingest.fastpath import jobs_key, same_jobs
from agent.ingest.formats import FORMATS
from agent.ingest.parsers import Format, format_label, input_format
from agent.ingest.records import EncodingRepairs
from agent.log_format import LogFormat
from agent.ql.fallback import Unsupported

if TYPE_CHECKING:  # the parsers (and pyarrow) load with the first chunk parsed, not before
    from agent.ingest.columnar.aggregate import AggregationPlan
    from agent.ingest.columnar.chunk import ParsedChunk

ParseFn = Callable[..., "ParsedChunk"]


def _kernel() -> tuple[ParseFn, str]:
    """The vectorized ``parse_chunk`` when installed, else the row-parser reference (either
    loads the Arrow stack: called when a chunk is parsed, or a format's choice needs it)."""
    from agent.ingest.columnar.rowparse import parse_chunk_rows

    try:
        module = importlib.import_module("agent.ingest.columnar.parse")
    except ImportError:
        return parse_chunk_rows, "rows"
    fn = getattr(module, "parse_chunk", None)
    return (fn, "vectorized") if callable(fn) else (parse_chunk_rows, "rows")


#: a chunk with fewer candidate lines than this (after the prefilter) takes the row path:
#: per-chunk Arrow calls cost more than a few dozen rows of Python
MIN_ROWS = 256
#: ... and a chunk the prefilter scanned, fewer candidates than this: its candidates are parsed
#: one by one by the projected row parser, cheaper than a table for a few hundred lines (the
#: selective micro query: 2 % of a 4 MiB chunk's 15,000 lines, 2.7 M lines/s columnar, 3.4 M
#: row)
MIN_PREFILTERED_ROWS = 1024
#: after this many chunks in a row the parser declined (``Unsupported``), skip the columnar
#: attempt for BACKOFF_CHUNKS chunks (the data is not columnar now; retry later)
DECLINED_LIMIT = 4
BACKOFF_CHUNKS = 64


class ChunkReader:
    """Parses one input's chunks (see module docstring). ``wants(lines)`` says whether a chunk
    of that many candidate lines should try the columnar path (:data:`MIN_ROWS`, and a
    back-off after :data:`DECLINED_LIMIT` declined chunks in a row)."""

    def __init__(
        self, fmt: Format, fields: frozenset[str] | None, repairs: EncodingRepairs | None
    ) -> None:
        self.fmt = fmt
        self.fields = fields
        self.repairs = repairs
        self._kernel: tuple[ParseFn, str] | None = None  # loaded with the first chunk
        self._declined = 0
        self._skip = 0
        self.min_rows = MIN_ROWS
        self.min_prefiltered_rows = MIN_PREFILTERED_ROWS
        #: what parse helpers aggregate this input's chunks for (None: they only parse)
        self.plan: AggregationPlan | None = None

    def wants(self, lines: int, prefiltered: bool = False) -> bool:
        floor = max(self.min_rows, self.min_prefiltered_rows) if prefiltered else self.min_rows
        if lines < floor:
            return False
        if self._skip:
            self._skip -= 1
            return False
        return True

    @property
    def kernel(self) -> str:
        """``"vectorized"`` or ``"rows"`` (loads the parsers when not loaded yet)."""
        return self._loaded()[1]

    def _loaded(self) -> tuple[ParseFn, str]:
        if self._kernel is None:
            self._kernel = _kernel()
        return self._kernel

    @property
    def backing_off(self) -> bool:
        """Whether :meth:`wants` now says no to every chunk (after declined chunks)."""
        return self._skip > 0

    def parse(
        self, chunk: bytes, ends: Any = None, ahead: Future[Any] | None = None
    ) -> ParsedChunk:
        """The chunk's table; ``Unsupported`` when it must take the row path. ``ends``: the
        chunk's newline offsets (a numpy array) when the caller already found them;
        ``ahead``: the same chunk being parsed on a :class:`~agent.ingest.columnar.pool.
        ChunkParsePool` (its answer is used; a chunk the pool could not read, or a dead
        worker process's, is parsed here)."""
        if ahead is not None:
            try:
                parsed = self._counted(ahead.result)
            except BrokenProcessPool:
                parsed = None
            if parsed is not None:
                if self.repairs is not None:  # parse_chunk counted them there, into nothing
                    self.repairs.lines += parsed.repairs
                return parsed
        return self._counted(lambda: self._parse_here(chunk, ends))

    def table_of(self, chunk: bytes) -> Any:
        """``chunk``'s table parsed here again, counting nothing (a chunk a parse helper
        parsed, and so counted, already: its rows when a worker needs them)."""
        parse, kernel = self._loaded()
        if kernel == "rows":
            return parse(self.fmt, chunk, self.fields, None).table
        return parse(self.fmt, chunk, fields=self.fields).table

    def _parse_here(self, chunk: bytes, ends: Any) -> ParsedChunk:
        parse, kernel = self._loaded()
        if kernel == "rows":
            return parse(self.fmt, chunk, self.fields, self.repairs)
        return parse(self.fmt, chunk, fields=self.fields, repairs=self.repairs, ends=ends)

    def _counted(self, produce: Callable[[], ParsedChunk | None]) -> ParsedChunk | None:
        """``produce()``'s chunk; a decline (``Unsupported``, or the kernels'
        ``UnsupportedChunk`` turned into it) counts toward the back-off, a table resets it."""
        from agent.ingest.columnar.base import UnsupportedChunk  # (loaded with the parsers)

        try:
            try:
                parsed = produce()
            except UnsupportedChunk as exc:  # the kernels' "values cannot be one column"
                raise Unsupported(str(exc)) from None
        except Unsupported:
            self._declined += 1
            if self._declined >= DECLINED_LIMIT:
                self._declined, self._skip = 0, BACKOFF_CHUNKS
            raise
        if parsed is not None:
            self._declined = 0
        return parsed

    def describe(self) -> dict[str, Any]:
        fields = None if self.fields is None else sorted(self.fields)
        # (None: no chunk parsed yet - reading the status does not load the parsers)
        kernel = None if self._kernel is None else self._kernel[1]
        return {"format": format_label(self.fmt), "fields": fields, "kernel": kernel}


def reader_for(
    jobs: list[Any], fmt: Format | None, ts_field: str, repairs: EncodingRepairs | None
) -> ChunkReader | None:
    """The chunk reader of an input read by ``jobs``, or None (the row path)."""
    custom = isinstance(fmt, LogFormat)
    if not jobs or not (custom or fmt in FORMATS) or (fmt == "json" and ts_field != "ts"):
        return None
    if not all(job.has_batch_path() for job in jobs):
        return None
    if (custom or fmt in ("nginx", "apache")) and _kernel()[1] == "rows":
        fields_wanted = [job.batch_projection() for job in jobs]
        if any(f is None or "query" in f for f in fields_wanted):
            return None  # the reference parser cannot represent the query-string object
    fields: set[str] | None = set()
    for job in jobs:
        want = job.batch_projection()
        if want is None:
            fields = None
            break
        assert fields is not None
        fields |= want
    reader = ChunkReader(fmt, None if fields is None else frozenset(fields), repairs)
    reader.plan = plan_for(jobs, ts_field)
    return reader


def install_columnar(
    inputs: Mapping[str, Any],
    configs: Mapping[str, Any],
    runtimes: Iterable[Any],
    *,
    enabled: bool = True,
) -> None:
    """Set ``columnar`` on every file tail (see module docstring)."""
    readers: dict[str, list[Any]] = {}
    for runtime in runtimes:
        worker = getattr(runtime, "worker", None)
        if worker is None:
            continue
        jobs = worker.active_jobs() if hasattr(worker, "active_jobs") else [worker.job]
        for name in runtime.inputs:
            readers.setdefault(name, []).extend(jobs)
    for name, source in inputs.items():
        if not hasattr(source, "columnar"):
            continue
        jobs = readers.get(name, []) if enabled else []
        key = jobs_key(jobs)
        if same_jobs(getattr(source, "columnar_jobs", None), key):
            continue
        cfg = configs.get(name)
        fmt = input_format(cfg)
        ts_field = getattr(cfg, "timestamp_field", "ts")
        full = getattr(source, "full_parser", None) or source.parser
        source.columnar = reader_for(jobs, fmt, ts_field, getattr(full, "repairs", None))
        source.columnar_jobs = key
