"""Micro-promotion: the top-k products by clicks in one catalogue directory over a sliding
window, pushed to every agent so webservers can flag discounted products locally.

Job class ``"micro-promotion"`` over clickstream records (``apps.workload`` schema):

* worker: ``map_keys(record)`` → ``[product_id]`` when ``record["directory"]`` equals
  ``params.directory`` (default ``"Video Games"``) and ``record["action"]`` is in
  ``params.actions`` (default ``["click"]``); nothing otherwise (also for a record without a
  string ``product_id``). Aggregator ``count``.
* windows (the paper: 300 s every 30 s — :func:`promotion_spec`), two execution models:

  - ``mode`` batch (the default, *synchronous*): workers send each epoch's clicks and the
    master empties them every epoch; the master itself windows the merged epochs
    (``params.window_epochs``, default 10, every ``params.slide_epochs``, default 1; windows
    aligned to epoch 0 like the workers'). Its window starts afresh at the first epoch it
    masters (a new master, a gap) and reports the epochs it really covers.
  - ``mode`` window (asynchronous): every worker windows (``window_size``/``window_slide``)
    and the master ranks the merged windows.

* master: for every epoch that ends a window, ranks the products (clicks descending, then
  product id ascending), keeps the first ``params.k`` (default 10) and multicasts
  ``{"kind": "promote", "epoch": e, "window": [first, last], "top": [[product, clicks], ...]}``
  down the job's tree. ``spec.trees`` must be 1 (the master ranks every key). A late
  contribution the runtime folds into an epoch after completing it is in the results API, not
  in the promotion already sent.
* every agent of the job's tree (each agent with one of its inputs, the master included) keeps
  the newest promotion it received (an older epoch arriving late is ignored) and answers, with
  no network hop,
  ``GET /api/v1/jobs/{name}/local?product=P`` (:meth:`MicroPromotion.local_query`):
  ``{"product", "promoted", "rank" (1-based or None), "clicks", "epoch", "window"}``; without
  ``product`` it returns ``{"epoch", "window", "top"}``. Before the first promotion ``epoch``
  is None and nothing is promoted.
* ``on_query`` (cross-job ``route``, e.g. from sale-prediction) answers the same from the
  master's own state.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from agent.api import EpochWindows, Job, register_job
from apps.params import MAX_K, MAX_WINDOW, int_param, ranked, str_list_param, str_param
from cbt import Snapshot

if TYPE_CHECKING:  # pyarrow loads with the first columnar batch (map_batch), not the class
    import pyarrow as pa

log = logging.getLogger(__name__)

PROMOTE = "promote"
DEFAULT_DIRECTORY = "Video Games"


def promotion_spec(
    name: str = "micro-promotion",
    creator: str = "elf",
    *,
    epoch_seconds: float = 30.0,
    window_epochs: int = 10,
    slide_epochs: int = 1,
    k: int = 10,
    directory: str = DEFAULT_DIRECTORY,
    synchronous: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
    """A job-spec dict with the paper's defaults (a 300 s window every 30 s, top 10 "Video
    Games" products, synchronous: batch epochs windowed at the master; ``synchronous=False``:
    workers window); ``overrides`` sets other spec fields (``inputs``, ``start_epoch``...);
    ``params`` given there are merged over the ones built here."""
    params: dict[str, Any] = {"k": k, "directory": directory}
    spec: dict[str, Any] = {
        "name": name,
        "creator": creator,
        "job_class": "micro-promotion",
        "aggregator": "count",
        "epoch_seconds": epoch_seconds,
    }
    if synchronous:
        spec["mode"] = "batch"
        params.update(window_epochs=window_epochs, slide_epochs=slide_epochs)
    else:
        spec.update(mode="window", window_size=window_epochs, window_slide=slide_epochs)
    params.update(overrides.pop("params", {}))
    return {**spec, **overrides, "params": params}


@register_job("micro-promotion")
class MicroPromotion(Job):
    """Top-k clicked products of a directory per window, multicast to every agent."""

    default_aggregator = "count"

    def setup(self) -> None:
        self.directory = str_param(self.params, "directory", DEFAULT_DIRECTORY)
        self.actions = frozenset(str_list_param(self.params, "actions", ["click"]) or ())
        self.k = int_param(self.params, "k", 10, low=1, high=MAX_K)
        if self.spec.trees != 1:
            raise ValueError("trees: micro-promotion needs 1 tree (its master ranks every key)")
        if self.spec.aggregator != "count":
            raise ValueError("aggregator: micro-promotion counts clicks (aggregator 'count')")
        if self.spec.mode == "batch":
            size = int_param(self.params, "window_epochs", 10, low=1, high=MAX_WINDOW)
            slide = int_param(self.params, "slide_epochs", 1, low=1, high=MAX_WINDOW)
            if slide > size:
                raise ValueError(f"params.slide_epochs: must be <= window_epochs={size}")
            window: tuple[int, int] | None = (size, slide)
        elif self.spec.mode == "window":
            window = None
        else:
            raise ValueError("mode: micro-promotion runs in batch or window mode")
        if not hasattr(self, "master_window") or self.master_window != window:
            self.master_window = window
            self._windows: EpochWindows | None = None  # the master's, built at its first epoch
            self._first_epoch = self._last_pushed = -1
        if not hasattr(self, "epoch"):  # a runtime params change keeps the promoted set
            self.epoch: int | None = None
            self.window: list[int] | None = None
            self.top: list[list[Any]] = []
            self._rank: dict[str, int] = {}
            self.multicast_failures = 0

    # ---- worker side ----------------------------------------------------------------------
    def map_keys(self, record: dict[str, Any]) -> list[str]:
        product = record.get("product_id")
        if (
            record.get("directory") == self.directory
            and record.get("action") in self.actions
            and isinstance(product, str)
            and product
        ):
            return [product]
        return []

    batch_fields = frozenset({"directory", "action", "product_id"})

    def map_batch(self, table: pa.Table) -> pa.Table:
        """``map_keys`` on a whole table: the product ids of the rows in the directory with
        one of the actions (a column of another type than string matches no row)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        names = ("directory", "action", "product_id")
        cols = [table.column(c) if c in table.column_names else None for c in names]
        if any(c is None or not pa.types.is_string(c.type) for c in cols):
            return pa.table({"key": pa.array([], pa.string())})
        directory, action, product = cols
        mask = pc.and_(
            pc.equal(directory, self.directory),
            pc.is_in(action, value_set=pa.array(sorted(self.actions), pa.string())),
        )
        mask = pc.and_(mask, pc.greater(pc.utf8_length(product), 0))
        return pa.table({"key": product.filter(pc.fill_null(mask, False))})

    # ---- master side ----------------------------------------------------------------------
    def window_result(self, epoch: int, snapshot: Snapshot) -> tuple[list[int], Snapshot] | None:
        """Master: the window ending at ``epoch`` and its clicks (None: no window ends
        there). In batch mode this pushes ``epoch``'s result into the master's window, so
        call it once per epoch, in order."""
        if self.master_window is None:
            bounds = self.spec.window_bounds(epoch)
            return None if bounds is None else (list(bounds), snapshot)
        size, slide = self.master_window
        windows, last = self._windows, self._last_pushed
        if windows is not None and epoch <= last:
            return None  # an epoch already windowed (a repeated result)
        if windows is None or epoch != last + 1:
            windows = self._windows = EpochWindows(size, slide, self.make_aggregator())
            self._first_epoch = epoch  # a new master or a gap: the window starts again here
        window = windows.push(epoch, snapshot)
        self._last_pushed = epoch
        if window is None:
            return None
        return [max(epoch - size + 1, self._first_epoch), epoch], window

    def promotion(self, epoch: int, snapshot: Snapshot) -> dict[str, Any] | None:
        """The ``promote`` message for ``epoch``'s result (None: no window ends there)."""
        found = self.window_result(epoch, snapshot)
        if found is None:
            return None
        bounds, window = found
        top = ranked(((str(p), int(c)) for p, c in window), self.k)
        return {
            "kind": PROMOTE,
            "epoch": epoch,
            "window": list(bounds),
            "top": [[p, c] for p, c in top],
        }

    async def on_epoch_result(self, epoch: int, snapshot: Snapshot) -> None:
        message = self.promotion(epoch, snapshot)
        if message is None:
            return
        self.apply(message)
        if self.context is not None and self.context.is_master:
            try:
                await self.context.multicast(message)
            except Exception as exc:  # agents keep the previous promotion; the next one heals
                self.multicast_failures += 1
                log.warning(
                    "%s: promote multicast for epoch %d failed: %r", self.spec.name, epoch, exc
                )

    def on_query(self, message: dict[str, Any]) -> dict[str, Any]:
        return self.answer(message)

    # ---- every agent ----------------------------------------------------------------------
    def on_multicast(self, message: dict[str, Any]) -> None:
        if isinstance(message, dict) and message.get("kind") == PROMOTE:
            self.apply(message)

    def apply(self, message: dict[str, Any]) -> bool:
        """Adopt a ``promote`` message unless it is malformed or older than the current one."""
        epoch, top, window = message.get("epoch"), message.get("top"), message.get("window")
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not isinstance(top, list):
            return False
        if self.epoch is not None and epoch < self.epoch:
            return False
        rows = [r for r in top if isinstance(r, list | tuple) and len(r) == 2]
        rows = [[str(p), c] for p, c in rows]
        self.epoch, self.top = epoch, rows
        self.window = list(window) if isinstance(window, list | tuple) else None
        self._rank = {p: i for i, (p, _) in enumerate(rows, 1)}
        return True

    def answer(self, params: dict[str, Any]) -> dict[str, Any]:
        """Whether ``params["product"]`` is promoted now (or the whole list without one)."""
        product = params.get("product")
        if product is None:
            return {"epoch": self.epoch, "window": self.window, "top": self.top}
        if not isinstance(product, str) or not product:
            return {"error": "'product' must be a non-empty string", "status": 400}
        rank = self._rank.get(product)
        return {
            "product": product,
            "promoted": rank is not None,
            "rank": rank,
            "clicks": None if rank is None else self.top[rank - 1][1],
            "epoch": self.epoch,
            "window": self.window,
        }

    def local_query(self, params: dict[str, str]) -> dict[str, Any]:
        return self.answer(params)
