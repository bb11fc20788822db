"""The agent's ingest fast path: skip raw lines no job can match before they are parsed.

Contract:

* :class:`LinePrefilter` holds, for one input, the pushdown (:mod:`agent.ql.pushdown`) of
  every job that reads it; ``select(lines)`` returns, in order, the lines that some job may
  match (a line any job's WHERE could make TRUE is always kept, and so is every line with the
  format's escape byte). It never parses anything.
* :func:`prefilter_for` builds it for the jobs reading an input of a given format; None (parse
  every line) as soon as one of them has no pushdown (not a QL job, no WHERE, nothing
  pushable, a format without rules).
* :func:`install_prefilters` (called by the runtime every tick; cached) sets
  ``input.prefilter`` on each :class:`~agent.ingest.tail.FileTail` from the jobs that read it, and
  its ``parser`` to a projected one when they are all QL jobs on an access log
  (:mod:`agent.ingest.projection`; the input's own parser otherwise).

Semantics (documented in docs/ingest.md): a skipped line is counted (``prefiltered`` in the
input's and the worker's stats) but neither parsed nor validated, so it is not quarantined
even when malformed, and its timestamp is never seen: the watermark advances with the parsed
lines and the idle clock only; skipped lines do count as arrivals for the idle clock (the
source is active). Every record that reaches a job is parsed, filtered and accounted exactly
as without the prefilter, so the job's results are those of the slow path whenever the slow
path drops no matching record as late because of a skipped line's later timestamp — always
when the input's disorder is within the job's ``allowed_lateness``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agent.ingest.parsers import input_format
from agent.ingest.projection import projected_parser
from agent.ql.pushdown import Needles, line_needles
from agent.ql.query import CompiledQuery

Select = Callable[[list[bytes]], list[bytes]]


class LinePrefilter:
    """Keeps the lines one of several jobs may match (see module docstring)."""

    def __init__(self, alternatives: Iterable[Needles]) -> None:
        self.alternatives = tuple(alternatives)
        if not self.alternatives:
            raise ValueError("a prefilter needs at least one job's needles")
        escapes = {a.escape for a in self.alternatives}
        if len(escapes) != 1:
            raise ValueError("all needles of one input must be of one format")
        self.escape = escapes.pop()
        self.select: Select = _compile(self.alternatives, self.escape)
        #: one needle every kept line without the escape byte contains (None: several jobs
        #: or no single-needle clause; then :meth:`scan` declines and lines are split)
        self.scan_needle: bytes | None = None
        if len(self.alternatives) == 1:
            single = [c[0] for c in self.alternatives[0].clauses if len(c) == 1]
            if single:
                self.scan_needle = max(single, key=len)

    def scan(self, buf: bytes, start: int, last_nl: int) -> tuple[list[int], list[bytes]] | None:
        """The lines of ``buf[start:last_nl + 1]`` (newline-terminated) that :meth:`select`
        keeps, as (start offsets, line bytes), found by searching the whole chunk for the
        scan needle and the escape byte instead of splitting it into lines: only candidate
        lines become objects. None when there is no scan needle (call :meth:`select`)."""
        needle = self.scan_needle
        if needle is None:
            return None
        find, rfind = buf.find, buf.rfind
        end = last_nl + 1
        starts: set[int] = set()
        for token in (needle, self.escape):
            i = find(token, start, end)
            while i >= 0:
                line_start = rfind(b"\n", start, i) + 1 or start
                starts.add(line_start)
                i = find(token, find(b"\n", i, end) + 1, end)
        order = sorted(starts)
        lines = [buf[s : find(b"\n", s, end)] for s in order]
        kept = self.select(lines)
        if len(kept) == len(lines):
            return order, lines
        keep = {id(x) for x in kept}
        pairs = [(s, x) for s, x in zip(order, lines, strict=True) if id(x) in keep]
        return [s for s, _ in pairs], [x for _, x in pairs]

    def may_match(self, line: bytes) -> bool:
        """Whether ``line`` is kept (the per-line reference of :meth:`select`)."""
        return any(a.may_match(line) for a in self.alternatives)

    def describe(self) -> dict[str, Any]:
        """JSON-able: the needles per job and the escape byte."""
        return {
            "escape": self.escape.decode("latin-1"),
            "jobs": [
                [[x.decode("utf-8", "replace") for x in clause] for clause in a.clauses]
                for a in self.alternatives
            ],
        }


def _compile(alternatives: tuple[Needles, ...], esc: bytes) -> Select:
    """A list comprehension specialized for one job whose clauses have one needle each (the
    common case: one frame per chunk, no call per line), else a general one."""
    if len(alternatives) == 1 and all(len(c) == 1 for c in alternatives[0].clauses):
        # longest first: usually the rarest, so most lines fail on the first test
        ns = sorted((c[0] for c in alternatives[0].clauses), key=len, reverse=True)
        if len(ns) == 1:
            (a,) = ns
            return lambda lines: [x for x in lines if a in x or esc in x]
        if len(ns) == 2:
            a, b = ns
            return lambda lines: [x for x in lines if (a in x and b in x) or esc in x]
        if len(ns) == 3:
            a, b, c = ns
            return lambda lines: [x for x in lines if (a in x and b in x and c in x) or esc in x]
    clauses_per_job = [a.clauses for a in alternatives]

    def keep(x: bytes) -> bool:
        for clauses in clauses_per_job:
            for clause in clauses:
                for needle in clause:
                    if needle in x:
                        break
                else:
                    break  # this clause has no needle in x: try the next job
            else:
                return True
        return esc in x

    return lambda lines: [x for x in lines if keep(x)]


def job_needles(job: Any, fmt: str) -> Needles | None:
    """The pushdown of ``job`` (a QL job: its compiled WHERE) on ``fmt`` lines, else None."""
    compiled = getattr(job, "compiled", None)
    if not isinstance(compiled, CompiledQuery):
        return None
    return line_needles(compiled.query.where, fmt)


def prefilter_for(jobs: Iterable[Any], fmt: str) -> LinePrefilter | None:
    """The prefilter of an input of format ``fmt`` read by ``jobs`` (None: parse all)."""
    alternatives = []
    for job in jobs:
        needles = job_needles(job, fmt)
        if needles is None:
            return None
        alternatives.append(needles)
    return LinePrefilter(alternatives) if alternatives else None


def jobs_key(jobs: Iterable[Any]) -> tuple[tuple[Any, Any], ...]:
    """What an input's per-job set-up depends on: each job instance and its spec object."""
    return tuple((job, getattr(job, "spec", None)) for job in jobs)


