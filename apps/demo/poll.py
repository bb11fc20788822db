"""Polling the demo's cluster through the HTTP API, and the runtime change it shows.

Contract: :class:`Poller` refreshes a :class:`~apps.demo.state.DemoState` from the agents it
reaches through an :class:`Agents` (the demo's cluster, narrowed to what polling needs):
``poll(epoch)`` asks a live agent for each data job's result (of ``epoch``, default the
newest), one agent's local copy of the promoted list, sale-prediction's answer about a top
promoted product (a cross-job routed query), and every third round every agent's status (how
many agents run each job, the masters' last multicast latency). API errors are shown in the
state, never raised; only :meth:`Agents.check_agents` may raise (no agent left).
``zoom_spam()`` applies :data:`~apps.demo.jobs.ZOOM` to spam-campaign at runtime;
``wait_last_epochs(last, timeout)`` polls until every data job has epoch ``last``.
"""

from __future__ import annotations

import time
from typing import Protocol

from agent.client import ApiClient, ApiError
from apps.demo.jobs import DATA_JOBS, JOBS, PREDICTION, PROMOTION, SPAM, ZOOM, ZOOM_TEXT
from apps.demo.render import ms
from apps.demo.state import DemoState

POLL_TIMEOUT = 5.0


class Agents(Protocol):
    """The demo's agents as the poller reaches them."""

    def client(self, index: int = 0, timeout: float = POLL_TIMEOUT) -> ApiClient:
        """An API client of agent ``index``."""
        ...

    def alive(self, n: int) -> int:
        """The index of the ``n``-th agent process still running (cycling)."""
        ...

    def check_agents(self) -> None:
        """Note agent processes that exited; raise when none is left."""
        ...


class FeedCounters(Protocol):
    """The live feed as the poller reads it (another thread writes these)."""

    written: dict[str, int]
    error: BaseException | None


class Poller:
    """Refreshes the demo's state from the cluster (module contract)."""

    def __init__(self, state: DemoState, agents: Agents) -> None:
        self.state = state
        self.agents = agents
        self.feed: FeedCounters | None = None  # set once the feed runs
        self._tick = 0

    def poll(self, epoch: int | None = None) -> None:
        """One round of API calls that refreshes the state (errors shown, never raised);
        the data jobs' results of ``epoch`` (default: the newest)."""
        self._tick += 1
        st = self.state
        self.agents.check_agents()
        if self.feed is not None:
            st.written = dict(self.feed.written)
            if self.feed.error is not None and not st.feed_error_shown:
                st.feed_error_shown = True
                st.log(f"the event feed stopped: {self.feed.error!r}")
        client = self.agents.client(self.agents.alive(0))
        for name in DATA_JOBS:
            view = st.jobs[name]
            try:
                res = client.results(name, epoch)
            except ApiError as exc:
                wait = "the first epoch" if epoch is None else f"epoch {epoch}"
                view.error = f"waiting for {wait}" if exc.status == 404 else str(exc)
                continue
            view.error = ""
            view.tentative = bool(res.get("tentative"))
            view.coverage, view.accuracy = res.get("coverage"), res.get("accuracy")
            if view.epoch != res.get("epoch"):
                view.epoch = res.get("epoch")
                view.epochs_done = (view.epoch or 0) - st.start_epoch + 1
                view.rows = list(res.get("rows") or [])
        self._poll_promoted()
        self._poll_prediction()
        if self._tick % 3 == 1:
            self._poll_status()

    def _poll_promoted(self) -> None:
        st = self.state
        index = self.agents.alive(self._tick)  # any agent answers from its own copy
        try:
            local = self.agents.client(index).local(PROMOTION)
        except ApiError as exc:
            st.jobs[PROMOTION].note = f"local view: {exc}"
            return
        st.promoted = {**local, "agent": index}
        top = local.get("top") or []
        if local.get("epoch") is not None:
            st.jobs[
                PROMOTION
            ].note = (
                f"read from agent {index}'s own copy (multicast by the master), {len(top)} promoted"
            )

    def _poll_prediction(self) -> None:
        st = self.state
        top = st.promoted.get("top") or []
        product = top[(self._tick // 2) % min(len(top), 3)][0] if top else "P000001"
        t0 = time.monotonic()
        try:
            client = self.agents.client(self.agents.alive(self._tick))
            reply = client.query(PREDICTION, {"product": product})
        except ApiError as exc:
            st.jobs[PREDICTION].error = str(exc)
            return
        st.jobs[PREDICTION].error = ""
        st.prediction = {**reply, "ms": (time.monotonic() - t0) * 1000}

    def _poll_status(self) -> None:
        counts = dict.fromkeys(JOBS, 0)
        for i in range(self.state.config.agents):
            try:
                jobs = self.agents.client(i).status().get("jobs", {})
            except ApiError:
                continue
            for name, job in jobs.items():
                if name not in counts:
                    continue
                if job.get("worker") is not None or name == PREDICTION:
                    counts[name] += 1
                stats = job.get("multicast_stats") or []
                if "master" in (job.get("roles") or []) and stats:
                    self.state.jobs[name].multicast_ms = stats[-1].get("ms")
        for name, n in counts.items():
            if name != PREDICTION:
                self.state.jobs[name].agents = n

    # ---- the runtime change ---------------------------------------------------------------
    def zoom_spam(self) -> None:
        st = self.state
        st.log(f"changing {SPAM}'s filter at runtime: {ZOOM_TEXT}")
        try:
            client = self.agents.client(self.agents.alive(0), timeout=30)
            reply = client.change(SPAM, {"params": ZOOM})
        except ApiError as exc:
            st.log(f"runtime change failed: {exc}")
            st.change = {"error": str(exc)}
            return
        st.change = reply
        st.spam_filter = f"zoomed: {ZOOM_TEXT}"
        st.log(
            f"runtime change of {SPAM} (version {reply.get('version')}) applied on "
            f"{reply.get('agents_reached')} agents in {ms(reply.get('applied_ms'))}"
        )

    # ---- the end --------------------------------------------------------------------------
    def wait_last_epochs(self, last: int, timeout: float) -> None:
        """After the feed stopped: wait until every data job has epoch ``last`` (the last one
        with events) and show that epoch's results."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll(last)
            if all(self.state.jobs[j].epoch == last for j in DATA_JOBS):
                return
            time.sleep(min(0.5, self.state.config.epoch_seconds / 2))  # polling the masters
        self.state.log(f"stopped waiting for epoch {last} after {timeout:.0f} s")
