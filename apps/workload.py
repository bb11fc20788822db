"""Synthetic workloads: e-commerce clickstreams and tweet streams, seeded and deterministic.

Contract:

* :func:`make_catalogue` builds a product catalogue (``product_id``, ``name``, ``directory``
  such as "Video Games", ``brand``, ``price``); :func:`write_catalogue` writes it as JSON lines
  (``.jsonl``), a JSON array (``.json``) or CSV (``.csv``) for jobs to join against.
* :class:`ClickstreamGenerator` and :class:`TweetGenerator` are iterables of event dicts
  (each with a float ``ts``). The same arguments (``seed``, ``start``, sizes) give the same
  events, always. Popularity is Zipf-skewed: the product / user / hashtag of rank ``r`` (1 =
  most popular) is drawn with probability proportional to ``r ** -s``; product ``P000001`` is
  rank 1, ``P000002`` rank 2, and so on (same for users ``u000001`` ...). Event times follow a
  Poisson process of ``rate`` events per second from ``start``.
* Clicks: ``user_id``, ``session_id`` (a user's session ends after 30 minutes of event-time
  inactivity or at random), ``product_id``, ``directory``, ``action`` (view, click, like,
  add_to_cart, buy; carts and buys favour products viewed in the session), ``price``,
  ``quantity`` (buys), ``source_ip`` and ``user_agent`` (fixed per user), ``referer``.
  Opt-in (the default stream is unchanged, draw for draw): ``bundles`` plants "bought
  together" groups (:func:`plant_bundles`): a like or buy of a member makes the session, with
  probability ``bundle_affinity``, like or buy (the same verb) the group's other members as
  the user's next events in that session (whatever action was drawn for them);
  ``request_times=True`` adds ``request_time``, the seconds the product page took to serve
  (nginx's ``$request_time``, millisecond resolution: a per-page log-normal, the median fixed
  per product by :func:`page_latency_median`, and a 2 % tail 4–20× slower).
  Both decide from their own seeded random streams (a planted event then changes what the
  session later picks from its views, as any event would).
* Tweets: ``tweet_id``, ``user_id``, ``user``, ``followers`` (heavy-tailed, fixed per user),
  ``text``, ``hashtags``, ``location``, ``lang``, ``retweet``, ``campaign`` (None, or the
  name of a "sales"/spam campaign: bursts of near-identical tweets with a link from bot
  accounts with few followers).
* Renderers: :func:`json_line` (any event), :func:`access_line` (a click as an nginx combined
  access-log line, ``GET /product?id=..&dir=..&action=..&user=..&session=..`` with the
  directory as a URL slug (:func:`directory_slug`: ``video-games``), parsed back by
  :class:`agent.ingest.formats.AccessLogParser`).
* Writers: :func:`paced` (sleeps so events leave at their event time, optionally sped up),
  :class:`RotatingWriter` (a file with optional size-based rotation, like logrotate's rename),
  :func:`post_lines` (batches to an agent's ingest endpoint through
  :class:`agent.client.ApiClient`).
"""

from __future__ import annotations

import csv
import itertools
import math
import os
import random
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate
from pathlib import Path
from typing import Any, TextIO

import orjson

