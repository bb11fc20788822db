"""What the dashboard's query-box tests share: a query submitted through
``POST /api/v1/dashboard/query`` and fed every epoch while a check runs
(:func:`submit_and_feed`), and the dashboard page in headless Chromium, once its job's
picture is there (:func:`dashboard_page`, when :func:`chromium_available`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from agent_helpers import SECRET, wait_for

from agent.config import derive_api_token

TOKEN = derive_api_token(SECRET.encode())
CHROMIUM = "/usr/bin/chromium"

Fed = dict[int, list[dict[str, Any]]]


def chromium_available() -> bool:
    """Chromium and playwright are both here (the page checks are skipped otherwise)."""
    if not os.access(CHROMIUM, os.X_OK):
        return False
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return False
    return True


async def submit_and_feed(
    agents: list[Any],
    body: dict[str, Any],
    records: Callable[[int, int, int], list[dict[str, Any]]],
    check: Callable[[Fed, int], Awaitable[None]],
) -> None:
    """Submit ``body`` through the query box, wait until every agent runs the job, then feed
    every agent ``records(first, epoch, agent index)`` each epoch, about a second ahead of the
    clock, while ``check(fed, first)`` runs (``fed``: epoch -> every record ingested)."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as http:
        url = agents[0].api.url + "/api/v1/dashboard/query"
        async with http.post(url, data=orjson.dumps(body)) as resp:
            assert resp.status == 201, await resp.text()
    name = body["name"]
    await wait_for(
        lambda: all(a.table.get(name) is not None for a in agents), 20, "the job everywhere"
    )
    first = math.floor(time.time()) + 2
    fed: Fed = {}
    stop = asyncio.Event()

    async def feed() -> None:
        e = first
        while not stop.is_set():
            fed[e] = []
            for i, a in enumerate(agents):
                recs = records(first, e, i)
                fed[e] += recs
                await a.ingest("ingest", [json.dumps(r) for r in recs])
            e += 1
            with contextlib.suppress(TimeoutError):  # the pace of the feed
                await asyncio.wait_for(stop.wait(), max(0.0, e - 1.5 - time.time()))

    feeder = asyncio.ensure_future(feed())
    try:
        await check(fed, first)
    finally:
        stop.set()
        await feeder


@contextlib.asynccontextmanager
async def dashboard_page(api_url: str, tmp_path: Path, ready: str, what: str) -> AsyncIterator[Any]:
    """The dashboard in headless Chromium, once the JS expression ``ready`` is true (polled;
    ``what`` names it in the failure)."""
    from playwright.async_api import async_playwright

    from agent.client import ApiClient

    async with async_playwright() as p:
        browser = await p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
        )
        try:
            page = await browser.new_page()
            await page.goto(ApiClient(api_url, TOKEN).dashboard_url(with_token=True))
            deadline = time.monotonic() + 30
            while not await page.evaluate(ready):
                assert time.monotonic() < deadline, f"no {what} on the page"
                await asyncio.sleep(0.1)  # polling the page, as test_dashboard_browser does
            yield page
        finally:
            await browser.close()
