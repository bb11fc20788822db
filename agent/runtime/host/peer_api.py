"""The peer wire: every ``/agent/v1`` route and the snapshot handler of one agent's data plane.

Contract: :class:`PeerApi` installs on the agent's :class:`~srt.DataPlaneServer` (which
authenticates every request with the cluster secret) the routes other agents call:

* the job table's anti-entropy (``/agent/v1/jobs``) and the dashboard's summary
  (``/agent/v1/summary``);
* a job's runtimes talking to one another: results (``/results``), hand-over (``/handover``),
  late contributions (``/late``), origins' late-record counts (``/late-records``), repair
  pulls (``/resend``), standby replication (``/replica``), origins joining and leaving
  (``/origin``, ``/leave``), the master's membership copies (``/members``), a replicated
  master's position (``/position``, and its members' epochs on
  ``/srt/v1/replica-snapshot``), hot-replica checkpoints (``/checkpoint``,
  ``/checkpoint/fetch``), a job's ``send_to`` (``/recv``), the operator's retirement relayed to
  a master (``/retire``), and the SRT snapshot push (``/srt/v1/snapshot``).

**One unknown-job rejection** (:func:`runtime_or_reject`): a peer names a job because its own
runtime of that job routes the request here (this agent is on the job's tree, its master, an
origin or a standby). When this agent has no runtime of that job it does not run it *yet* (the
job table's multicast is in flight, the agent restarted) or *any more* (just stopped): the
answer is **503** ``unknown_job``, "retry later or ask another agent", which is what every
caller does (the snapshot push retries transient statuses only; the other callers retry or
move on whatever the status). The one exception is the operator's retirement relayed to a
master (``/agent/v1/retire``): the job there is the operator's word, and an unknown one is the
operator's 404 ``unknown_job`` as on the user API (docs/http-api.md).

The handlers reach a job's runtime only through :class:`PeerRuntime` (the
:class:`~agent.runtime.job.runtime.JobRuntime` methods this wire calls) and the agent through
the narrow objects given to the constructor; malformed bodies are a clear 400.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from aiohttp import web

from agent.errors import BadRequest, NotFound, Unavailable
from agent.jsonable import jsonable
from agent.runtime.job.late_reports import PATH as LATE_RECORDS_PATH
from agent.runtime.ops.dashboard.cluster import SUMMARY_PATH
from agent.runtime.ops.membership_api import RETIRE_PATH, parse_origin, parse_why, retire_here
from agent.runtime.recovery.active_replicas import EVENTS, POSITION_PATH, REPLICAS_PATH
from agent.runtime.recovery.budget_positions import REPORT_PATH
from agent.runtime.recovery.checkpoints import decode_epochs, decode_records
from agent.runtime.recovery.position_forward import EVENT_PATH
from agent.runtime.recovery.result_items import decode_items
from agent.runtime.results.late_ledger import parse_report
from cbt import Snapshot, SnapshotError
from srt import SnapshotName
from srt.dataplane.lineage import decode as lineage_of
from srt.dataplane.name import POSITION_SNAPSHOT_PATH, REPLICA_SNAPSHOT_PATH
from srt.dataplane.upstream import check_url
from srt.errors import Reject

#: replicas an inner holder's parent may name (a policy has at most 5 per position)
MAX_PARENT_REPLICAS = 8
MAX_DOMAIN = 64  # characters of a failure-domain label kept from a report
#: the error code of the unknown-job rejection (:func:`runtime_or_reject`)
UNKNOWN_JOB = "unknown_job"


class PeerRecovery(Protocol):
    """The fault-tolerance entry points the peer wire calls
    (:class:`~agent.runtime.recovery.recovery.Recovery`)."""

    async def resend(self, tid: int, origin: int, epochs: list[int]) -> dict[str, Any]: ...
    def origin_joined(self, tid: int, origin: int, start: int, url: Any = None) -> None: ...
    async def accept_leave(self, tid: int, origin: int, body: dict[str, Any]) -> bool: ...
    def accept_members(self, tid: int, body: dict[str, Any]) -> None: ...
    def accept_replica(self, tid: int, body: dict[str, Any]) -> dict[str, Any]: ...
    def absorb(
        self, tid: int, items: list[dict[str, Any]], expected: Any = None, term: Any = 0
    ) -> int: ...
    def offer_late(self, name: SnapshotName, snap: Snapshot, origins: Any) -> str: ...
    def retire_origin(self, origin: int, why: str) -> dict[str, Any]: ...
    def position(
        self, tid: int, holder: int, members: list[int], parent: dict[str, Any] | None = None
    ) -> None: ...
    def offer_replica(
        self, name: SnapshotName, snap: Snapshot, origins: Any, position: int | None = None
    ) -> str: ...
    def position_event(
        self, tid: int, holder: int, event: str, member: int | None
    ) -> dict[str, Any]: ...
    def heard_replicas(self, tid: int, message: dict[str, Any]) -> None: ...
    def position_report(
        self, tid: int, holder: int, parent: int | None, domain: str, children: dict[int, str]
    ) -> None: ...


class PeerTrees(Protocol):
    """A child's snapshot into the job's barrier (:class:`~agent.runtime.job.trees.TreeLinks`)."""

    def offer_child(self, name: SnapshotName, snap: Snapshot, origins: Any) -> str: ...
    def offer_position(self, name: SnapshotName, snap: Snapshot, origins: Any) -> str: ...


class PeerControl(Protocol):
    """A peer's ``send_to`` (:class:`~agent.runtime.job.control.JobControl`)."""

    async def receive(self, sender: int, paos: Any) -> None: ...