DIRECTORIES = (
    "Video Games",
    "Books",
    "Electronics",
    "Home & Kitchen",
    "Toys",
    "Sports & Outdoors",
    "Music",
    "Movies & TV",
    "Clothing",
    "Beauty",
)
_PRICE_MEDIAN = {
    "Video Games": 39.0,
    "Books": 14.0,
    "Electronics": 120.0,
    "Home & Kitchen": 35.0,
    "Toys": 22.0,
    "Sports & Outdoors": 45.0,
    "Music": 12.0,
    "Movies & TV": 15.0,
    "Clothing": 30.0,
    "Beauty": 18.0,
}
_BRANDS = ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Stark", "Wayne")
_ADJ = ("Super", "Ultra", "Classic", "Smart", "Deluxe", "Mini", "Pro", "Eco", "Retro", "Turbo")
_NOUN = ("Widget", "Gadget", "Console", "Novel", "Speaker", "Blender", "Puzzle", "Racket")
ACTIONS = ("view", "click", "like", "add_to_cart", "buy")
_ACTION_WEIGHTS = (0.60, 0.20, 0.07, 0.09, 0.04)
_USER_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/120.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_1) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/17.1 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
    "Mozilla/5.0 (Linux; Android 14) AppleWebKit/537.36 Chrome/120.0 Mobile Safari/537.36",
)
_REFERERS = ("-", "https://www.google.com/", "https://shop.example/", "https://t.co/x")
SESSION_GAP = 1800.0  # seconds of event-time inactivity that end a session
SLOW_SHARE = 0.02  # page requests in the slow tail (request_times=True)
_LOCATIONS = (
    "New York",
    "London",
    "Paris",
    "Tokyo",
    "Berlin",
    "São Paulo",
    "Mumbai",
    "Sydney",
    "Toronto",
    "Lagos",
    None,
)
_WORD_TEXT = (
    "the a great new love today just got this my best day game watch play time going really "
    "think good people check out world now live night happy see need want look stream music "
    "win vote team match news update launch deal free price shop buy review unboxing"
)
_TAG_TEXT = (
    "gaming music news tech sports love photo travel food fashion nba worldcup ai python "
    "crypto movies tv books art fitness"
)
_WORDS = tuple(_WORD_TEXT.split())
_TAGS = tuple(_TAG_TEXT.split())
_CAMPAIGNS = (
    ("mega-sale", "MEGA SALE 90% off everything today only", "megasale"),
    ("free-phone", "You won a free phone, claim now", "freephone"),
    ("crypto-pump", "This coin will 100x, get in early", "moonshot"),
)


class ZipfSampler:
    """Ranks 1..n drawn with probability proportional to ``rank ** -s`` (inverse CDF)."""

    def __init__(self, n: int, s: float, rng: random.Random) -> None:
        if n < 1 or s < 0:
            raise ValueError("need n >= 1 and s >= 0")
        self.n, self.s, self.rng = n, s, rng
        self._cum = list(accumulate(r**-s for r in range(1, n + 1)))
        self._total = self._cum[-1]

    def probability(self, rank: int) -> float:
        """The probability of ``rank`` (1-based)."""
        return rank**-self.s / self._total

    def sample(self) -> int:
        """One rank (1-based)."""
        return bisect_left(self._cum, self.rng.random() * self._total) + 1