def same_jobs(cached: Any, key: tuple[tuple[Any, Any], ...]) -> bool:
    """``cached`` (an earlier :func:`jobs_key`) names the very same objects as ``key``."""
    return (
        cached is not None
        and len(cached) == len(key)
        and all(a is b and s is t for (a, s), (b, t) in zip(cached, key, strict=True))
    )


def install_prefilters(
    inputs: Mapping[str, Any], configs: Mapping[str, Any], runtimes: Iterable[Any]
) -> None:
    """Set ``prefilter`` on every input that has one (file tails) from the jobs whose worker
    reads it (``runtime.inputs``, ``runtime.worker.job``); ``configs[name]`` gives the
    input's format (:func:`~agent.ingest.parsers.input_format`). Recomputed only when the set
    of jobs reading an input, or one of their specs (a runtime change), changes."""
    readers: dict[str, list[Any]] = {}
    for runtime in runtimes:
        worker = getattr(runtime, "worker", None)
        if worker is None:
            continue
        jobs = worker.active_jobs() if hasattr(worker, "active_jobs") else [worker.job]
        for name in runtime.inputs:
            readers.setdefault(name, []).extend(jobs)  # two during a change of aggregate
    for name, source in inputs.items():
        if not hasattr(source, "prefilter"):
            continue
        jobs = readers.get(name, [])
        # A runtime change re-runs setup() on the same job instance with a new spec (a new
        # WHERE): the spec object is part of the key, so the needles follow the change.
        key = jobs_key(jobs)
        if same_jobs(getattr(source, "prefilter_jobs", None), key):
            continue
        cfg = configs.get(name)
        fmt = input_format(cfg)  # a custom log_format: no pushdown rules, no projection
        source.prefilter = prefilter_for(jobs, fmt) if jobs and fmt else None
        source.prefilter_jobs = key
        # projection pushdown: parse only the fields the (QL) jobs read; else the full parser
        full = getattr(source, "full_parser", None) or source.parser
        repairs = getattr(full, "repairs", None)  # one count per input, whichever parser
        projected = projected_parser(jobs, fmt, repairs=repairs)
        source.full_parser = full
        source.parser = projected if projected is not None else full