class PeerQueries(Protocol):
    """A tree's results asked of its master (:class:`~agent.runtime.job.queries.ResultQueries`)."""

    async def local_results(self, tid: int, epoch: Any) -> dict[str, Any]: ...


class PeerRuntime(Protocol):
    """The :class:`~agent.runtime.job.runtime.JobRuntime` parts the peer wire calls."""

    @property
    def tree_set(self) -> set[int]: ...
    @property
    def recovery(self) -> PeerRecovery: ...
    @property
    def trees(self) -> PeerTrees: ...
    @property
    def control(self) -> PeerControl: ...
    @property
    def queries(self) -> PeerQueries: ...
    def accept_late_records(self, origin: str, epochs: Mapping[int, Mapping[str, int]]) -> bool:
        """An origin's late-record report (agent/runtime/job/late_reports.py); False when
        this agent is not the job's master (any more)."""


class HeldCheckpoints(Protocol):
    """Other agents' checkpoints held here
    (:class:`~agent.runtime.recovery.checkpoints.CheckpointStore`)."""

    def keep(
        self,
        origin: int,
        job: str,
        tree: int,
        committed: int | None,
        epochs: dict[int, bytes],
        records: dict[int, int] | None = None,
        seen: int | None = None,
    ) -> int: ...
    def fetch(
        self, origin: int, job: str, tree: int, epochs: Iterable[int] | None
    ) -> dict[int, bytes]: ...
    def records(
        self, origin: int, job: str, tree: int, epochs: Iterable[int]
    ) -> dict[int, int]: ...
    def seen(self, origin: int, job: str) -> int | None: ...


class TableCopy(Protocol):
    """The replicated job table as anti-entropy hands it out
    (:class:`agent.jobs.table.JobTable`)."""

    def snapshot(self) -> list[dict[str, Any]]: ...
    def removed(self) -> list[dict[str, Any]]: ...


class PeerServer(Protocol):
    """Where the routes go (:class:`srt.DataPlaneServer`)."""

    def route(self, method: str, path: str, handler: Callable[..., Any]) -> None: ...
    def on_snapshot(self, handler: Callable[..., Any], path: str = ...) -> None: ...


