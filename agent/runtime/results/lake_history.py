"""A job's earlier epoch results read back from the rollup lake (issue 12: after a master
change the results API answered 404 for every earlier epoch although the lake still had them).

Contract:

* :func:`read_epoch` — the result of one (job, tree i of m, epoch) as the current result the
  lake holds (its highest (term, version): ``spark_sink/lake.py``), in the shape a master's
  ``local_results`` reports a tree's part: ``rows`` (the ``[key, value]`` pairs, from the
  ``key_json`` / ``value_json`` columns: exactly what the master reported, top-k already
  applied per tree), ``source: "lake"``, ``term`` (the fencing term of the master that
  published it; 0 before terms), ``version``, ``tentative``, ``partial`` (it lacks retired
  origins: never exact), ``coverage``, ``lacking``, ``updated`` (``version > 1``) and, for a
  top-k job whose files carry it, ``accuracy`` (the tree's estimate). A job that names its
  result rows (``Job.result_rows``, e.g. ELF QL) is stored as each tree's named rows, from
  which the job's rows over all trees cannot be rebuilt exactly (ORDER BY / LIMIT apply to
  the union): that part has ``rows: None`` and ``gone`` says to read the epoch from the lake,
  never an approximation. None when the lake has no file for it.
* :func:`epochs` — the epochs of a job with at least one tree in the lake.
* **Bounded, off the loop**: pyarrow only; :func:`read_epoch` lists only the epoch's hour
  directory and reads one file (an epoch file, or one tree's compacted hour, filtered to the
  epoch); :class:`LakeHistory` runs it in a thread (``asyncio.to_thread``), at most
  ``concurrency`` reads at a time per job, so a burst of history requests neither blocks the
  event loop nor opens unbounded threads. A lake that cannot be read is logged at WARNING with
  the job, tree and epoch, counted (``lake_history_errors``) and answered as absent.
* :func:`provenance` — what the job's answer says about where its parts came from:
  ``source`` (``master``, ``lake`` or ``master+lake``) and, when the lake answered, ``lake``
  with the term and version (highest of each), tentative and partial (any), coverage
  (lowest), lacking (union) and the per-tree details.

Which lake: the agent's own (``lake`` in its configuration). A master answers from the lake
it writes to, so with a lake every agent shares (an object store, a shared file system) a new
master answers every epoch its predecessors wrote; with per-agent lakes, the epochs this
agent's lake holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import orjson

log = logging.getLogger(__name__)

NAMED_GONE = (
    "the lake holds this epoch as the job's named result rows per tree, which cannot be "
    "merged exactly here; read it from the lake (spark.read.format('elf'))"
)


def read_epoch(
    location: str, job: str, tree: int, trees: int, epoch: int, epoch_start: float
) -> dict[str, Any] | None:
    """Tree ``tree`` of ``trees``' result for ``epoch`` from the lake at ``location``
    (module contract); raises ``OSError`` / ``pyarrow.ArrowException`` / ``LakeError`` if
    the lake cannot be read."""
    from spark_sink.lake import Lake, epoch_meta
    from spark_sink.lake import read_epoch as read_lake_epoch

    lake = Lake(location)
    f = lake.epoch_file(job, epoch_start, tree, trees, epoch)
    if f is None:
        return None
    meta = epoch_meta(lake, f)  # footers only: a named epoch's rows are never read
    if meta is not None and meta.get("rows") == "named":
        table = None
    else:
        table, meta = read_lake_epoch(lake, f, meta)
    version = int(meta.get("version", f.version))
    out: dict[str, Any] = {
        "source": "lake",
        "term": int(meta.get("term", f.term)),
        **({"policy": str(meta["policy"])} if meta.get("policy") else {}),
        "version": version,
        "tentative": bool(meta.get("tentative", False)),
        "partial": bool(meta.get("partial", False)),
        "coverage": float(meta.get("coverage", 1.0)),
        "lacking": [str(x) for x in meta.get("lacking") or []],
        "updated": version > 1,
    }
    accuracy = meta.get("accuracy")
    if isinstance(accuracy, int | float) and not isinstance(accuracy, bool):
        out["accuracy"] = float(accuracy)
    late = meta.get("late_records")
    if type(late) is int and late >= 0:  # the first tree's files (spark_sink/lake.py)
        out["late"] = {"records": late}  # as known when the version was written
    kind = meta.get("rows")
    if table is not None and (kind == "pairs" or (kind is None and table.num_rows == 0)):
        keys = table.column("key_json").to_pylist()
        values = table.column("value_json").to_pylist()
        out["rows"] = [
            [orjson.loads(k), orjson.loads(v)] for k, v in zip(keys, values, strict=True)
        ]
    else:
        out["rows"] = None
        out["gone"] = NAMED_GONE
    return out


def epochs(location: str, job: str) -> list[int]:
    """The job's epochs with at least one tree's file in the lake, ascending."""
    from spark_sink.lake import Lake

    return sorted({f.epoch for f in Lake(location).files(job)})


class LakeHistory:
    """One job's reads of its history from the lake (module contract)."""

    def __init__(
        self,
        location: str,
        job: str,
        *,
        concurrency: int = 2,
        count: Callable[[str], None] | None = None,
    ) -> None:
        self.location = location
        self.job = job
        self._slots = asyncio.Semaphore(concurrency)
        self._count = count

    async def tree_epoch(
        self, tree: int, trees: int, epoch: int, epoch_start: float
    ) -> dict[str, Any] | None:
        """:func:`read_epoch` in a thread; None if absent or unreadable (logged, counted)."""
        async with self._slots:
            try:
                return await asyncio.to_thread(
                    read_epoch, self.location, self.job, tree, trees, epoch, epoch_start
                )
            except Exception as exc:  # the lake or a damaged file: say so, answer absent
                if self._count is not None:
                    self._count("lake_history_errors")
                log.warning(
                    "lake %s: cannot read job %s tree %d/%d epoch %d: %r",
                    self.location,
                    self.job,
                    tree,
                    trees,
                    epoch,
                    exc,
                )
                return None


def provenance(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``source`` and, if the lake answered any tree, ``lake`` (module contract) for a job's
    answer made of ``parts`` (one per tree, in tree order)."""
    answered = [(i, p) for i, p in enumerate(parts) if p.get("rows") is not None]
    lake = [(i, p) for i, p in answered if p.get("source") == "lake"]
    if not lake:
        return {"source": "master"}
    trees = [
        {k: p[k] for k in ("version", "tentative", "coverage", "lacking")}
        | {"term": int(p.get("term", 0)), "partial": bool(p.get("partial", False)), "tree": i}
        for i, p in lake
    ]
    return {
        "source": "lake" if len(lake) == len(answered) else "master+lake",
        "lake": {
            "term": max(t["term"] for t in trees),
            "version": max(t["version"] for t in trees),
            "tentative": any(t["tentative"] for t in trees),
            "partial": any(t["partial"] for t in trees),
            "coverage": min(t["coverage"] for t in trees),
            "lacking": sorted({x for t in trees for x in t["lacking"]}),
            "trees": trees,
        },
    }