def make_catalogue(n_products: int = 1000, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n_products`` products (rank order = id order), deterministic for ``seed``."""
    rng = random.Random(f"catalogue:{seed}")
    out = []
    for i in range(1, n_products + 1):
        directory = DIRECTORIES[rng.randrange(len(DIRECTORIES))]
        price = round(_PRICE_MEDIAN[directory] * math.exp(rng.gauss(0.0, 0.6)), 2)
        out.append(
            {
                "product_id": f"P{i:06d}",
                "name": f"{rng.choice(_ADJ)} {rng.choice(_NOUN)} {i}",
                "directory": directory,
                "brand": rng.choice(_BRANDS),
                "price": max(price, 0.99),
            }
        )
    return out


def plant_bundles(
    catalogue: list[dict[str, Any]],
    n: int = 8,
    *,
    seed: int = 0,
    sizes: tuple[int, int] = (2, 5),
    ranks: tuple[int, int] = (3, 60),
) -> list[list[str]]:
    """``n`` disjoint "bought together" groups of ``sizes[0]..sizes[1]`` products of one
    directory each, drawn among the catalogue's popularity ranks ``ranks[0]..ranks[1]`` (so
    neither the few products everyone clicks nor ones nobody sees); deterministic for
    ``seed``. Fewer than ``n`` when the ranks run out."""
    rng = random.Random(f"bundles:{seed}")
    pool: dict[str, list[str]] = {}
    for p in catalogue[ranks[0] - 1 : ranks[1]]:
        pool.setdefault(p["directory"], []).append(p["product_id"])
    out: list[list[str]] = []
    for _ in range(n):
        size = rng.randint(*sizes)
        fits = sorted(d for d, ps in pool.items() if len(ps) >= size)
        if not fits:
            break
        members = pool[rng.choice(fits)]
        rng.shuffle(members)
        out.append(sorted(members[:size]))
        del members[:size]
    return out


def page_latency_median(product_id: str) -> float:
    """The median seconds product ``product_id``'s page takes (10–150 ms, fixed per product:
    some pages are heavier than others)."""
    return random.Random(f"page:{product_id}").uniform(0.010, 0.150)


def write_catalogue(catalogue: list[dict[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write the catalogue; the suffix picks the format: ``.csv``, ``.json`` (array) or
    anything else (JSON lines)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(catalogue[0]) if catalogue else ["product_id"])
            w.writeheader()
            w.writerows(catalogue)
    elif path.suffix == ".json":
        path.write_bytes(orjson.dumps(catalogue))
    else:
        path.write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in catalogue))
    return path


class _Base:
    def __init__(self, seed: int, rate: float, start: float | None, limit: int | None) -> None:
        if not rate > 0:
            raise ValueError("rate must be > 0 events per second")
        self.seed = seed
        self.rate = float(rate)
        self.start = time.time() if start is None else float(start)
        self.limit = limit

    def _clock(self, rng: random.Random) -> Iterator[float]:
        ts = self.start
        while True:
            yield ts
            ts += rng.expovariate(self.rate)

    def take(self, n: int) -> list[dict[str, Any]]:
        """The first ``n`` events."""
        return list(itertools.islice(iter(self), n))  # type: ignore[call-overload]


class ClickstreamGenerator(_Base):
    """E-commerce click events (see module docstring); iterate for events (``limit`` of them,
    or for ever when None)."""

    def __init__(
        self,
        *,
        seed: int = 0,
        users: int = 10_000,
        products: int = 1000,
        rate: float = 1000.0,
        start: float | None = None,
        limit: int | None = None,
        product_skew: float = 1.1,
        user_skew: float = 0.8,
        catalogue: list[dict[str, Any]] | None = None,
        bundles: list[list[str]] | None = None,
        bundle_affinity: float = 0.8,
        request_times: bool = False,
    ) -> None:
        super().__init__(seed, rate, start, limit)
        self.catalogue = catalogue if catalogue is not None else make_catalogue(products, seed=seed)
        self.users = users
        self.product_skew = product_skew
        self.user_skew = user_skew
        if not 0 <= bundle_affinity <= 1:
            raise ValueError("bundle_affinity must be in [0, 1]")
        ranks = {p["product_id"]: r for r, p in enumerate(self.catalogue, 1)}
        self.bundles = [list(g) for g in bundles or ()]
        self.bundle_affinity = bundle_affinity
        self.request_times = request_times
        # product rank → the ranks of its group's other members
        self._companions: dict[int, list[int]] = {}
        for group in self.bundles:
            members = [ranks[p] for p in group]  # KeyError: a product not in the catalogue
            for r in members:
                self._companions[r] = [m for m in members if m != r]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        rng = random.Random(f"clicks:{self.seed}")
        products = ZipfSampler(len(self.catalogue), self.product_skew, rng)
        users = ZipfSampler(self.users, self.user_skew, rng)
        sessions: dict[int, tuple[int, float, list[int]]] = {}  # user → (n, last ts, viewed)
        n_sessions = 0
        cat = self.catalogue
        # the opt-in features' own streams: without them the main stream is unchanged
        planted = random.Random(f"planted:{self.seed}") if self._companions else None
        pending: dict[int, tuple[int, str, list[int]]] = {}  # user → (session, verb, owed)
        slow = random.Random(f"latency:{self.seed}") if self.request_times else None
        medians: dict[str, float] = {}
        for i, ts in enumerate(self._clock(rng)):
            if self.limit is not None and i >= self.limit:
                return
            u = users.sample()
            sess = sessions.get(u)
            if sess is None or ts - sess[1] > SESSION_GAP or rng.random() < 0.02:
                n_sessions += 1
                sess = (n_sessions, ts, [])
            sid, _, viewed = sess
            sessions[u] = (sid, ts, viewed)
            action = rng.choices(ACTIONS, _ACTION_WEIGHTS)[0]
            if action in ("add_to_cart", "buy", "like") and viewed and rng.random() < 0.7:
                rank = viewed[rng.randrange(len(viewed))]
            else:
                rank = products.sample()
            if planted is not None:
                action, rank = self._plant(planted, pending, u, sid, action, rank)
            if action == "view" and len(viewed) < 20:
                viewed.append(rank)
            p = cat[rank - 1]
            event: dict[str, Any] = {
                "ts": round(ts, 6),
                "user_id": f"u{u:06d}",
                "session_id": f"s{self.seed}-{sid}",
                "product_id": p["product_id"],
                "directory": p["directory"],
                "action": action,
                "price": p["price"],
                "source_ip": _user_ip(u),
                "user_agent": _USER_AGENTS[u % len(_USER_AGENTS)],
                "referer": _REFERERS[rng.randrange(len(_REFERERS))],
            }
            if action == "buy":
                event["quantity"] = 1 + int(rng.expovariate(1.5))
            if slow is not None:
                pid = p["product_id"]
                median = medians.get(pid) or medians.setdefault(pid, page_latency_median(pid))
                t = median * math.exp(slow.gauss(0.0, 0.5))
                if slow.random() < SLOW_SHARE:
                    t *= slow.uniform(4.0, 20.0)
                event["request_time"] = round(max(t, 0.001), 3)
            yield event

    def _plant(
        self,
        planted: random.Random,
        pending: dict[int, tuple[int, str, list[int]]],
        user: int,
        session: int,
        action: str,
        rank: int,
    ) -> tuple[str, int]:
        """The action and product of ``user``'s event: the next companion its session owes
        a planted group (liked or bought as the member that started it was), else as drawn
        (a like or buy of a member may start owing the group's other members)."""
        sid, verb, owed = pending.get(user, (session, action, []))
        if sid != session:
            owed = []  # a new session: the old one's companions are forgotten
        if owed:
            action, rank = verb, owed.pop()
        elif (
            action in ("like", "buy")
            and rank in self._companions
            and planted.random() < self.bundle_affinity
        ):
            owed, verb = self._companions[rank][:], action
            planted.shuffle(owed)
        pending[user] = (session, verb, owed)
        return action, rank


class TweetGenerator(_Base):
    """Tweets (see module docstring); ``campaign_share`` of them belong to spam campaigns."""

    def __init__(
        self,
        *,
        seed: int = 0,
        users: int = 10_000,
        rate: float = 1000.0,
        start: float | None = None,
        limit: int | None = None,
        user_skew: float = 1.0,
        hashtag_skew: float = 1.2,
        campaign_share: float = 0.05,
        bots: int = 50,
    ) -> None:
        super().__init__(seed, rate, start, limit)
        if not 0 <= campaign_share <= 1:
            raise ValueError("campaign_share must be in [0, 1]")
        self.users = users
        self.user_skew = user_skew
        self.hashtag_skew = hashtag_skew
        self.campaign_share = campaign_share
        self.bots = max(1, bots)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        rng = random.Random(f"tweets:{self.seed}")
        users = ZipfSampler(self.users, self.user_skew, rng)
        tags = ZipfSampler(len(_TAGS), self.hashtag_skew, rng)
        for i, ts in enumerate(self._clock(rng)):
            if self.limit is not None and i >= self.limit:
                return
            if rng.random() < self.campaign_share:
                name, text, tag = _CAMPAIGNS[int(ts // 600) % len(_CAMPAIGNS)]  # 10-min bursts
                bot = rng.randrange(self.bots)
                uid = f"bot{bot:04d}"
                event = {
                    "user_id": uid,
                    "user": f"deals_{bot}",
                    "followers": _followers(f"{self.seed}:{uid}", bot=True),
                    "text": f"{text}! https://sale.example/{tag}/{rng.randrange(1000)} #{tag}",
                    "hashtags": [tag],
                    "location": None,
                    "lang": "en",
                    "retweet": False,
                    "campaign": name,
                }
            else:
                u = users.sample()
                uid = f"u{u:06d}"
                hashtags = sorted({_TAGS[tags.sample() - 1] for _ in range(rng.randrange(0, 3))})
                words = [rng.choice(_WORDS) for _ in range(rng.randrange(4, 16))]
                event = {
                    "user_id": uid,
                    "user": f"user{u}",
                    "followers": _followers(f"{self.seed}:{uid}"),
                    "text": " ".join(words + [f"#{h}" for h in hashtags]),
                    "hashtags": hashtags,
                    "location": _LOCATIONS[u % len(_LOCATIONS)],
                    "lang": "en",
                    "retweet": rng.random() < 0.2,
                    "campaign": None,
                }
            yield {"ts": round(ts, 6), "tweet_id": f"{self.seed}-{i}", **event}


def _user_ip(u: int) -> str:
    return f"10.{(u >> 16) & 255}.{(u >> 8) & 255}.{u & 255}"


def _followers(key: str, *, bot: bool = False) -> int:
    r = random.Random(key)
    if bot:
        return r.randrange(0, 30)
    return int(r.paretovariate(1.2) * 20)


# ---- renderers ---------------------------------------------------------------------------------


def json_line(event: dict[str, Any]) -> str:
    """One JSON line (no newline)."""
    return orjson.dumps(event).decode()


_MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


_clf_last: list[Any] = [None, ""]  # the last second rendered (events come in time order)


def clf_time(ts: float) -> str:
    """``21/Nov/2026:20:11:10 +0000`` (UTC) for epoch seconds ``ts``."""
    sec = int(ts // 1)
    if _clf_last[0] == sec:
        return _clf_last[1]
    t = time.gmtime(sec)
    text = (
        f"{t.tm_mday:02d}/{_MONTH_NAMES[t.tm_mon - 1]}/{t.tm_year:04d}:"
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} +0000"
    )
    _clf_last[:] = [sec, text]
    return text


def directory_slug(directory: str) -> str:
    """A directory as web shops put it in URLs: ``"Home & Kitchen"`` → ``"home-and-kitchen"``."""
    words = directory.lower().replace("&", " and ").split()
    return "-".join("".join(c for c in w if c.isalnum()) for w in words)


def access_line(click: dict[str, Any]) -> str:
    """A click as an nginx combined access-log line (second resolution)."""
    target = (
        f"/product?id={click['product_id']}&dir={directory_slug(click['directory'])}"
        f"&action={click['action']}&user={click['user_id']}&session={click['session_id']}"
    )
    digits = "".join(c for c in str(click["product_id"]) if c.isdigit()) or "0"
    size = 512 + int(digits) % 4096 if click["action"] == "view" else 128
    return (
        f'{click["source_ip"]} - - [{clf_time(click["ts"])}] "GET {target} HTTP/1.1" 200 {size} '
        f'"{click.get("referer") or "-"}" "{click.get("user_agent") or "-"}"'
    )


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {"json": json_line, "nginx": access_line}


# ---- writers -----------------------------------------------------------------------------------


def paced(
    events: Iterable[dict[str, Any]],
    *,
    speedup: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[dict[str, Any]]:
    """Yield each event no earlier than its event time relative to the first one (divided by
    ``speedup``): real-time replay."""
    if not speedup > 0:
        raise ValueError("speedup must be > 0")
    t0 = ts0 = None
    for event in events:
        if t0 is None:
            t0, ts0 = clock(), event["ts"]
        due = t0 + (event["ts"] - ts0) / speedup  # type: ignore[operator]
        wait = due - clock()
        if wait > 0:
            sleep(wait)
        yield event


class RotatingWriter:
    """Appends lines to ``path``; with ``rotate_bytes`` a file that would grow past it is
    renamed to ``path.1`` (older ones shift to ``.2`` .. ``.{backups}``) and a new one
    started — what logrotate's default (rename) mode does, so tails follow it."""

    def __init__(
        self, path: str | os.PathLike[str], *, rotate_bytes: int | None = None, backups: int = 3
    ) -> None:
        self.path = Path(path)
        self.rotate_bytes = rotate_bytes
        self.backups = max(1, backups)
        self.rotations = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f: TextIO = open(self.path, "a")  # noqa: SIM115 - closed by close()
        self._size = self.path.stat().st_size

    def write(self, line: str) -> None:
        data = line + "\n"
        if self.rotate_bytes and self._size and self._size + len(data) > self.rotate_bytes:
            self._rotate()
        self._f.write(data)
        self._size += len(data) if data.isascii() else len(data.encode())

    def _rotate(self) -> None:
        self._f.close()
        for i in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                os.replace(older, self.path.with_name(f"{self.path.name}.{i + 1}"))
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        self._f = open(self.path, "a")  # noqa: SIM115
        self._size = 0
        self.rotations += 1

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> RotatingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def post_lines(
    lines: Iterable[str], client: Any, input_name: str, *, batch: int = 1000
) -> dict[str, int]:
    """POST ``lines`` in batches to ``client.ingest(input_name, lines)`` (an
    :class:`agent.client.ApiClient`); returns accepted/rejected totals. A batch the agent
    refuses as ``queue_full`` is retried (all or nothing, so no duplicates)."""
    totals = {"accepted": 0, "rejected": 0, "batches": 0, "retries": 0}

    def send(chunk: list[str]) -> None:
        delay = 0.05
        while True:
            reply = client.ingest(input_name, chunk)
            if not reply.get("queue_full"):
                break
            totals["retries"] += 1
            time.sleep(delay)
            delay = min(2.0, delay * 2)
        totals["accepted"] += int(reply.get("accepted", 0))
        totals["rejected"] += int(reply.get("rejected", 0))
        totals["batches"] += 1

    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= batch:
            send(chunk)
            chunk = []
    if chunk:
        send(chunk)
    return totals