R = TypeVar("R")


def runtime_or_reject(runtimes: Mapping[str, R], job: Any) -> R:
    """This agent's runtime of ``job``, or the one unknown-job rejection of the peer wire:
    503 ``unknown_job`` (module contract)."""
    runtime = runtimes.get(job) if isinstance(job, str) else None
    if runtime is None:
        raise Reject(503, UNKNOWN_JOB, f"job {job!r} does not run here (yet)")
    return runtime


class PeerApi:
    """The peer routes of the module contract over one agent's runtimes."""

    def __init__(
        self,
        runtimes: Mapping[str, PeerRuntime],
        *,
        checkpoints: HeldCheckpoints,
        table: TableCopy,
        summary: Callable[[], dict[str, Any]],
        count: Callable[[str], None],
    ) -> None:
        self.runtimes = runtimes
        self.checkpoints = checkpoints
        self.table = table
        self.summary = summary
        self.count = count

    def install(self, server: PeerServer) -> None:
        """Register every route of the module contract on ``server``."""
        server.on_snapshot(self.on_snapshot)
        server.on_snapshot(self.on_replica_snapshot, path=REPLICA_SNAPSHOT_PATH)
        server.on_snapshot(self.on_position_snapshot, path=POSITION_SNAPSHOT_PATH)
        for path, handler in (
            ("/agent/v1/jobs", self.serve_jobs),
            ("/agent/v1/results", self.serve_results),
            ("/agent/v1/handover", self.serve_handover),
            ("/agent/v1/late", self.serve_late),
            (LATE_RECORDS_PATH, self.serve_late_records),
            ("/agent/v1/resend", self.serve_resend),
            ("/agent/v1/replica", self.serve_replica),
            (POSITION_PATH, self.serve_position),
            (REPLICAS_PATH, self.serve_replicas),
            (EVENT_PATH, self.serve_position_event),
            (REPORT_PATH, self.serve_position_report),
            ("/agent/v1/origin", self.serve_origin),
            ("/agent/v1/leave", self.serve_leave),
            ("/agent/v1/members", self.serve_members),
            ("/agent/v1/checkpoint", self.serve_checkpoint),
            ("/agent/v1/checkpoint/fetch", self.serve_checkpoint_fetch),
            ("/agent/v1/recv", self.serve_recv),
            (RETIRE_PATH, self.serve_retire),
            (SUMMARY_PATH, self.serve_summary),
        ):
            server.route("POST", path, handler)

    # ---- the agent's own routes --------------------------------------------------------------

    async def serve_jobs(self, request: web.Request) -> dict[str, Any]:
        """The job table and its tombstones (one anti-entropy exchange)."""
        return {"jobs": self.table.snapshot(), "removed": self.table.removed()}

    async def serve_summary(self, request: web.Request) -> dict[str, Any]:
        """This agent's compact picture, for a peer's dashboard (docs/dashboard.md)."""
        return self.summary()

    # ---- a job's runtimes talking to one another ---------------------------------------------

    async def on_snapshot(self, name: SnapshotName, payload: bytes) -> str:
        """A child's snapshot (``/srt/v1/snapshot``)."""
        runtime = runtime_or_reject(self.runtimes, name.job)
        if name.tree not in runtime.tree_set:
            # a tree of the job not known here yet (multicast in flight): the child retries
            raise Reject(503, UNKNOWN_JOB, f"job {name.job!r} tree not known here yet")
        origins, payload = lineage_of(payload)  # LineageError (a SnapshotError) → 422
        snap = Snapshot.from_bytes(payload)  # SnapshotError → 422, the sender resends
        return runtime.trees.offer_child(name, snap, origins)

    async def on_replica_snapshot(
        self, name: SnapshotName, payload: bytes, position: int | None = None
    ) -> str:
        """A member's epoch sent to this agent as a replica of ``position``'s holder
        (``/srt/v1/replica-snapshot``; 503 ``no_position`` before the holder's
        announcement)."""
        runtime = runtime_or_reject(self.runtimes, name.job)
        origins, payload = lineage_of(payload)  # LineageError (a SnapshotError) → 422
        snap = Snapshot.from_bytes(payload)  # SnapshotError → 422, the sender resends
        return runtime.recovery.offer_replica(name, snap, origins, position)

    async def on_position_snapshot(self, name: SnapshotName, payload: bytes) -> str:
        """A dead child's replicated position's epoch, sent by its replica as the child
        (``/srt/v1/position-snapshot``)."""
        runtime = runtime_or_reject(self.runtimes, name.job)
        origins, payload = lineage_of(payload)  # LineageError (a SnapshotError) → 422
        snap = Snapshot.from_bytes(payload)  # SnapshotError → 422, the sender resends
        return runtime.trees.offer_position(name, snap, origins)

    async def serve_position(self, request: web.Request) -> dict[str, Any]:
        """A replicated position's holder names this agent a replica of it, with its
        members (and, an inner holder, its parent: ``{"id", "url", "replicas"}``)."""
        body = await json_body(request, "job", "tree", "master", "members")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        members = body["members"]
        if not isinstance(members, list):
            raise Reject(400, "bad_body", "members must be a list of hex ids")
        tree, master = int_tree(body), hex_id(body["master"], "master")
        ids = [hex_id(m, "member") for m in members]
        parent = body.get("parent")
        if parent is not None:
            parent = parent_of_position(parent)
        runtime.recovery.position(tree, master, ids, parent)
        return {"ok": True}

    async def serve_replicas(self, request: web.Request) -> dict[str, Any]:
        """An inner holder tells this agent, its child, where its position's replicas are."""
        body = await json_body(request, "job", "tree", "master", "replicas")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        if not isinstance(body["replicas"], list):
            raise Reject(400, "bad_body", "replicas must be a list of [id, url] pairs")
        runtime.recovery.heard_replicas(int_tree(body), body)
        return {"ok": True}

    async def serve_position_report(self, request: web.Request) -> dict[str, Any]:
        """A position holder's place in the tree, to the master of a job with a replica
        budget (``{holder, parent, domain, children: [[id, domain]]}``)."""
        body = await json_body(request, "job", "tree", "holder", "parent", "domain", "children")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        children = body["children"]
        if not isinstance(children, list) or not isinstance(body["domain"], str):
            raise Reject(
                400, "bad_body", "children must be a list of [id, domain]; domain a string"
            )
        kids: dict[int, str] = {}
        for pair in children:
            if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str)):
                raise Reject(400, "bad_body", "each child is [hex id, domain]")
            kids[hex_id(pair[0], "child")] = pair[1][:MAX_DOMAIN]
        holder, parent = hex_id(body["holder"], "holder"), hex_id(body["parent"], "parent")
        tree = int_tree(body)
        runtime.recovery.position_report(tree, holder, parent, body["domain"][:MAX_DOMAIN], kids)
        return {"ok": True}

    async def serve_position_event(self, request: web.Request) -> dict[str, Any]:
        """A replicated position's event: ``leave`` (a member moved), ``standby`` /
        ``release`` / ``done`` (its replica, to the holder's parent)."""
        body = await json_body(request, "job", "tree", "position", "event")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        event = body["event"]
        if event not in EVENTS:
            raise Reject(400, "bad_body", f"event must be one of {', '.join(EVENTS)}")
        member = body.get("member")
        member_id = None if member is None else hex_id(member, "member")
        if event == "leave" and member_id is None:
            raise Reject(400, "bad_body", "a leave names its member")
        holder = hex_id(body["position"], "position")
        return runtime.recovery.position_event(int_tree(body), holder, event, member_id)

    async def serve_late(self, request: web.Request) -> dict[str, Any]:
        name = SnapshotName.from_headers(request.headers)
        runtime = runtime_or_reject(self.runtimes, name.job)
        try:
            origins, payload = lineage_of(await request.read())
            snap = Snapshot.from_bytes(payload)
        except SnapshotError as exc:
            raise Reject(422, "corrupt", str(exc)) from None
        return {"result": runtime.recovery.offer_late(name, snap, origins)}

    async def serve_results(self, request: web.Request) -> dict[str, Any]:
        body = await json_body(request, "job", "tree")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        try:
            return await runtime.queries.local_results(int(body["tree"]), body.get("epoch"))
        except (TypeError, ValueError, OverflowError) as exc:  # int(1e400): OverflowError
            raise Reject(400, "bad_body", f"bad tree or epoch: {exc}") from None

    async def serve_late_records(self, request: web.Request) -> dict[str, Any]:
        """An origin's late-record counts, to the job's master (``{"job", "origin",
        "epochs": [[epoch, {input: n}], ...]}``; agent/runtime/job/late_reports.py)."""
        body = await json_body(request, "job", "origin", "epochs")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        try:
            text = str(body["origin"])
            node = int(text, 16) if len(text) <= 42 else -1
            epochs = parse_report(body["epochs"])
        except ValueError as exc:
            raise Reject(400, "bad_body", str(exc)[:200]) from None
        if not 0 <= node < 1 << 160:
            raise Reject(400, "bad_body", "origin must be a 160-bit hex id")
        if not runtime.accept_late_records(format(node, "x"), epochs):
            # a stale master lookup: the sender forgets it and sends to the master again
            raise Reject(503, "not_master", f"not the master of {body['job']!r} (any more)")
        return {"ok": True}

    async def serve_resend(self, request: web.Request) -> dict[str, Any]:
        """A master repairing a tentative epoch asks this origin for its own snapshots."""
        body = await json_body(request, "job", "tree", "origin", "epochs")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        epochs = body["epochs"]
        if not isinstance(epochs, list) or not all(type(e) is int for e in epochs):
            raise Reject(400, "bad_body", "epochs must be a list of integers")
        tree, origin = tree_and_origin(body)
        return await runtime.recovery.resend(tree, origin, epochs)

    async def serve_origin(self, request: web.Request) -> dict[str, Any]:
        """An agent that reads a job's input tells the job's master it is an origin."""
        body = await json_body(request, "job", "tree", "origin", "from")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        start = body["from"]
        if type(start) is not int or start < 0:
            raise Reject(400, "bad_body", "from must be a non-negative integer epoch")
        tree, origin = tree_and_origin(body)
        runtime.recovery.origin_joined(tree, origin, start, body.get("url"))
        return {"ok": True}

    async def serve_leave(self, request: web.Request) -> dict[str, Any]:
        """An origin stopping gracefully declares its end to the job's master."""
        body = await json_body(request, "job", "tree", "origin", "through")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        tree, origin = tree_and_origin(body)
        try:
            left = await runtime.recovery.accept_leave(tree, origin, body)
        except Reject:
            raise
        except (TypeError, ValueError, KeyError, OverflowError, SnapshotError) as exc:
            raise Reject(400, "bad_body", f"leave rejected: {exc}") from None
        return {"left": left}

    async def serve_members(self, request: web.Request) -> dict[str, Any]:
        """A job's master shares its membership with the tree's likely next masters."""
        body = await json_body(request, "job", "tree", "term", "membership")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        try:
            runtime.recovery.accept_members(int(body["tree"]), body)
        except Reject:
            raise
        except (TypeError, ValueError, OverflowError) as exc:
            raise Reject(400, "bad_body", f"members rejected: {exc}") from None
        return {"ok": True}

    async def serve_replica(self, request: web.Request) -> dict[str, Any]:
        """A master replicating its state to this agent, its standby."""
        body = await json_body(request, "job", "tree", "master", "items")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        try:
            return runtime.recovery.accept_replica(int(body["tree"]), body)
        except Reject:
            raise
        except (TypeError, ValueError, KeyError, OverflowError, binascii.Error) as exc:
            raise Reject(400, "bad_replica", f"{type(exc).__name__}: {exc}") from None

    async def serve_handover(self, request: web.Request) -> dict[str, Any]:
        body = await json_body(request, "job", "tree", "items")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        try:
            items = decode_items(body["items"])
            taken = runtime.recovery.absorb(
                int(body["tree"]),
                items,
                body.get("expected"),
                body.get("term", 0),
                body.get("committed"),
            )
            return {"taken": taken}
        except Reject:  # 409 incompatible, 503 epoch_ahead / unknown_job: nothing taken
            self.count("bad_handover")
            raise
        except (KeyError, TypeError, ValueError, OverflowError, SnapshotError) as exc:
            self.count("bad_handover")
            raise Reject(400, "bad_handover", f"hand-over rejected: {exc}") from None

    async def serve_recv(self, request: web.Request) -> dict[str, Any]:
        body = await json_body(request, "job", "from")
        runtime = runtime_or_reject(self.runtimes, body["job"])
        try:
            sender = int(body["from"], 16)
            if "snapshot" in body:
                paos: Any = Snapshot.from_bytes(base64.b64decode(body["snapshot"]))
            else:
                paos = body.get("data")
        except (KeyError, ValueError, TypeError, SnapshotError) as exc:
            raise Reject(400, "bad_recv", f"bad send_to body: {exc}") from None
        await runtime.control.receive(sender, paos)  # 409 incompatible, 400 recv_refused
        return {"result": "delivered"}

    async def serve_retire(self, request: web.Request) -> dict[str, Any]:
        """``POST /agent/v1/retire`` ``{"job", "origin", "why"}``: as a master of the job,
        retire ``origin`` now (docs/http-api.md, "Origins"; the module contract's exception:
        an unknown job is the operator's 404)."""
        shape = "body must be an object with job, origin and why"
        body = await json_body(request, shape=shape)
        if not isinstance(body.get("job"), str):
            raise Reject(400, "bad_body", shape)
        try:
            origin, why = parse_origin(body.get("origin")), parse_why(body)
        except BadRequest as exc:
            raise Reject(400, "bad_body", str(exc)) from None
        runtime = self.runtimes.get(body["job"])
        if runtime is None:
            raise Reject(404, UNKNOWN_JOB, f"job {body['job']!r} does not run here")
        try:
            return jsonable(retire_here(runtime.recovery, origin, why), hex_ids=True)
        except NotFound as exc:
            raise Reject(404, "not_a_member", str(exc)) from None
        except Unavailable as exc:
            raise Reject(503, "not_master", str(exc)) from None

    # ---- hot-replica checkpoints (held here for other agents) --------------------------------

    async def serve_checkpoint(self, request: web.Request) -> dict[str, Any]:
        """An origin checkpoints its uncommitted epochs here, one of its hot replicas."""
        body = await json_body(request, "job", "tree", "origin", "epochs")
        tree, origin = tree_and_origin(body)
        job, committed = body["job"], body.get("committed")
        if not isinstance(job, str) or not job or len(job) > 256:
            raise Reject(400, "bad_body", "job must be a non-empty string")
        if committed is not None and type(committed) is not int:
            raise Reject(400, "bad_body", "committed must be an integer epoch or null")
        seen = body.get("seen")
        if seen is not None and type(seen) is not int:
            raise Reject(400, "bad_body", "seen must be an integer epoch or null")
        try:
            epochs = decode_epochs(body["epochs"])
            records = decode_records(body.get("records"))
        except ValueError as exc:
            raise Reject(400, "bad_body", str(exc)) from None
        held = self.checkpoints.keep(origin, job, tree, committed, epochs, records, seen)
        return {"held": held}

    async def serve_checkpoint_fetch(self, request: web.Request) -> dict[str, Any]:
        """A master re-issuing a lost origin's epochs asks for the checkpoints held here."""
        body = await json_body(request, "job", "tree", "origin")
        tree, origin = tree_and_origin(body)
        wanted = body.get("epochs")
        if wanted is not None and (
            not isinstance(wanted, list) or not all(type(e) is int for e in wanted)
        ):
            raise Reject(400, "bad_body", "epochs must be a list of integers")
        job = str(body["job"])
        parts = self.checkpoints.fetch(origin, job, tree, wanted)
        counts = self.checkpoints.records(origin, job, tree, parts)
        return {
            "epochs": {str(e): base64.b64encode(b).decode() for e, b in parts.items()},
            "records": {str(e): n for e, n in counts.items()},
            "seen": self.checkpoints.seen(origin, job),
        }


