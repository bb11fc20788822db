"""The dashboard end to end in a real headless Chromium (Playwright on Debian's ``chromium``).

A real 4-agent cluster (agent processes, :class:`agent.server.cluster.LocalCluster`) fed over
the ingest API; the page is opened with the token in its URL fragment. The test sees the four
agents listed as alive, submits an ELF QL query from the page's form, sees the job's tree
appear with every agent in it and one master, watches epochs arrive and the page's newest
result equal the results API's for that epoch (the reference), changes the job from the page
and sees every agent apply it, kills an agent with SIGKILL and sees it marked failed and the
epochs lacking it tentative, kills
the job's master and sees the failover (a new master in the tree, a failover on the
timeline), and stops the job from the page. Screenshots go to ``tmp_path``, or to the folder
named by ``ELF_SCREENSHOTS`` (``ELF_SCREENSHOTS=docs`` refreshes docs/dashboard-*.png).

Skips with the reason when the Python package ``playwright`` or ``/usr/bin/chromium`` is
missing (``.ci/run`` installs Debian's chromium when it runs as root); it never downloads a
browser (no ``playwright install``).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_helpers import wait_until

from agent.client import ApiError
from agent.server.cluster import LocalCluster

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
AGENTS = 4
JOB = "clicks-by-word"
QUERY = "SELECT line, count(*) AS n FROM ingest GROUP BY line"
WORDS = ["alpha", "beta", "gamma", "alpha"]

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the Python package playwright is not installed (pip: [test])"
)
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(
        f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium; "
        ".ci/run does it when run as root)",
        allow_module_level=True,
    )


class Feeder(threading.Thread):
    """Posts a few lines stamped with the current time to every live agent's ingest input."""

    def __init__(self, cluster: LocalCluster) -> None:
        super().__init__(daemon=True, name="dashboard-feeder")
        self.cluster = cluster
        self.halt = threading.Event()
        self.dead: set[int] = set()

    def run(self) -> None:
        while not self.halt.wait(0.25):  # a pace for the feed, not a synchronisation
            for i in range(AGENTS):
                if i in self.dead:
                    continue
                lines = [json.dumps({"ts": time.time(), "line": w}) for w in WORDS]
                with contextlib.suppress(ApiError):  # an agent being killed
                    self.cluster.client(i).ingest("ingest", lines)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    local = LocalCluster(AGENTS, tmp_path / "cluster", extra_args=["--log-level", "WARNING"])
    local.start(timeout=60)
    try:
        local.wait_settled(60)
        yield local
    finally:
        local.stop()


def _shots(tmp_path: Path) -> Path:
    folder = os.environ.get("ELF_SCREENSHOTS")
    if folder:
        out = Path(folder)
        if not out.is_absolute():
            out = Path(__file__).resolve().parents[3] / out
        return out
    return tmp_path


def _launch(p: Any, profile: Path) -> Any:
    # a persistent context gives Chromium a fresh --user-data-dir of our own
    return p.chromium.launch_persistent_context(
        str(profile),
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1400, "height": 1100},
    )


