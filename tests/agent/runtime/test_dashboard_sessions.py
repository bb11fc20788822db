"""The dashboard with a ``WINDOW SESSION`` query: submitted through the query box (``POST
/api/v1/dashboard/query``) to real in-process agents on loopback, fed a user active every
epoch, one every other epoch and one every third; the results API's ``sessions`` of an epoch
and the dashboard's picture of its newest result both equal a reference computed from the
records fed (the sessions that epoch closed: each user's run of active epochs ending just
before it, counted), and headless Chromium (when present) renders them as a sessions table
under the epoch's per-key rows.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agent_helpers import running_agents, wait_for
from dashboard_harness import TOKEN, chromium_available, dashboard_page, submit_and_feed

JOB = "visits"
QUERY = "SELECT user, count(*) AS n FROM ingest GROUP BY user WINDOW SESSION(1 s)"
#: user -> (records per agent in an active epoch, active every k-th epoch from the first)
USERS = {"always": (3, 1), "even": (2, 2), "third": (1, 3)}


def records(first: int, epoch: int) -> list[dict[str, Any]]:
    """One agent's records in ``epoch``."""
    out = []
    for user, (n, every) in USERS.items():
        if (epoch - first) % every == 0:
            out += [{"ts": epoch + (i + 1) / 10, "user": user} for i in range(n)]
    return out


def closed_with(fed: dict[int, list[dict[str, Any]]], epoch: int) -> list[dict[str, Any]]:
    """Reference: the sessions closed with ``epoch`` (gap one epoch): each user active in
    ``epoch - 1`` and not in ``epoch``, its run of consecutive active epochs, counted."""
    active = {e: {r["user"] for r in recs} for e, recs in fed.items()}
    out = []
    for user in USERS:
        if user not in active.get(epoch - 1, ()) or user in active.get(epoch, ()):
            continue
        start = epoch - 1
        while user in active.get(start - 1, ()):
            start -= 1
        n = sum(r["user"] == user for e in range(start, epoch) for r in fed[e])
        row = {"window_start": float(start), "window_end": float(epoch), "user": user, "n": n}
        out.append({**row, "flags": []})
    return sorted(out, key=lambda r: (r["window_start"], r["user"]))


async def test_the_dashboard_shows_a_session_querys_closed_sessions(tmp_path: Path) -> None:
    async with running_agents(2) as agents:
        await submit_and_feed(
            agents,
            {"name": JOB, "query": QUERY},
            lambda first, epoch, _agent: records(first, epoch),
            lambda fed, first: check_sessions(agents, fed, first, tmp_path),
        )


async def check_sessions(
    agents: list[Any], fed: dict[int, list[dict[str, Any]]], first: int, tmp_path: Path
) -> None:
    # the results API: epochs first+1..first+6 close "even" and "third"'s sessions in turn
    for epoch in range(first + 1, first + 7):

        async def final(epoch: int = epoch) -> dict[str, Any] | None:
            try:
                res = await agents[1].results(JOB, epoch)
            except Exception:
                return None
            return res if res["state"] == "final" else None

        res = await wait_for(final, 30, f"epoch {epoch}'s final result")
        assert res["sessions"]["rows"] == closed_with(fed, epoch), epoch

    # the picture: the newest result, its sessions the reference's for that epoch
    picture = agents[1].dashboard

    async def shown() -> dict[str, Any] | None:
        snap = await picture.snapshot(max_age=0)
        r = (snap["jobs"].get(JOB) or {}).get("result") or {}
        s = r.get("sessions") or {}
        ok = r.get("epoch") in fed and r.get("epoch", 0) > first and s.get("rows")
        return r if ok else None

    got = await wait_for(shown, 30, "a result with closed sessions in the picture")
    assert got["sessions"]["rows"] == closed_with(fed, got["epoch"])
    assert got["sessions"]["rows_total"] == len(got["sessions"]["rows"])
    assert got["sessions"]["columns"] == ["window_start", "window_end", "user", "n", "flags"]

    if chromium_available():
        await _check_in_chromium(agents[1].api.url, tmp_path)


async def _check_in_chromium(api_url: str, tmp_path: Path) -> None:
    """The page shows, under the newest epoch's rows, a table of the sessions that epoch
    closed: the user and n cells are the results API's sessions for the epoch shown."""
    from agent.client import ApiClient

    ready = f"""() => !!document.querySelector(
        '.job[data-job="{JOB}"] .result table.rows.sessions tbody tr')"""
    async with dashboard_page(api_url, tmp_path, ready, "sessions table") as page:
        # the heading, the titles and the cells in one evaluation: the page moves on to
        # newer epochs while the test reads, so a shown epoch is compared with the API's
        # answer for it, read again when the page moved on between the two reads
        shown = f"""() => {{
            const card = document.querySelector('.job[data-job="{JOB}"] .result');
            const said = card && card.querySelector('p.sessions');
            const table = card && card.querySelector('table.sessions');
            if (!said || !table) return null;
            return {{said: said.innerText,
                     titles: [...table.querySelectorAll('th')].map(th => th.innerText),
                     cells: [...table.querySelectorAll('tbody tr')].map(
                         tr => [...tr.querySelectorAll('td')].map(td => td.innerText))}};
        }}"""
        got: Any = None
        want: Any = None
        for _ in range(20):
            picture = await page.evaluate(shown)
            if picture is not None:
                epoch = int(picture["said"].split("epoch ")[1].split(":")[0])
                res = await asyncio.to_thread(ApiClient(api_url, TOKEN).results, JOB, epoch)
                got = picture
                want = [[r["user"], str(r["n"])] for r in res["sessions"]["rows"]]
                if [c[2:4] for c in picture["cells"]] == want:
                    break
            await asyncio.sleep(0.5)
        assert got is not None, "no sessions table on the page"
        assert got["titles"] == ["window_start", "window_end", "user", "n", "flags"]
        cells = got["cells"]
        assert [c[2:4] for c in cells] == want
        assert all(c[0].endswith("Z") and c[4] == "" for c in cells), cells