async def json_body(request: web.Request, *fields: str, shape: str = "") -> dict[str, Any]:
    """A peer request's JSON object holding ``fields``: 400 ``bad_json`` / ``bad_body`` (saying
    ``shape``, by default naming the fields) if not."""
    try:
        body = await request.json()
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly deep nesting
        raise Reject(400, "bad_json", f"body is not JSON: {str(exc)[:200]}") from None
    if not isinstance(body, dict) or any(f not in body for f in fields):
        raise Reject(400, "bad_body", shape or f"body must be an object with {', '.join(fields)}")
    return body


def tree_and_origin(body: dict[str, Any]) -> tuple[int, int]:
    """A peer request's ``tree`` (int) and ``origin`` (hex, a 160-bit id): 400 if not."""
    try:
        tree, origin = int(body["tree"]), int(str(body["origin"]), 16)
    except (TypeError, ValueError, OverflowError) as exc:
        raise Reject(400, "bad_body", f"bad tree or origin: {exc}") from None
    if not 0 <= origin < 1 << 160:
        raise Reject(400, "bad_body", "origin must be a 160-bit id")
    return tree, origin


def hex_id(raw: Any, what: str) -> int:
    """A 160-bit node id given as hex (400 ``bad_body`` otherwise)."""
    try:
        value = int(str(raw), 16)
    except (TypeError, ValueError):
        raise Reject(400, "bad_body", f"bad {what} id {str(raw)[:50]!r}") from None
    if not 0 <= value < 1 << 160:
        raise Reject(400, "bad_body", f"{what} must be a 160-bit id")
    return value


