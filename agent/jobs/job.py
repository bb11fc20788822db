"""The job API: the base class users write job classes against, the context the runtime
injects, and the registry of job classes.

The paper's primitives, in Python:

* worker side: ``map(record) -> iterable of (key, value)`` parses and filters one record
  into CBT pairs (keys: str/bytes/int/tuples of those; values: what the spec's aggregator
  takes), or the fast path ``map_keys(record) -> iterable of keys`` (every value 1);
  ``on_multicast(message)`` receives control from the master (iterative jobs read
  ``self.feedback``, the last feedback the master sent, set by the worker before ``map``
  runs again); ``on_recv(node_id, paos)`` receives a direct ``send_to``.
* master side: ``on_epoch_result(epoch, snapshot)`` gets each epoch's reduced result, in epoch
  order (``on_epoch_quality(epoch, state, lacking)`` just before it when the result is
  tentative or partial); ``closed_windows(epoch)`` answers the rows of the windows the master
  closed with that epoch (state merged across epochs, ELF QL's ``WINDOW SESSION``) for the
  results API; ``feedback_for(epoch, snapshot)`` (iterative mode) returns the
  JSON-able value the runtime multicasts to every worker, or None; ``on_timer()`` runs every
  ``timer_interval`` seconds; ``on_query(message) -> dict`` answers ``route`` queries from other
  jobs' masters.
* any agent: ``local_query(params) -> dict`` answers ``GET /api/v1/jobs/{name}/local`` on
  this agent from the job's local instance (no network hop); the default answers
  ``{"error": ..., "status": 404}``.
* optional: ``result_rows(pairs)`` (master) names the columns of the results API's rows;
  the class method ``check_spec(spec)`` rejects a spec at submission (``parse_spec``);
  ``keys_problem(snapshot)`` says why a peer's snapshot holds keys this job never makes
  (None: fine; the default accepts every valid CBT key), so the data plane refuses it with
  409 ``incompatible`` before it merges (``docs/srt-dataplane.md``).
* :class:`JobContext` (injected with :meth:`Job.bind`): ``node_id``, ``is_master``,
  ``feedback``, ``subscribe(app_id)``, ``send_to(node_id, paos)``, ``multicast(message)``,
  ``route(app_id, message) -> reply``. The runtime implements it; every hook may be a plain or
  an ``async`` function (the runtime awaits awaitables, see :func:`maybe_await`).

Registry: :func:`register_job` (a class decorator) binds a *name* to a class and
:func:`job_class` looks it up. Jobs arriving from the network name a registered class; no
module path from the network is ever imported. :func:`load_entry_points` additionally
registers the classes installed distributions declare in the ``elf.jobs`` entry-point group
(locally installed code, chosen by the operator), and :func:`load_job_modules` imports modules
the operator's config names.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import fields as dataclass_fields
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, runtime_checkable

import numpy as np

from agent.errors import AgentError
from agent.jobs.spec import JobSpec, JobSpecError
from cbt import Aggregator, Snapshot, get_aggregator

if TYPE_CHECKING:  # the Arrow stack loads with the first columnar batch, not with the class
    import pyarrow as pa

ENTRY_POINT_GROUP = "elf.jobs"

Pair = tuple[Any, Any]


@runtime_checkable
class JobContext(Protocol):
    """What the runtime offers a job instance on one agent."""

    @property
    def node_id(self) -> int:
        """This agent's overlay id."""
        ...

    @property
    def is_master(self) -> bool:
        """Whether this agent is the job's master (root of tree 0) right now."""
        ...

    @property
    def feedback(self) -> Any:
        """The last feedback value the master multicast (None before the first)."""
        ...

    async def subscribe(self, app_id: int) -> None:
        """Join the tree of ``app_id`` (e.g. to receive another job's multicasts)."""
        ...

    async def send_to(self, node_id: int, paos: Snapshot | dict[str, Any]) -> None:
        """Send PAOs (a snapshot or a JSON-able dict) directly to one agent (its ``on_recv``)."""
        ...

    async def multicast(self, message: dict[str, Any]) -> Any:
        """Master only: deliver ``message`` to every agent of the job (down the tree)."""
        ...

    async def route(self, app_id: int, message: dict[str, Any]) -> dict[str, Any]:
        """Ask the master of another job (``app_id``); returns its ``on_query`` reply."""
        ...


