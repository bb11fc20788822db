"""The ``ql`` job class: a job defined by one ELF QL query (``params = {"query": text}``).

Contract: ``check_spec`` (at submission, through ``agent.jobs.job.parse_spec``: a 400 from the API)
and ``setup()`` compile ``params["query"]`` (``agent.ql``); a query error becomes a ``ValueError``
whose message starts ``params.query: line L, column C: ...``, and so does a spec whose aggregator,
epochs, mode, window, trees (when the query says PARTITIONS), inputs (when FROM names them),
``emit`` (when the query says EMIT) or ``top_k`` disagree with what the query implies — build specs
with :func:`spec_from_query` so they agree. ``map`` is the compiled per-record pipeline (an instance
attribute: no extra call per record); a counting query (``count(*)`` alone, or GROUP BY only) gets
:class:`QLCountJob`, whose ``map_keys`` feeds the worker's counting fast path. Master side:
:meth:`QLJob.result_rows` turns the final pairs into named rows (the runtime's results use it),
``on_epoch_result`` keeps the last rows this agent mastered (``last_epoch``, ``last_rows``; with
PARTITIONS > 1 they cover this tree's keys only) and ``on_query`` answers them. A ``WINDOW
SESSION`` query's master keeps the closed sessions (the newest :data:`MAX_SESSION_ROWS`) for
``on_query``, and per epoch - the sessions each epoch closed, the newest
:data:`MAX_SESSION_EPOCHS` epochs within the same row budget - for ``closed_windows`` (the
results API's ``sessions``). Optional
``params["ts_field"]`` names the timestamp field. ``keys_problem`` refuses a peer's snapshot whose
keys do not decode for the GROUP BY width.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from agent.jobs.job import Job, register_job
from agent.jobs.spec import JobSpec, JobSpecError
from agent.ql import CompiledQuery, QLError, compile_query
from agent.ql.checker import analyze
from agent.ql.keys import keys_problem
from agent.ql.sessions import SessionTracker, flag_rows, late_flag, state_items
from cbt import Snapshot

if TYPE_CHECKING:  # the Arrow plan (pyarrow) loads when the job first needs it
    from agent.ql.arrow_plan import ArrowPlan

#: closed session rows a session query's master keeps for ``on_query`` (older ones are
#: evicted, counted in ``evicted``; the per-epoch panes stay in the results and the lake)
MAX_SESSION_ROWS = 10_000
#: epochs whose closed sessions a session query's master keeps for the results API
#: (``closed_windows``); they share the MAX_SESSION_ROWS budget (the oldest epochs go first)
MAX_SESSION_EPOCHS = 1024
#: epochs whose quality flags wait for their on_epoch_result (a bound: never hit in order)
_MAX_PENDING_QUALITY = 1024

_CHECKED = (
    "aggregator",
    "aggregator_params",
    "epoch_seconds",
    "mode",
    "window_size",
    "window_slide",
)


@lru_cache(maxsize=128)
def _compile(text: str) -> CompiledQuery:
    # compiled queries are immutable (stateless closures): one per text per process
    return compile_query(text)


def spec_from_query(name: str, creator: str, text: str, **overrides: Any) -> dict[str, Any]:
    """A full job-spec dict for query ``text`` (``overrides``: other spec fields such as
    ``allowed_lateness`` or ``params={"ts_field": "time"}``; ``params["query"]`` is set).
    Raises :class:`~agent.ql.QLError` for a bad query."""
    compiled = _compile(text)
    params = {**overrides.pop("params", {}), "query": text}
    return {
        "name": name,
        "creator": creator,
        "job_class": "ql",
        **compiled.spec_fields(),
        **overrides,
        "params": params,
    }


@register_job("ql")
class QLJob(Job):
    """A job running one ELF QL query (see module docstring)."""

    default_aggregator = "count"

    def __new__(cls, spec: Any = None, *args: Any, **kwargs: Any) -> QLJob:
        # a counting query gets the subclass with map_keys (the worker's C counting path)
        if cls is QLJob:
            text = getattr(spec, "params", {}).get("query")
            if isinstance(text, str):
                try:
                    if _compile(text).keys is not None:
                        return super().__new__(QLCountJob)
                except QLError:
                    pass  # setup() reports it
        return super().__new__(cls)

    @classmethod
    def check_spec(cls, spec: JobSpec) -> None:
        """Compile the query and check the spec agrees with it (``JobSpecError`` on
        ``params.query``), at submission: see :func:`agent.jobs.job.parse_spec`."""
        _compile_for(spec)

    def setup(self) -> None:
        try:
            self.compiled: CompiledQuery = _compile_for(self.spec)
        except JobSpecError as exc:
            raise ValueError(str(exc)) from None
        self.map = self.compiled.map  # type: ignore[method-assign]
        if self.compiled.keys is not None:
            self.map_keys = self.compiled.keys  # type: ignore[method-assign]
        self.last_epoch: int | None = None
        self.last_rows: list[dict[str, Any]] = []
        self._plan: ArrowPlan | None = None
        self._setup_sessions()

    def _setup_sessions(self) -> None:
        """A session query's tracker. A re-run of ``setup()`` (a runtime change of the query
        or params, same aggregate and epochs: ``agent.jobs.changes``) keeps the open sessions
        and takes the new SELECT / HAVING and gap; a query no longer SESSION closes them,
        flagged."""
        gap = self.compiled.session_gap_epochs
        old: SessionTracker | None = getattr(self, "sessions", None)
        if not hasattr(self, "session_rows"):
            self.session_rows: deque[dict[str, Any]] = deque(maxlen=MAX_SESSION_ROWS)
            self.session_evicted = 0
            self._quality: dict[int, list[str]] = {}
            # epoch -> the rows of the sessions it closed (oldest epoch first), and their total
            self._closed_at: dict[int, list[dict[str, Any]]] = {}
            self._closed_at_rows = 0
            self._closed_at_dropped: int | None = None  # the newest epoch dropped by the bound
        if old is not None and gap is not None:
            old.row, old.gap = self.compiled.row, gap
            return
        if old is not None:
            self._keep(old.flush("closed by a change of the job's query"))
        self.sessions: SessionTracker | None = None
        if gap is not None:
            schedule = self.spec.schedule
            self.sessions = SessionTracker(
                self.make_aggregator(),
                self.compiled.row,
                lambda e: (schedule.start(e), schedule.end(e)),
                gap_epochs=gap,
                first_epoch=self.spec.start_epoch,
                name=self.spec.name,
            )

    def _keep(self, closed: list[dict[str, Any]], epoch: int | None = None) -> None:
        over = len(self.session_rows) + len(closed) - MAX_SESSION_ROWS
        self.session_evicted += max(0, over)
        self.session_rows.extend(closed)
        if epoch is None:
            return
        # the same row dicts as session_rows: the per-epoch map costs its keys and lists only
        self._closed_at[epoch] = closed
        self._closed_at_rows += len(closed)
        while len(self._closed_at) > 1 and (
            len(self._closed_at) > MAX_SESSION_EPOCHS or self._closed_at_rows > MAX_SESSION_ROWS
        ):
            oldest = min(self._closed_at)
            self._closed_at_rows -= len(self._closed_at.pop(oldest))
            self._closed_at_dropped = max(oldest, self._closed_at_dropped or oldest)

    def closed_windows(self, epoch: int, limit: int | None = None) -> dict[str, Any] | None:
        """The sessions closed when the master fed ``epoch`` (module docstring): ``rows``
        (None with ``pending`` while the epoch waits for ``on_epoch_result``, else with
        ``why``; the first ``limit``, the rest counted in ``omitted``), ``since_epoch``
        (where this master's sessions begin); None for a query without SESSION. The newest
        epoch's are kept whole whatever their number (the lake gets them all)."""
        if self.sessions is None:
            return None
        out: dict[str, Any] = {
            "columns": list(self.compiled.output_columns),
            "since_epoch": self.sessions.began,
        }
        rows = self._closed_at.get(epoch)
        if rows is not None:
            if limit is not None and len(rows) > limit:
                return {**out, "rows": rows[:limit], "omitted": len(rows) - limit}
            return {**out, "rows": list(rows)}
        began, frontier = self.sessions.began, self.sessions.frontier
        if self._closed_at_dropped is not None and epoch <= self._closed_at_dropped:
            why = (
                f"this master keeps the sessions of its newest {MAX_SESSION_EPOCHS} epochs "
                f"within {MAX_SESSION_ROWS} rows; epoch {epoch} is older (POST "
                "/api/v1/jobs/{name}/query answers the newest sessions)"
            )
        elif began is not None and epoch < began:
            why = f"this master's sessions begin at epoch {began} (since_epoch)"
        elif frontier is not None and epoch <= frontier:
            why = f"epoch {epoch} had no result at this master (a hole in its epochs)"
        else:  # not fed yet: the master's on_epoch_result for it is still to run
            return {**out, "rows": None, "pending": True, "why": f"epoch {epoch} not fed yet"}
        return {**out, "rows": None, "why": why}

    # ---- the columnar path ----------------------------------------------------------------
    def has_batch_path(self) -> bool:
        return True

    def batch_projection(self) -> frozenset[str] | None:
        ts_field = str(self.params.get("ts_field", "ts"))
        return self.plan().fields | {ts_field}

    def plan(self) -> ArrowPlan:
        """The query on Arrow tables (built on first use, per instance)."""
        if self._plan is None:
            from agent.ql.arrow_plan import ArrowPlan  # pyarrow: with the first columnar batch

            self._plan = ArrowPlan(analyze(self.compiled.query), self.make_aggregator())
        return self._plan

    def aggregate_batch(self, table: Any, agg: Any) -> tuple[list[Any], list[Any]]:
        """The query's partial states per key over ``table`` (``agent.ql.arrow_plan``)."""
        return self.plan().partials(table)

    def aggregate_epochs(
        self, table: Any, epochs: Any, agg: Any
    ) -> list[tuple[int, list[Any], list[Any]]]:
        """Several epochs' rows in one hash group-by (the epoch an extra key)."""
        return self.plan().partials_by_epoch(table, epochs)

    def map(self, record: dict[str, Any]) -> list[tuple[Any, Any]]:
        """The compiled pipeline (replaced by it per instance in ``setup``)."""
        return self.compiled.map(record)

    def keys_problem(self, snapshot: Snapshot) -> str | None:
        """Every key must decode for the query's GROUP BY width (else ``result_rows`` would
        fail on the epoch at the master)."""
        return keys_problem(snapshot.keys(), self.compiled.group_width)

    # ---- master side ----------------------------------------------------------------------
    def result_rows(self, pairs: Any) -> list[dict[str, Any]]:
        """Named result rows of the final ``(key, value)`` pairs (HAVING, ORDER BY, LIMIT)."""
        return self.compiled.rows(pairs)

    def lake_rows(self, pairs: Any, sketches: list[Any]) -> list[dict[str, Any]]:
        """The named rows plus each sketch column's binary, ``<column>_sketch``."""
        return self.compiled.rows(pairs, sketches)

    def merges_epochs(self) -> bool:
        """A session query's master merges epochs into sessions (no change of aggregate or
        epoch length while it runs)."""
        return self.compiled.session_gap_epochs is not None or super().merges_epochs()

    def on_epoch_quality(self, epoch: int, state: str, lacking: list[str]) -> None:
        """A session query flags the sessions a tentative / partial epoch touches or closes."""
        if self.sessions is None or state == "final":
            return
        what = f"{state}: epoch {epoch} lacks origins {', '.join(lacking) or '?'}"
        self._quality[epoch] = [what]
        while len(self._quality) > _MAX_PENDING_QUALITY:
            del self._quality[min(self._quality)]

    def on_late_records(self, epoch: int, records: int) -> list[int] | None:
        """A session query flags every session (open, or closed and kept here) that late
        records of ``epoch`` could belong to or have joined (``SessionTracker.mark_late``):
        their keys are not known, their count is the epoch's ``late`` field."""
        if self.sessions is None or records <= 0:
            return None
        self.sessions.mark_late(epoch, late_flag(epoch))
        gap, epoch_of = self.sessions.gap, self.spec.schedule.epoch_of
        return [
            closed_at
            for closed_at, rows in self._closed_at.items()
            if closed_at > epoch - gap and flag_rows(rows, [epoch], epoch_of, gap)
        ]

    def on_epoch_result(self, epoch: int, snapshot: Snapshot) -> None:
        if self.spec.window_bounds(epoch) is None:
            return  # window mode filler epoch: no window ends here
        self.last_epoch = epoch
        if self.sessions is not None:
            flags = self._quality.pop(epoch, ())
            refed = self.sessions.refed_epochs
            closed = self.sessions.feed(epoch, state_items(snapshot), flags)
            # a replayed epoch closes nothing again: its first feed's sessions stay its own
            self._keep(closed, None if self.sessions.refed_epochs > refed else epoch)
            return
        self.last_rows = self.compiled.rows(snapshot)

    def on_query(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.sessions is not None:
            # the closed sessions (newest MAX_SESSION_ROWS), and the open ones on request
            reply = {
                "epoch": self.last_epoch,
                "columns": list(self.compiled.output_columns),
                "rows": list(self.session_rows),
                "evicted": self.session_evicted,
                **self.sessions.stats(),
            }
            if message.get("open"):
                reply["open_rows"] = self.sessions.open_rows()
            return reply
        return {
            "epoch": self.last_epoch,
            "columns": list(self.compiled.columns),
            "rows": self.last_rows,
        }


def _compile_for(spec: JobSpec) -> CompiledQuery:
    """The spec's compiled query, or ``JobSpecError`` (field ``params.query``) when the query is
    invalid or the spec disagrees with what it implies."""
    params = spec.params
    text = params.get("query")
    if not isinstance(text, str) or not text.strip():
        raise JobSpecError("params.query", "expected the query text (a non-empty string)")
    unknown = set(params) - {"query", "ts_field"}
    if unknown:
        raise JobSpecError("params", f"unknown keys {sorted(unknown)}; expected query, ts_field")
    try:
        compiled = _compile(text)
    except QLError as exc:
        raise JobSpecError("params.query", str(exc)) from None
    want = compiled.spec_fields()
    checked = list(_CHECKED)
    if compiled.query.window is None:  # no WINDOW: the spec's epoch length (default 1 s)
        checked.remove("epoch_seconds")
    if compiled.partitions is not None:
        checked.append("trees")
    if compiled.inputs:
        checked.append("inputs")
    if compiled.query.emit is not None:  # EMIT given: the spec's emit must say the same
        checked.append("emit")
    bad = [f for f in checked if _norm(getattr(spec, f)) != _norm(want[f])]
    if spec.top_k is not None and (
        spec.top_k != want["top_k"] or spec.top_k_largest != want["top_k_largest"]
    ):
        bad.append("top_k")
    if bad:
        detail = ", ".join(f"{f}={want[f]!r}" for f in bad)
        raise JobSpecError(
            "params.query",
            f"the spec disagrees with the query; the query implies {detail} "
            "(build the spec with agent.jobs.ql_job.spec_from_query)",
        )
    return compiled


def _norm(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    return v


class QLCountJob(QLJob):
    """A QL job whose every value is the count 1 (``count(*)`` alone, or GROUP BY only): the
    worker takes ``map_keys`` (keys without pair tuples; the CBT's C counting path).
    ``QLJob(spec)`` returns one when the query allows it."""

    def map_keys(self, record: dict[str, Any]) -> list[Any]:
        """The compiled keys-only pipeline (replaced by it per instance in ``setup``)."""
        keys = self.compiled.keys
        assert keys is not None
        return keys(record)
