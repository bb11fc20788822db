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
* :meth:`~ResultQueries.accuracy_now` never waits: an estimate not computed yet is computed
  in the background for the next reader.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

from agent.errors import BadRequest, Gone, NotFound, Unavailable
from agent.jsonable import jsonable
from agent.runtime.job.host import JobHost
from agent.runtime.results.lake_history import provenance
from agent.runtime.results.topk_accuracy import MISSING, AccuracyCache, merged_accuracy
from srt import DataPlaneError
from srt.dataplane.lineage import covered


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
            return {"epochs": epochs}
        result = store.get(tid, int(epoch))
        # the lake answers an epoch this master no longer holds (before it, or dropped), and
        # one it holds unpublished - not settled, a restarted master waiting for its
        # predecessor's hand-over - when the lake's version lacks fewer origins than ours
        # (ours may be our own re-read share alone; a repair here may know more than both)
        waiting = result is not None and host.recovery.unpublished(tid, int(epoch))
        found = None
        if host.lake is not None and (result is None or waiting):
            found = await host.lake.history(tid, int(epoch))
            if (
                found is not None
                and found["rows"] is not None
                and (result is None or len(found.get("lacking") or ()) < len(result.lacking))
            ):
                return {"epochs": epochs, **found}
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
            # keeps the origins' reports; results/late_ledger.py)
            **({"late": host.late_ledger.of(int(epoch))} if tid == host.tree_list[0] else {}),
        }

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

    async def results(self, epoch: int | None) -> dict[str, Any]:
        """The job's result for ``epoch`` (default: the newest epoch all m masters have)."""
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
            "term": max((int(p.get("term", 0)) for p in held), default=0),
            # the fault-tolerance policy that produced the trees' results (one per policy)
            "policy": sorted({str(p["policy"]) for p in held if p.get("policy")}),
            "rows": rows if named is None else named,
            # records offered for the epoch but refused as late: not in its rows (None: unknown)
            "late": parts[0].get("late"),
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