class Job:
    """Base class of job classes (see module docstring for the hooks' contracts).

    Subclasses override ``map`` at least. Class attributes: ``default_aggregator`` (used when
    a spec names none), ``timer_interval`` (seconds between ``on_timer`` calls on the master;
    None: no timer). Instances are created per agent and per job with the validated spec;
    ``self.params`` is ``spec.params``.
    """

    registered_name: ClassVar[str] = ""
    default_aggregator: ClassVar[str] = "count"
    timer_interval: ClassVar[float | None] = None

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.params: dict[str, Any] = spec.params
        self.context: JobContext | None = None
        #: the last feedback from the master (iterative jobs); the worker sets it
        self.feedback: Any = None
        self.setup()

    @classmethod
    def check_spec(cls, spec: JobSpec) -> None:
        """Optional: reject a submitted spec before any agent runs it (``ValueError``, e.g. bad
        params); :func:`parse_spec` calls it, so a submission fails with a clear 4xx."""

    def setup(self) -> None:
        """Validate ``self.params`` and precompute; raise ``ValueError`` with a clear message."""

    def merges_epochs(self) -> bool:
        """Whether the master merges several epochs' results into state it keeps (ELF QL's
        ``WINDOW SESSION``): such a job's aggregator and epoch length cannot change while it
        runs (:mod:`agent.jobs.changes` answers 409, as for window jobs)."""
        return self.spec.mode == "window"

    def bind(self, context: JobContext) -> None:
        """Called by the runtime once the agent's context exists."""
        self.context = context

    def make_aggregator(self) -> Aggregator:
        """The CBT aggregator named by the spec (with its params)."""
        return get_aggregator(self.spec.aggregator, self.spec.aggregator_params or None)

    # ---- worker side ----------------------------------------------------------------------
    def map(self, record: dict[str, Any]) -> Iterable[Pair]:
        """Parse/filter one record into ``(key, value)`` pairs (may yield none)."""
        if type(self).map_keys is Job.map_keys:
            raise NotImplementedError(f"{type(self).__name__} must implement map(record)")
        return [(key, 1) for key in self.map_keys(record)]

    def map_keys(self, record: dict[str, Any]) -> Iterable[Any]:
        """Optional fast path for jobs whose every value is 1 (counting): the keys only.

        When a class overrides it, the worker calls it instead of ``map`` (no pair tuples,
        the CBT's C counting path); ``map`` then defaults to ``(key, 1)`` pairs of it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement map_keys(record)")

    #: the record fields ``map_batch`` reads: the columnar parser's projection (None: all)
    batch_fields: ClassVar[frozenset[str] | None] = None

    def map_batch(self, table: pa.Table) -> pa.Table:
        """Optional vectorized ``map``: the rows of ``table`` (an Arrow table of records, one
        column per field, missing fields NULL) to a table of pairs, column ``key`` (strings
        or ints) and optionally ``value`` (absent: every value is 1). It must give the pairs
        ``map`` gives on the same rows, in any order. When a class overrides it, inputs whose
        every job has it (or is an ELF QL query) take the columnar ingest path
        (docs/ingest.md); ``map`` stays the reference and the fallback."""
        raise NotImplementedError(f"{type(self).__name__} does not implement map_batch(table)")

    def has_batch_path(self) -> bool:
        """Whether this job runs on the columnar path (``map_batch`` or its own
        ``aggregate_batch``)."""
        return type(self).map_batch is not Job.map_batch

    def batch_projection(self) -> frozenset[str] | None:
        """The fields the columnar parser must produce for this job (None: all):
        ``batch_fields`` and the timestamp field."""
        if self.batch_fields is None:
            return None
        return self.batch_fields | {str(self.params.get("ts_field", "ts"))}

    def aggregate_batch(self, table: pa.Table, agg: Aggregator) -> tuple[list[Any], list[Any]]:
        """Partial states of ``agg`` per key over ``table``'s rows (one epoch's): what
        inserting every pair of ``map`` would build, one state per key. The default
        pre-aggregates ``map_batch``'s pairs natively (``agent.ql.arrow_plan.pair_partials``);
        :class:`~agent.ql.fallback.Unsupported` makes the worker map those rows with
        ``map`` instead."""
        from agent.ql.arrow_plan import pair_partials  # (pyarrow: loaded by the caller's table)

        return pair_partials(self.map_batch(table), agg)

    def aggregate_epochs(
        self, table: pa.Table, epochs: np.ndarray, agg: Aggregator
    ) -> list[tuple[int, list[Any], list[Any]]]:
        """``[(epoch, keys, states)]`` for rows spanning several epochs (``epochs``: each
        row's): ``aggregate_batch`` per epoch by default; a job may do it in one pass."""
        import pyarrow as pa  # (loaded already: ``table`` is one)

        return [
            (int(e), *self.aggregate_batch(table.filter(pa.array(epochs == e)), agg))
            for e in np.unique(epochs).tolist()
        ]

    def on_multicast(self, message: dict[str, Any]) -> Awaitable[None] | None:
        """Control delivered from the master down the tree."""
        return None

    def on_recv(self, node_id: int, paos: Any) -> Awaitable[None] | None:
        """PAOs another agent sent with ``send_to``."""
        return None

    def keys_problem(self, snapshot: Snapshot) -> str | None:
        """Optional key schema: why ``snapshot``'s keys cannot be this job's (a short text),
        or None. Runs on the event loop for every peer snapshot, so keep it a linear scan;
        the default accepts any key (``Snapshot.from_bytes`` already checked they are valid
        CBT keys)."""
        return None

    # ---- master side ----------------------------------------------------------------------
    def on_epoch_result(self, epoch: int, snapshot: Snapshot) -> Awaitable[None] | None:
        """The job's reduced result for ``epoch`` (window mode: the window ending there)."""
        return None

    def on_epoch_quality(self, epoch: int, state: str, lacking: list[str]) -> None:
        """Called just before :meth:`on_epoch_result` (and before each replayed one) when the
        stored result is not final: its state (``tentative`` or ``partial``) and the origins
        it lacks (hex ids), for jobs whose state derived from results must be flagged too
        (``WINDOW SESSION``). A later fold into the epoch does not call it again."""
        return None

    def on_late_records(self, epoch: int, records: int) -> list[int] | None:
        """As master: the origins reported late records for ``epoch`` (``records``: the
        running total its ``late`` field shows; called again as it grows), records its result
        does not include - for jobs whose state derived from results must be flagged too
        (``WINDOW SESSION``). Called on the record thread, like :meth:`on_epoch_result`; the
        epoch may not have reached ``on_epoch_result`` yet. Returns the epochs whose
        :meth:`closed_windows` it changed (the master writes them to the lake again), or
        None."""
        return None

    def closed_windows(self, epoch: int, limit: int | None = None) -> dict[str, Any] | None:
        """The windows the master closed when it got ``epoch``'s result, for the results API's
        ``sessions`` field (jobs that merge epochs into windows of their own: ELF QL's
        ``WINDOW SESSION``): ``{"columns", "rows", ...}`` with ``rows`` None (and ``pending``
        True while ``epoch`` waits for its ``on_epoch_result``, else ``why``) when the job does
        not hold them; at most ``limit`` rows (None: all), the rest counted in ``omitted``.
        None, the default: the job closes no windows of its own. Bounded by the job: it keeps
        the newest epochs' rows only. Called on the event loop (and again on the
        record thread while pending): a lookup, never blocking, reading state ``on_epoch_result``
        replaces whole (no iteration over what that thread mutates)."""
        return None

    def feedback_for(self, epoch: int, snapshot: Snapshot) -> Any:
        """Iterative mode: the JSON-able value to feed back to every worker (None: nothing)."""
        return None

    def on_timer(self) -> Awaitable[None] | None:
        """Periodic master-side work (every ``timer_interval`` seconds)."""
        return None

    def result_rows(self, pairs: list[Any]) -> list[dict[str, Any]] | None:
        """Optional: the job's result rows as named columns, from the final ``[key, value]``
        pairs of an epoch (all trees', JSON-ready); None (the default) keeps the pairs."""
        return None

    def lake_rows(self, pairs: list[Any], sketches: list[Any]) -> list[dict[str, Any]] | None:
        """Optional: :meth:`result_rows` for the lake, given beside each pair the DataSketches
        binaries of its sketch aggregates (``cbt.sketches.sketch_binaries``; only for jobs
        whose aggregator holds sketches). The default ignores them."""
        return self.result_rows(pairs)

    def on_query(self, message: dict[str, Any]) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """Answer a cross-job ``route`` query; the default says the job answers none."""
        return {"error": f"job {self.spec.name!r} answers no queries"}

    # ---- any agent --------------------------------------------------------------------------
    def local_query(self, params: dict[str, str]) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """Answer a query about this agent's own instance (``GET /api/v1/jobs/{name}/local``,
        ``params`` = the URL's query string). A reply with ``"error"`` becomes an HTTP error
        (its ``"status"``, default 400); the default says the job answers none (404)."""
        return {"error": f"job {self.spec.name!r} answers no local queries", "status": 404}


async def maybe_await(value: Any) -> Any:
    """Await ``value`` if it is awaitable (hooks may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


# ---- registry -----------------------------------------------------------------------------
_JOBS: dict[str, type[Job]] = {}
J = TypeVar("J", bound=type[Job])


class UnknownJobClass(AgentError, LookupError):
    """No job class is registered under the requested name (an
    :class:`~agent.errors.AgentError` with no HTTP status; ``parse_spec`` turns it into a
    ``JobSpecError`` on ``job_class``)."""


def register_job(name: str) -> Callable[[J], J]:
    """Class decorator: register a :class:`Job` subclass under ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError("job class names are non-empty strings")

    def deco(cls: J) -> J:
        if not (isinstance(cls, type) and issubclass(cls, Job)):
            raise TypeError(f"{cls!r} is not a Job subclass")
        existing = _JOBS.get(name)
        if existing is not None and existing is not cls:
            same = (existing.__module__, existing.__qualname__) == (
                cls.__module__,
                cls.__qualname__,
            )
            if not same:
                raise ValueError(f"job class name {name!r} is already registered by {existing!r}")
        cls.registered_name = name
        _JOBS[name] = cls
        return cls

    return deco


def job_class(name: str) -> type[Job]:
    """The class registered under ``name`` (``UnknownJobClass`` lists the known names)."""
    try:
        return _JOBS[name]
    except (KeyError, TypeError):
        known = ", ".join(job_names()) or "none"
        raise UnknownJobClass(f"unknown job class {name!r}; registered: {known}") from None


def job_names() -> list[str]:
    """Registered job class names, sorted."""
    return sorted(_JOBS)


def load_entry_points(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Import the job classes installed distributions declare in ``group``; returns the
    names loaded. A failing entry point is skipped (its error is returned in the name list
    as ``"name: error"`` so the caller can log it)."""
    loaded = []
    for ep in entry_points(group=group):
        try:
            cls = ep.load()
            if ep.name not in _JOBS:
                register_job(ep.name)(cls)
            loaded.append(ep.name)
        except Exception as exc:
            loaded.append(f"{ep.name}: {type(exc).__name__}: {exc}")
    return loaded


def load_job_modules(modules: Iterable[str]) -> list[str]:
    """Import modules named in the *operator's local configuration* (never from network
    input) so their ``@register_job`` classes register; returns the job names registered."""
    before = set(_JOBS)
    for name in modules:
        importlib.import_module(name)
    return sorted(set(_JOBS) - before)


def parse_spec(data: Any) -> JobSpec:
    """Validate a submitted spec, defaulting the aggregator to its job class's choice, and
    dry-run it (:func:`dry_run`: the job class's ``setup()`` with the spec's params), so a
    spec accepted here is one every agent can instantiate.

    Raises :class:`~agent.jobs.spec.JobSpecError` (``job_class`` field for unknown classes; the
    class's :meth:`Job.check_spec` or ``setup()`` may reject the spec too, e.g. invalid params).
    """
    if isinstance(data, dict) and isinstance(data.get("job_class"), str):
        try:
            cls = job_class(data["job_class"])
        except UnknownJobClass as exc:
            raise JobSpecError("job_class", str(exc)) from None
        spec = JobSpec.from_dict(data, default_aggregator=cls.default_aggregator)
        try:
            cls.check_spec(spec)
        except JobSpecError:
            raise
        except ValueError as exc:
            raise _spec_error(str(exc)) from None
        dry_run(spec)
        return spec
    spec = JobSpec.from_dict(data)
    dry_run(spec)
    return spec


#: the spec fields a job class's error message may start with ("trees: needs 1 tree")
_SPEC_FIELDS = frozenset(f.name for f in dataclass_fields(JobSpec))
_LEADING_FIELD = re.compile(r"(params(?:\.[A-Za-z0-9_\-]+)*|[a-z_]+)(?=[:\s]|$)")


def _field_of(message: str) -> str:
    """The field a job class's error message names first (``params.k: must be ...`` →
    ``params.k``; ``trees: needs 1 tree`` → ``trees``); ``params`` when it names none (a
    class's ``setup()`` validates its params)."""
    match = _LEADING_FIELD.match(message)
    if match is not None:
        name = match.group(1)
        if name.startswith("params") or name in _SPEC_FIELDS:
            return name
    return "params"


def _spec_error(message: str) -> JobSpecError:
    """A job class's error as a ``JobSpecError`` on the field it names (named once)."""
    field_name = _field_of(message)
    if message.startswith(field_name) and message != field_name:
        message = message[len(field_name) :].lstrip(": ") or message
    return JobSpecError(field_name, message)


def dry_run(spec: JobSpec) -> Job:
    """Build the spec's job instance as every agent will (``create_job``: the class's
    ``setup()`` runs with the spec's params) and its aggregator, without binding it to a
    runtime; returns the instance. Anything the class raises — a ``ValueError`` from its
    validation or any other exception from its code — is a :class:`JobSpecError` naming the
    field the message names (else ``params``), so the submission or change gets a 400 instead
    of failing later on every agent."""
    try:
        job = create_job(spec)
        job.make_aggregator()
    except JobSpecError:
        raise
    except UnknownJobClass as exc:
        raise JobSpecError("job_class", str(exc)) from None
    except Exception as exc:  # job-class code: any failure refuses the spec
        message = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise _spec_error(message) from None
    return job


def create_job(spec: JobSpec) -> Job:
    """Instantiate the spec's registered job class."""
    return job_class(spec.job_class)(spec)
