"""Results serving of one job on one agent: where the masters are, and what they hold.

Contract (:class:`ResultQueries`, one per job runtime, on the event loop):

* :meth:`~ResultQueries.master_url` is the data-plane URL of a tree's master: this agent's own
  when it is the root, else a cached answer (at most ``RuntimeTunables.master_url_ttl``
  seconds old, one lookup shared by concurrent callers) or a fresh tree query.
  :meth:`~ResultQueries.forget_master_url` drops a stale answer, and tells the overlay when
  that master's port refused us (its process is gone).
* :meth:`~ResultQueries.local_results` answers, as a master, for one (tree, epoch): a spilled
  epoch is read back in a thread, an epoch this master no longer holds - or holds but has not
  published, not having settled (a restarted master) - is asked of the lake, and a dropped
  one is answered with the bound that dropped it (``gone``), never guessed.
* :meth:`~ResultQueries.results` is the job's result for an epoch: every tree's master is
  asked, the parts merged (top k re-cut), and the answer says whether it is final, partial
  or tentative (docs/fault-tolerance.md); an epoch a bound dropped is 410 ``Gone``.
* Under ``EMIT FINAL`` (the spec's ``emit``, or the reader's ``emit`` override) a reader never
  gets a tentative version: without an epoch :meth:`~ResultQueries.results` answers the newest
  epoch whose result is final or partial (404 if none is yet), and an epoch still tentative
  is 409 :class:`NotFinal`, naming its state, version and what it lacks.
  :meth:`~ResultQueries.versions` lists the epochs every tree's master holds with their merged
  ``revision`` and state (the results stream polls it: ``agent/runtime/ops/results_stream.py``).
* A job that closes windows of its own (``Job.closed_windows``: ELF QL's ``WINDOW SESSION``)
  gets, from its first tree's master, the windows each epoch closed in the reply's
  ``sessions`` (``docs/ql.md``); a stored epoch whose ``on_epoch_result`` has not run yet is
  waited for (at most :data:`SESSION_WAITS` record-thread round trips, queued behind it).
* :meth:`~ResultQueries.accuracy_now` never waits: an estimate not computed yet is computed
  in the background for the next reader.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from agent.errors import BadRequest, Conflict, Gone, NotFound, Unavailable
from agent.jsonable import jsonable
from agent.runtime.job.host import JobHost
from agent.runtime.results.emission import EMITS, Seen, shown
from agent.runtime.results.lake_history import provenance
from agent.runtime.results.topk_accuracy import MISSING, AccuracyCache, merged_accuracy
from srt import DataPlaneError
from srt.dataplane.lineage import covered

#: the newest final epochs tried when a newer one turned tentative between listing and reading
FINAL_TRIES = 3
#: record-thread round trips a master waits for a stored epoch's on_epoch_result to run
#: before answering its ``sessions`` as pending (the hook runs right after the store)
SESSION_WAITS = 8
#: the sessions one results reply carries at most (the rest counted in ``omitted``: the lake
#: has every one)
SESSION_ROWS = 10_000


class NotFinal(Conflict):
    """409: the epoch asked for under ``EMIT FINAL`` is still tentative; ``details`` (sent
    next to ``error`` by the HTTP API) says its ``state``, ``version``, ``revision``,
    ``coverage`` and ``lacking``."""

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message, field="epoch")
        self.details = details


def merged_versions(listings: list[dict[str, Any]]) -> list[Seen]:
    """The epochs every tree's listing holds, each with its ``revision`` (the sum of the trees'
    versions) and merged state (tentative if any part is, else partial if any is, else final).
    A listing without states (an older peer) reads as tentative version 0."""
    if not listings:
        return []
    common = set.intersection(*(set(x.get("epochs") or ()) for x in listings))
    per_tree = [{int(e): (int(v), str(st)) for e, v, st in x.get("states") or ()} for x in listings]
    out = []
    for epoch in sorted(common):
        parts = [states.get(epoch, (0, "tentative")) for states in per_tree]
        got = {st for _, st in parts}
        state = "tentative" if "tentative" in got else "partial" if "partial" in got else "final"
        out.append(Seen(epoch, sum(v for v, _ in parts), state))
    return out


class ResultQueries:
    """A job's results as this agent serves them (see the module contract). ``accuracy``
    holds, as master of a top-k job, its results' accuracy estimates
    (agent/runtime/results/quality.py)."""

    def __init__(self, host: JobHost) -> None:
        self.host = host
        self.accuracy = AccuracyCache()
        self._estimating: set[tuple[int, int]] = set()  # (tree, epoch) estimates under way
        self._master_urls: dict[int, tuple[asyncio.Future[str], float]] = {}
        self._master_nodes: dict[int, int] = {}  # tree → the node id its master URL names

    @property
    def emit(self) -> str:
        """The job's ``emit`` now (its spec's; changeable at runtime)."""
        return self.host.spec.emit

    def release(self) -> None:
        """The job stopped: forget the cached master lookups."""
        self._master_urls.clear()

    async def master_url(self, tid: int) -> str:
        """The data-plane URL of the tree's master: ours, a cached answer (a few seconds
        old at most, shared by concurrent callers) or a fresh tree query."""
        network = self.host.network
        trees = network.trees
        assert trees is not None
        view = trees.view(tid)
        if view is not None and view.is_root:
            return network.data_url
        now = time.monotonic()
        cached = self._master_urls.get(tid)
        if cached is not None and (not cached[0].done() or cached[1] > now):
            return await asyncio.shield(cached[0])
        lookup = asyncio.ensure_future(self._ask_master_url(tid))
        self._master_urls[tid] = (lookup, now + self.host.tunables.master_url_ttl)
        try:
            return await asyncio.shield(lookup)
        except Exception:
            self._master_urls.pop(tid, None)
            raise

    async def _ask_master_url(self, tid: int) -> str:
        trees = self.host.network.trees
        assert trees is not None
        try:
            reply = await trees.query(tid, {"op": "where"}, timeout=5.0)
        except Exception as exc:
            raise Unavailable(f"the master of {self.host.name!r} did not answer: {exc}") from None
        try:
            self._master_nodes[tid] = int(str(reply.get("node_id")), 16)
        except ValueError:
            self._master_nodes.pop(tid, None)
        return str(reply["data_url"])

    def forget_master_url(self, tid: int, exc: BaseException | None = None) -> None:
        """Drop the cached master URL of ``tid``; if ``exc`` says that master's port refused
        us, its process is gone: tell the overlay (the next lookup then routes past it to the
        standby instead of waiting for the failure detector)."""
        self._master_urls.pop(tid, None)
        node = self._master_nodes.pop(tid, None)
        if node is not None and isinstance(exc, DataPlaneError) and exc.reason == "refused":
            self.host.network.peer_gone(node)

    async def local_results(self, tid: int, epoch: Any) -> dict[str, Any]:
        """This master's result for (tree, epoch); ``gone`` names the bound that dropped an
        epoch it no longer holds. A spilled epoch is read back in a thread."""
        host = self.host
        store, spec = host.store, host.spec
        epochs = store.epochs(tid)
        if epoch is None:
            states = []
            for e in epochs:
                held = store.peek(tid, e)
                if held is not None:
                    states.append([e, held.version, held.state])
            return {"epochs": epochs, "states": states}
        result = store.get(tid, int(epoch))
        # the lake answers an epoch this master no longer holds (before it, or dropped), and
        # one it holds unpublished - not settled, a restarted master waiting for its
        # predecessor's hand-over - when the lake's version lacks fewer origins than ours
        # (ours may be our own re-read share alone; a repair here may know more than both)
        waiting = result is not None and host.recovery.unpublished(tid, int(epoch))
        sessions = await self._closed_sessions(tid, int(epoch), held=result is not None)
        found = None
        if host.lake is not None and (result is None or waiting):
            found = await host.lake.history(tid, int(epoch))
            if (
                found is not None
                and found["rows"] is not None
                and (result is None or len(found.get("lacking") or ()) < len(result.lacking))
            ):
                return {"epochs": epochs, **found, **sessions}
        if result is None:
            gone = store.gone(tid, int(epoch)) or (found or {}).get("gone")
            return {"epochs": epochs, "rows": None, "gone": gone}
        snap = result.snapshot
        if snap is None:
            try:
                snap = await asyncio.to_thread(store.load, tid, int(epoch))
            except Exception as exc:  # deleted meanwhile or damaged: say so, never guess
                host.count("result_spill_read_errors")
                return {"epochs": epochs, "rows": None, "gone": f"spill file unreadable: {exc}"}
        pairs = snap if spec.top_k is None else host.operator.result(snap)
        span = spec.window_bounds(int(epoch)) or (int(epoch), int(epoch))
        quality: dict[str, Any] = {}
        if spec.top_k is not None:  # the tree's accuracy estimate and its candidates
            quality = await self.accuracy.answer(
                tid, int(epoch), result, snap, k=spec.top_k, largest=spec.top_k_largest
            )
        return {
            "epochs": epochs,
            "rows": [[jsonable(k), jsonable(v)] for k, v in pairs],
            "updated": result.updated,
            "completed_at": result.completed_at,
            "version": result.version,
            "term": result.term,
            "policy": result.policy,
            "tentative": result.tentative,
            "partial": result.partial,
            "state": result.state,
            "preview": result.preview,
            "coverage": result.coverage,
            "lacking": list(result.lacking),
            "origins": None if result.origins is None else len(covered(result.origins)),
            **quality,
            # records refused as later than allowed_lateness (the job's first tree's master
            # keeps the origins' reports; results/late_ledger.py): a window's, its panes'
            **({"late": host.late_ledger.of(*span)} if tid == host.tree_list[0] else {}),
            **sessions,
        }

    async def _closed_sessions(self, tid: int, epoch: int, *, held: bool) -> dict[str, Any]:
        """``{"sessions": ...}``: the windows the job closed with ``epoch``
        (``Job.closed_windows``), asked of the first tree's master; ``{}`` for other trees and
        jobs that close none. A held epoch not fed to the job yet is waited for: its
        ``on_epoch_result`` is queued on the record thread right after the store, so a few
        round trips there (the hook asked again behind it) reach it."""
        host = self.host
        if tid != host.tree_list[0]:
            return {}
        job = host.changes.job_for(epoch)
        got = job.closed_windows(epoch, SESSION_ROWS)  # a lookup, on the loop (its contract)
        for _ in range(SESSION_WAITS if held else 0):
            if not isinstance(got, dict) or not got.get("pending"):
                break
            got = await host.call_job(job.closed_windows, epoch, SESSION_ROWS)
        return {} if got is None else {"sessions": got}

    def accuracy_now(self, tid: int, epoch: int, result: Any) -> float | None:
        """As master of a top-k job: the accuracy estimate of a stored result if computed
        already, else None - and it is computed in the background (off the loop) for the next
        reader (the dashboard's summary, built on the loop, never waits for it)."""
        spec = self.host.spec
        if spec.top_k is None:
            return None
        got = self.accuracy.peek(tid, epoch, result.version)
        if got is not MISSING:
            return got
        snap = result.snapshot
        if snap is not None and (tid, epoch) not in self._estimating:
            self._estimating.add((tid, epoch))
            # this version's figures, as they are now: a fold meanwhile is another version
            now = SimpleNamespace(
                version=result.version, coverage=result.coverage, tentative=result.tentative
            )

            async def estimate() -> None:
                try:
                    await self.accuracy.answer(
                        tid, epoch, now, snap, k=self.host.spec.top_k or 1,
                        largest=self.host.spec.top_k_largest,
                    )  # fmt: skip
                finally:
                    self._estimating.discard((tid, epoch))

            self.host.tasks.spawn(estimate(), f"{self.host.name} accuracy")
        return None

    async def _tree_results(self, tid: int, epoch: int | None) -> dict[str, Any]:
        network, name = self.host.network, self.host.name
        body = {"job": name, "tree": tid, "epoch": epoch}
        for attempt in range(2):  # a cached master URL may be stale after a hand-over
            url = await self.master_url(tid)
            if url == network.data_url:
                return await self.local_results(tid, epoch)
            try:
                return await network.client.post_json(url, "/agent/v1/results", body)
            except DataPlaneError as exc:
                self.forget_master_url(tid, exc)
                if attempt:
                    raise Unavailable(f"the master of {name!r} failed: {exc}") from None
        raise AssertionError("unreachable")

    async def versions(self) -> list[Seen]:
        """The epochs all m masters hold, with revision and state (:func:`merged_versions`)."""
        tree_list = self.host.tree_list
        listings = await asyncio.gather(*(self._tree_results(t, None) for t in tree_list))
        return merged_versions(list(listings))

    async def results(self, epoch: int | None, emit: str | None = None) -> dict[str, Any]:
        """The job's result for ``epoch`` (default: the newest epoch all m masters have) under
        ``emit`` (default the spec's): ``final`` never answers a tentative version (module
        contract)."""
        emit = emit or self.host.spec.emit
        if emit not in EMITS:
            raise BadRequest(f"emit must be one of {', '.join(EMITS)}, got {emit!r}", field="emit")
        if emit == "changes":
            return {**await self._result(epoch), "emit": emit}
        if epoch is not None:
            got = await self._result(epoch)
            if got["state"] == "tentative":
                raise NotFinal(
                    f"job {self.host.name!r}: epoch {epoch} is not final yet (tentative, "
                    f"lacking {len(got['lacking'])} origin(s)); this job emits final results "
                    "only (?emit=changes shows tentative versions)",
                    {key: got[key] for key in ("epoch", "state", "version", "revision",
                                                "coverage", "lacking")},
                )  # fmt: skip
            return {**got, "emit": emit}
        seen = await self.versions()
        settled = [s.epoch for s in reversed(seen) if shown(emit, s.state)]
        for candidate in settled[:FINAL_TRIES]:
            try:
                got = await self._result(candidate)
            except (NotFound, Gone):
                continue
            if got["state"] != "tentative":
                return {**got, "emit": emit}
        newest = f" (the newest, epoch {seen[-1].epoch}, is tentative)" if seen else ""
        raise NotFound(
            f"job {self.host.name!r} has no final epoch yet{newest}; this job emits final "
            "results only (?emit=changes shows tentative versions)"
        )

    async def _result(self, epoch: int | None) -> dict[str, Any]:
        """The job's result for ``epoch`` whatever its state (default: the newest epoch all m
        masters have)."""
        host = self.host
        name, tree_list = host.name, host.tree_list
        if epoch is not None and epoch < 0:
            raise BadRequest("epoch must be ≥ 0")
        if epoch is None:
            listings = await asyncio.gather(*(self._tree_results(t, None) for t in tree_list))
            common = set.intersection(*(set(x["epochs"]) for x in listings))
            if not common:
                raise NotFound(f"job {name!r} has no complete epoch yet")
            epoch = max(common)
        parts = await asyncio.gather(*(self._tree_results(t, epoch) for t in tree_list))
        missing = [i for i, p in enumerate(parts) if p.get("rows") is None]
        gone = sorted({str(p["gone"]) for p in parts if p.get("gone")})
        if gone:  # partly or wholly dropped by a bound: never a silently partial answer
            raise Gone(
                f"job {name!r}: epoch {epoch} is no longer held by its master "
                f"({'; '.join(gone)}); read it from the lake"
            )
        if len(missing) == len(parts):
            raise NotFound(f"job {name!r} has no result for epoch {epoch}")
        spec = host.spec
        held = [p for p in parts if p.get("rows") is not None]
        rows = [row for p in held for row in p["rows"]]
        if spec.top_k is not None:
            # Trees own disjoint key ranges, so the global top k is among the trees' top k;
            # the stable sort keeps the trees' hash order among equal values.
            rows.sort(key=lambda r: r[1], reverse=spec.top_k_largest)
            del rows[spec.top_k :]
        # e.g. QL: named columns, HAVING, ORDER BY
        named = await host.call_job(host.changes.job_for(epoch).result_rows, rows)
        return {
            "job": name,
            "epoch": epoch,
            "epoch_seconds": spec.schedule.seconds_of(epoch),
            "epoch_start": spec.schedule.start(epoch),
            "complete": not missing,
            "updated": any(p.get("updated") for p in parts),
            # tentative until every expected origin is in (docs/fault-tolerance.md)
            "tentative": (tentative := bool(missing) or any(p.get("tentative") for p in parts)),
            # partial: lacks only origins given up on (docs/fault-tolerance.md)
            "partial": (partial := not tentative and any(p.get("partial") for p in parts)),
            "state": "tentative" if tentative else "partial" if partial else "final",
            "preview": any(p.get("preview") for p in parts),
            "coverage": min((float(p.get("coverage", 1.0)) for p in held), default=0.0),
            "accuracy": (
                None if spec.top_k is None or missing else await merged_accuracy(held, spec.top_k)
            ),
            "lacking": sorted({o for p in parts for o in p.get("lacking") or ()}),
            "version": max((int(p.get("version", 1)) for p in held), default=1),
            # grows with every new version of any tree's part: the results stream's cursor
            "revision": sum(int(p.get("version", 1)) for p in held),
            "term": max((int(p.get("term", 0)) for p in held), default=0),
            # the fault-tolerance policy that produced the trees' results (one per policy)
            "policy": sorted({str(p["policy"]) for p in held if p.get("policy")}),
            "rows": rows if named is None else named,
            # records offered for the epoch but refused as late: not in its rows (None: unknown)
            "late": parts[0].get("late"),
            # a session query's sessions closed with this epoch (its first tree's master)
            **({"sessions": parts[0]["sessions"]} if parts[0].get("sessions") else {}),
            **provenance(parts),
        }

    async def answer_query(self, message: Any) -> dict[str, Any]:
        """As the job's master: its ``on_query`` reply to another job's (or a user's) query;
        a malformed message or reply is an error reply, never raised."""
        if not isinstance(message, dict):
            return {"error": "query message must be a JSON object", "status": 400}
        reply = await self.host.call_job(self.host.job.on_query, message)
        if not isinstance(reply, dict):
            return {"error": "the job's on_query returned no object", "status": 500}
        return reply

    async def query_master(self, message: dict[str, Any]) -> dict[str, Any]:
        """Ask this job's master (its ``on_query``), through the trees."""
        return await self.host.context.route(self.host.app_id, message)