def _wait_js(page: Any, predicate: str, timeout: float) -> None:
    """Poll ``predicate`` (a JS function) in the page until it is truthy, ``timeout`` in ms.
    Not ``page.wait_for_function``: its polling evaluates the predicate with ``eval`` inside
    the page, which the dashboard's Content-Security-Policy (``script-src 'self'``) refuses
    whenever the first check is false; ``page.evaluate`` runs it over the DevTools protocol."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(predicate):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} ms waiting for {predicate}")
        page.wait_for_timeout(100)  # the poll interval of an in-page condition


def _page_rows(page: Any, job: str) -> tuple[int, list[dict[str, Any]]]:
    """The epoch and rows of the newest result the page shows for ``job``."""
    card = page.locator(f'.job[data-job="{job}"]')
    head = card.locator(".result p").first.inner_text()
    epoch = int(head.split("epoch ")[1].split()[0])
    rows = []
    for tr in card.locator(".result table.rows tbody tr").all():
        cells = tr.locator("td").all_inner_texts()
        rows.append({"line": cells[0], "n": int(cells[1])})
    return epoch, rows


def test_dashboard_in_headless_chromium(cluster: LocalCluster, tmp_path: Path) -> None:
    shots = _shots(tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    serving = cluster.client(0)
    feeder = Feeder(cluster)
    feeder.start()
    with sync_api.sync_playwright() as p:
        browser = _launch(p, tmp_path / "chromium-profile")
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(serving.dashboard_url(with_token=True))
            # the token left the address bar for the tab's session storage
            assert "token" not in page.url

            # 1. the overlay's agents appear, all alive
            _wait_js(
                page,
                "() => document.querySelectorAll('#agents tr[data-status=alive]').length === 4",
                timeout=30_000,
            )
            listed = set(
                page.locator("#agents tbody tr").evaluate_all(
                    "rows => rows.map(r => r.dataset.node)"
                )
            )
            assert listed == {a["node_id"] for a in cluster.agents()}

            # 2. a query submitted from the page becomes a job whose tree spans every agent
            page.fill("#q-name", JOB)
            page.fill("#q-epoch", "1")
            page.fill("#q-text", QUERY)
            page.click("#query-form button[type=submit]")
            page.wait_for_selector("#query-reply.ok", timeout=30_000)
            assert f"job {JOB} running" in page.inner_text("#query-reply")
            card = page.locator(f'.job[data-job="{JOB}"]')
            _wait_js(
                page,
                f"""() => {{
                  const c = document.querySelector('.job[data-job="{JOB}"]');
                  return c && c.querySelectorAll('g.node').length === 4
                    && c.querySelectorAll('g.node.master').length === 1;
                }}""",
                timeout=30_000,
            )
            nodes = set(card.locator("g.node").evaluate_all("g => g.map(n => n.dataset.node)"))
            assert nodes == {a["node_id"] for a in cluster.agents()}

            # 3. epochs arrive: the newest epoch advances, and the page's newest result is
            # the results API's result for that epoch
            _wait_js(
                page,
                f"""() => {{
                  const c = document.querySelector('.job[data-job="{JOB}"]');
                  return c && c.querySelector('.result table.rows');
                }}""",
                timeout=30_000,
            )
            first = int(card.get_attribute("data-newest") or 0)
            _wait_js(
                page,
                f"""() => Number(document.querySelector('.job[data-job="{JOB}"]')
                    .dataset.newest) >= {first + 2}""",
                timeout=30_000,
            )
            epoch, rows = _page_rows(page, JOB)
            api_rows = serving.results(JOB, epoch)["rows"]
            assert sorted(rows, key=lambda r: r["line"]) == sorted(
                api_rows, key=lambda r: r["line"]
            )
            assert card.locator(".epochs tbody tr").count() >= 2
            page.screenshot(path=str(shots / "dashboard-running.png"), full_page=True)

            # 4. a change from the page: the reply says every agent applied it
            card.locator(".actions input").first.fill(
                "SELECT line, count(*) AS n FROM ingest WHERE line != 'gamma' GROUP BY line"
            )
            card.locator(".actions button", has_text="apply change").click()
            _wait_js(
                page,
                f"""() => {{
                  const r = document.querySelector('.job[data-job="{JOB}"] .actions .reply');
                  return r && (r.classList.contains('ok') || r.classList.contains('err'));
                }}""",
                timeout=30_000,
            )
            reply = card.locator(".actions .reply").inner_text()
            assert f"applied by {AGENTS} agents" in reply, reply
            _wait_js(
                page,
                f"""() => document.querySelector('.job[data-job="{JOB}"]')
                    .dataset.version === '2'""",
                timeout=30_000,
            )

            # 5. kill -9 an agent that neither serves the page, masters the job nor stands by
            status = {a["node_id"]: i for i, a in enumerate(cluster.agents())}
            master = card.locator("g.node.master").get_attribute("data-node")
            standby = card.locator("g.node.standby").evaluate_all("g => g.map(n => n.dataset.node)")
            victim = next(
                i for node, i in status.items() if i != 0 and node != master and node not in standby
            )
            victim_id = cluster.agents()[victim]["node_id"]
            feeder.dead.add(victim)
            cluster.kill(victim)
            page.wait_for_selector(
                f'#agents tr[data-node="{victim_id}"][data-status="failed"]', timeout=30_000
            )
            page.wait_for_selector('#timeline li[data-kind="failure"]', timeout=10_000)
            # the epochs it no longer contributes to are tentative, lacking it
            page.wait_for_selector(f'.job[data-job="{JOB}"] .epochs td.tentative', timeout=30_000)
            lacking = card.locator(".epochs td.tentative").first.inner_text()
            assert victim_id[:8] in lacking, lacking
            page.screenshot(path=str(shots / "dashboard-agent-failed.png"), full_page=True)

            # 6. kill -9 the job's master: marked failed, and the failover (its standby taking
            # over) reaches the timeline and the tree. The page moves to a surviving agent
            # that is not the master if the master is the one serving it.
            master_index = status[master]
            if master_index == 0:
                other = next(i for i in range(1, AGENTS) if i not in (victim, master_index))
                page.goto(cluster.client(other).dashboard_url(with_token=True))
                card = page.locator(f'.job[data-job="{JOB}"]')
                page.wait_for_selector(f'.job[data-job="{JOB}"] g.node.master', timeout=30_000)
            feeder.dead.add(master_index)
            cluster.kill(master_index)
            page.wait_for_selector(
                f'#agents tr[data-node="{master}"][data-status="failed"]', timeout=30_000
            )
            _wait_js(
                page,
                f"""() => {{
                  const m = document.querySelector('.job[data-job="{JOB}"] g.node.master');
                  return m && m.dataset.node !== '{master}'
                    && document.querySelector('#timeline li[data-kind="failover"]');
                }}""",
                timeout=45_000,
            )
            page.screenshot(path=str(shots / "dashboard-failover.png"), full_page=True)

            # 7. stop the job from the page
            card.locator(".actions button", has_text="stop job").click()
            _wait_js(
                page,
                "() => !document.querySelector('.job[data-job=\"" + JOB + "\"]')",
                timeout=30_000,
            )
            assert not errors, errors
        finally:
            browser.close()
            feeder.halt.set()
            feeder.join(5)
    alive = next(i for i in range(AGENTS) if cluster.alive(i))
    wait_until(
        lambda: all(
            j["state"] == "stopped" for j in cluster.client(alive).jobs() if j["name"] == JOB
        ),
        30,
        "the job to be stopped",
    )