def int_tree(body: dict[str, Any]) -> int:
    """The body's ``tree`` (an integer id; 400 ``bad_body`` otherwise)."""
    tree = body["tree"]
    if type(tree) is not int or not 0 <= tree < 1 << 160:
        raise Reject(400, "bad_body", "tree must be a 160-bit integer id")
    return tree


def parent_of_position(raw: Any) -> dict[str, Any]:
    """An inner holder's ``parent``: ``{"id": hex, "url": str, "replicas": [[hex, url]]}``
    with each URL a data-plane URL (400 ``bad_body`` otherwise)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("url"), str):
        raise Reject(400, "bad_body", "parent must be {id, url, replicas}")
    replicas = raw.get("replicas") or []
    if not isinstance(replicas, list) or len(replicas) > MAX_PARENT_REPLICAS:
        raise Reject(400, "bad_body", "parent replicas must be a short list of [id, url]")
    pairs = []
    for pair in [raw["url"], *replicas]:
        url = (
            pair
            if isinstance(pair, str)
            else (pair[1] if isinstance(pair, list) and len(pair) == 2 else None)
        )
        try:
            check_url(url)
        except (TypeError, ValueError) as exc:
            raise Reject(400, "bad_body", f"bad url in parent: {exc}") from None
        if isinstance(pair, list):
            pairs.append([format(hex_id(pair[0], "parent replica"), "x"), url])
    return {
        "id": format(hex_id(raw.get("id"), "parent"), "x"),
        "url": raw["url"],
        "replicas": pairs,
    }
