"""Spam campaigns: the users posting most "sales" tweets, with a filter that can zoom in at
runtime (the paper's OSN study).

Job class ``"spam-campaign"`` over tweet records (``apps.workload.TweetGenerator`` schema):

* worker: ``map_keys(record)`` → ``[user_id]`` when the tweet's ``text`` holds one of
  ``params.words`` (default :data:`SALES_WORDS`; text and words compared lowercase, word by
  word, a word being a maximal run of letters and digits) and the record passes the zoom
  filter: ``params.locations`` (a list of locations, ``null`` standing for "no location";
  absent: any), ``params.min_followers`` / ``params.max_followers`` (inclusive bounds on
  ``followers``, an int; absent: unbounded; a tweet without an int ``followers`` fails a
  bound). Aggregator ``count``: tweets per user per epoch.
* result rows (:meth:`SpamCampaign.result_rows`, the results API): ``{"user", "tweets"}`` for
  the users with at least ``params.min_count`` (default 1) such tweets, most first (ties:
  user id ascending), the first ``params.k`` (default 10).
* zooming in: every filter is read from ``params`` by ``setup()``, so a runtime change of the
  params (``POST /api/v1/jobs/{name}/change`` ``{"params": {...}}``: ``setup()`` re-runs on
  every agent between records) narrows or widens it with no restart; records already
  counted stay counted (epochs in progress mix both filters).
* master: keeps the rows of the last :data:`RETAINED_EPOCHS` epochs it completed;
  ``on_query`` ``{}`` → ``{"epoch", "rows"}`` (the newest epoch; ``{"epoch": e}`` for an
  older one: rows None when it is not kept), ``{"user": u}`` (optionally ``"epoch"``) →
  ``{"user", "tweets", "rank" (None: not in the top k), "epoch"}``.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from typing import Any

from agent.api import Job, register_job
from apps.params import MAX_K, int_param, optional_int_param, ranked, str_list_param
from cbt import Snapshot

RETAINED_EPOCHS = 16
SALES_WORDS = ("sale", "free", "discount", "deal", "off", "claim", "win", "coupon")
_WORD = re.compile(r"[^\W_]+")


def spam_spec(
    name: str = "spam-campaign",
    creator: str = "elf",
    *,
    epoch_seconds: float = 30.0,
    k: int = 10,
    **overrides: Any,
) -> dict[str, Any]:
    """A job-spec dict (batch epochs of ``epoch_seconds``, the top ``k`` users);
    ``overrides`` sets other spec fields; ``params`` given there are merged."""
    params = {"k": k, **overrides.pop("params", {})}
    return {
        "name": name,
        "creator": creator,
        "job_class": "spam-campaign",
        "aggregator": "count",
        "epoch_seconds": epoch_seconds,
        **overrides,
        "params": params,
    }


@register_job("spam-campaign")
class SpamCampaign(Job):
    """Top-k users by "sales" tweets, filtered by location and follower counts."""

    default_aggregator = "count"

    def setup(self) -> None:
        words = str_list_param(self.params, "words", SALES_WORDS) or ()
        self.words = frozenset(w.lower() for w in words)
        self.k = int_param(self.params, "k", 10, low=1, high=MAX_K)
        self.min_count = int_param(self.params, "min_count", 1, low=1)
        locations = str_list_param(self.params, "locations", None, allow_null=True)
        self.locations = None if locations is None else frozenset(locations)
        self.min_followers = optional_int_param(self.params, "min_followers")
        self.max_followers = optional_int_param(self.params, "max_followers")
        if self.spec.aggregator != "count":
            raise ValueError("aggregator: spam-campaign counts tweets (aggregator 'count')")
        if not hasattr(self, "recent"):
            self.recent: OrderedDict[int, list[dict[str, Any]]] = OrderedDict()

    # ---- worker side ----------------------------------------------------------------------
    def passes_filter(self, record: dict[str, Any]) -> bool:
        """Whether the tweet passes the location / follower zoom (not the word test)."""
        if self.locations is not None and record.get("location") not in self.locations:
            return False
        if self.min_followers is None and self.max_followers is None:
            return True
        followers = record.get("followers")
        if isinstance(followers, bool) or not isinstance(followers, int):
            return False
        if self.min_followers is not None and followers < self.min_followers:
            return False
        return self.max_followers is None or followers <= self.max_followers

    def map_keys(self, record: dict[str, Any]) -> list[str]:
        user, text = record.get("user_id"), record.get("text")
        if not (isinstance(user, str) and user and isinstance(text, str)):
            return []
        if not self.passes_filter(record):
            return []
        if self.words.isdisjoint(_WORD.findall(text.lower())):
            return []
        return [user]

    # ---- master side ----------------------------------------------------------------------
    def top_users(self, pairs: Any) -> list[dict[str, Any]]:
        """The result rows of ``(user, tweets)`` pairs (see module docstring)."""
        counts = ((str(u), int(c)) for u, c in pairs if int(c) >= self.min_count)
        return [{"user": u, "tweets": c} for u, c in ranked(counts, self.k)]

    def result_rows(self, pairs: list[Any]) -> list[dict[str, Any]]:
        return self.top_users(pairs)

    def on_epoch_result(self, epoch: int, snapshot: Snapshot) -> None:
        if self.spec.window_bounds(epoch) is None:
            return
        self.recent[epoch] = self.top_users(snapshot)
        while len(self.recent) > RETAINED_EPOCHS:
            self.recent.popitem(last=False)

    def on_query(self, message: dict[str, Any]) -> dict[str, Any]:
        epoch = message.get("epoch")
        if epoch is None:
            epoch = next(reversed(self.recent), None)
        elif isinstance(epoch, bool) or not isinstance(epoch, int):
            return {"error": "'epoch' must be an integer", "status": 400}
        rows = self.recent.get(epoch) if epoch is not None else None
        user = message.get("user")
        if user is None:
            return {"epoch": epoch, "rows": rows}
        if not isinstance(user, str) or not user:
            return {"error": "'user' must be a non-empty string", "status": 400}
        for rank, row in enumerate(rows or (), 1):
            if row["user"] == user:
                return {"user": user, "tweets": row["tweets"], "rank": rank, "epoch": epoch}
        return {"user": user, "tweets": None, "rank": None, "epoch": epoch}
