"""The dashboard's query box with sketch aggregates and CASE: a query submitted through
``POST /api/v1/dashboard/query`` to real in-process agents on loopback, its result read back
from the results API and from the dashboard's picture and checked against numpy / exact
counts of the lines fed (percentiles within KLL's rank bound, distinct counts within 3 HLL
standard errors, top-k users and CASE-built counts exactly); the picture names the estimate
columns and their error; and headless Chromium (when present) shows them marked and
formatted by kind.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from agent_helpers import running_agents, wait_for
from dashboard_harness import TOKEN, chromium_available, dashboard_page, submit_and_feed

from cbt.sketches import hll_rse, kll_rank_error

JOB = "page-latency"
QUERY = (
    "SELECT page, approx_percentile(request_time, ARRAY[0.5, 0.99]) AS latency, "
    "approx_distinct(user) AS users, approx_top_k(user, 3) AS regulars, count(*) AS n, "
    "sum(CASE WHEN request_time > 0.25 THEN 1 ELSE 0 END) AS slow "
    "FROM ingest WHERE starts_with(page, '/product/') GROUP BY page ORDER BY n DESC"
)
PAGES = ["/product/a", "/product/b", "/product/c", "/cart"]


def records(epoch: int, agent: int, n: int = 600) -> list[dict[str, Any]]:
    """One agent's seeded page requests in ``epoch`` (each page its own latency)."""
    rng = random.Random(f"{epoch}:{agent}")
    out = []
    for i in range(n):
        page = rng.choice(PAGES)
        base = 0.02 * (1 + PAGES.index(page))
        t = round(base * math.exp(rng.gauss(0, 0.6)) * (10 if rng.random() < 0.02 else 1), 3)
        user = f"u{rng.randrange(5000 if page == '/product/a' else 90)}"
        out.append({"ts": epoch + i / n, "page": page, "request_time": t, "user": user})
    return out


def check_rows(rows: list[dict[str, Any]], fed: list[dict[str, Any]]) -> None:
    """``rows`` against the fed records: numpy percentiles' ranks, exact distinct and counts."""
    eps, rse = kll_rank_error(200), hll_rse(12)
    product = [r for r in fed if r["page"].startswith("/product/")]
    # ORDER BY n DESC, ties by the GROUP BY value
    assert [r["page"] for r in rows] == sorted(
        {r["page"] for r in product}, key=lambda p: (-sum(r["page"] == p for r in product), p)
    )
    for row in rows:
        mine = [r for r in product if r["page"] == row["page"]]
        times = np.array([r["request_time"] for r in mine])
        assert row["n"] == len(mine)
        assert row["slow"] == int((times > 0.25).sum())
        for p, est in zip((0.5, 0.99), row["latency"], strict=True):
            assert np.mean(times < est) - eps <= p <= np.mean(times <= est) + eps, (p, est)
        exact = len({r["user"] for r in mine})
        assert abs(row["users"] - exact) <= 3 * rse * exact + 0.5, (row["users"], exact)
        # fewer than 768 distinct users per page: the frequent-items sketch is exact
        counts = Counter(r["user"] for r in mine)
        top = sorted(counts.items(), key=lambda uc: (-uc[1], uc[0]))[:3]
        assert row["regulars"] == [list(uc) for uc in top]


async def test_sketch_query_from_the_query_box_reads_back_exact_or_within_bounds(
    tmp_path: Path,
) -> None:
    async with running_agents(2) as agents:
        await submit_and_feed(
            agents,
            {"name": JOB, "query": QUERY, "epoch_seconds": 1},
            lambda _first, epoch, agent: records(epoch, agent),
            lambda fed, first: check_query(agents, fed, first, tmp_path),
        )


async def check_query(
    agents: list[Any], fed: dict[int, list[dict[str, Any]]], first: int, tmp_path: Path
) -> None:
    """The result through the results API, the picture and (if present) Chromium."""

    async def complete() -> dict[str, Any] | None:
        try:
            res = await agents[1].results(JOB, first + 1)
        except Exception:
            return None
        return res if res["complete"] and res["rows"] else None

    res = await wait_for(complete, 30, "the first full epoch's complete result")
    assert res["state"] == "final" and not res["tentative"]
    check_rows(res["rows"], fed[first + 1])

    # the dashboard's picture: the same newest result, with its estimate columns named
    picture = agents[1].dashboard

    async def shown() -> dict[str, Any] | None:
        snap = await picture.snapshot(max_age=0)
        r = (snap["jobs"].get(JOB) or {}).get("result") or {}
        return r if r.get("epoch") in fed and r.get("rows") else None

    shown_res = await wait_for(shown, 30, "a fed epoch's result in the picture")
    check_rows(shown_res["rows"], fed[shown_res["epoch"]])
    est = shown_res["estimates"]
    assert set(est) == {"latency", "users", "regulars"}
    assert est["latency"]["kind"] == "percentiles" and est["latency"]["ranks"] == [0.5, 0.99]
    assert "1.33 %" in est["latency"]["error"] and est["users"]["kind"] == "distinct"

    if chromium_available():
        await _check_in_chromium(agents[1].api.url, fed, tmp_path)


async def _check_in_chromium(
    api_url: str, fed: dict[int, list[dict[str, Any]]], tmp_path: Path
) -> None:
    """The page marks the estimate columns (≈, their error as tooltip) and formats them:
    ``p50 x · p99 y``, ``≈ n``; its cells are the results API's rows for the shown epoch."""
    from agent.client import ApiClient

    ready = f"""() => !!document.querySelector('.job[data-job="{JOB}"] .result table.rows')"""
    async with dashboard_page(api_url, tmp_path, ready, "result table") as page:
        card = page.locator(f'.job[data-job="{JOB}"]')
        titles = await card.locator(".result th").all_inner_texts()
        assert titles == ["page", "latency ≈", "users ≈", "regulars ≈", "n", "slow"]
        tip = await card.locator('.result th[data-estimate="percentiles"]').get_attribute("title")
        assert tip and "rank error" in tip
        # the heading and the cells in one evaluation: the page moves to newer epochs (and
        # versions) while the test reads, so a shown epoch is compared with the API's
        # answer for it, retried when the page moved on between the two reads
        shown = f"""() => {{
            const card = document.querySelector('.job[data-job="{JOB}"] .result');
            return {{head: card.querySelector('p').innerText,
                     cells: [...card.querySelectorAll('tbody tr')].map(
                         tr => [...tr.querySelectorAll('td')].map(td => td.innerText))}};
        }}"""
        for _ in range(20):
            picture = await page.evaluate(shown)
            epoch = int(picture["head"].split("epoch ")[1].split()[0])
            res = await asyncio.to_thread(ApiClient(api_url, TOKEN).results, JOB, epoch)
            want = [
                [
                    r["page"],
                    f"p50 {r['latency'][0]:.6g} · p99 {r['latency'][1]:.6g}",
                    f"≈ {round(r['users']):,}",
                    ", ".join(f"{u} ×{c}" for u, c in r["regulars"]),
                    str(r["n"]),
                    str(r["slow"]),
                ]
                for r in res["rows"]
            ]
            if picture["cells"] == want:
                break
            await asyncio.sleep(0.5)  # a newer version of the epoch: read both again
        assert picture["cells"] == want
