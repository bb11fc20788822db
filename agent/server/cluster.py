"""A local multi-process cluster on loopback, for demos, tests and benchmarks.

Contract: :class:`LocalCluster` starts ``n`` real ``elf agent`` processes (each with its own
ports, data directory and optional JSON-lines inputs), the first as the seed the others
bootstrap from; :meth:`LocalCluster.start` returns once every process printed its ready line
(or raises with the failing process's stderr); :meth:`stop` sends SIGTERM (graceful leave) and
kills what has not exited after a timeout. :meth:`kill` is a crash (SIGKILL, no leave);
:meth:`restart` runs a dead process's command again with the same data directory and the same
ports, so it comes back as the same node (its id is derived from its overlay address) and
finds its persisted offsets. ``wrap`` and ``hosts`` place a process elsewhere than the
loopback interface (a network namespace: :mod:`agent.server.chaos`); its ``stderr.log`` is
appended to across restarts. Processes share one secret file in the work
directory, created ``0600``; the API token is derived from it. Secrets never appear on the
agents' command lines (``--secret-file PATH`` names the file), and each agent's
``stderr.log`` is ``0600``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent.client import ApiClient, ApiError
from agent.config import derive_api_token
from agent.private_files import create_private, open_private
from agent.runtime.host.agent import spans_one_tree
from agent.server.daemon import READY_PREFIX


@dataclass
class AgentProcess:
    """One running ``elf agent`` process and what it printed on start."""

    index: int
    process: subprocess.Popen[str]
    data_dir: Path
    agents: list[dict[str, Any]] = field(default_factory=list)

    @property
    def api_url(self) -> str:
        return self.agents[0]["api_url"]

    @property
    def overlay_address(self) -> str:
        return self.agents[0]["overlay"]


class ClusterError(RuntimeError):
    """An agent process failed to start; the message carries its stderr tail."""


def _view_line(view: dict[str, Any] | None) -> str:
    """One agent's jobs-tree view (``TreeView.to_dict()`` form) in a line: state, root or
    not, its parent's id prefix, how many children."""
    if view is None:
        return "not a member"
    parent = (view.get("parent") or {}).get("id", "-")[:8]
    children = len(view.get("children") or [])
    return f"{view.get('state')}, root={view.get('is_root')}, parent={parent}, children={children}"


#: clusters started and not stopped yet (a test that fails before its own stop leaves its
#: agent processes running: a harness's teardown stops what is left, :func:`running_clusters`)
_RUNNING: weakref.WeakSet[LocalCluster] = weakref.WeakSet()


def running_clusters() -> list[LocalCluster]:
    """Clusters started in this process and not stopped yet."""
    return list(_RUNNING)


class LocalCluster:
    """``n`` agent processes on 127.0.0.1 (see the module contract)."""

    def __init__(
        self,
        n: int,
        workdir: str | Path,
        *,
        inputs: dict[int, dict[str, str]] | None = None,
        logical_agents: int = 1,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
        wrap: Callable[[int], list[str]] | None = None,
        hosts: dict[int, str] | None = None,
        agent_args: dict[int, list[str]] | None = None,
        cwd: str | Path | None = None,
    ) -> None:
        if n < 1:
            raise ValueError("a cluster needs at least one agent process")
        self.n = n
        self.workdir = Path(workdir)
        self.inputs = inputs or {}
        self.logical_agents = logical_agents
        self.extra_args = extra_args or []
        self.agent_args = agent_args or {}  # per process index (e.g. its --domain)
        self.env = env or {}
        # where the processes start: ``python -m`` imports the agent from there first (a
        # bench runs an older checkout this way, side by side with this one)
        self.cwd = None if cwd is None else Path(cwd)
        # a command prefix per process index (e.g. ``ip netns exec NS``) and the address a
        # process binds and advertises (default: loopback)
        self.wrap = wrap
        self.hosts = hosts or {}
        self.procs: list[AgentProcess] = []
        self.secret_file = self.workdir / "secret"

    @property
    def token(self) -> str:
        return derive_api_token(self.secret_file.read_bytes().strip())

    def client(self, index: int = 0) -> ApiClient:
        return ApiClient(self.procs[index].api_url, self.token)

    def agents(self) -> list[dict[str, Any]]:
        return [a for p in self.procs for a in p.agents]

    def start(self, timeout: float = 60.0) -> LocalCluster:
        self.ensure_secret()
        _RUNNING.add(self)
        try:
            seed = self._spawn(0, bootstrap=None)
            self._wait_ready(seed, timeout)
            rest = [self._spawn(i, bootstrap=seed.overlay_address) for i in range(1, self.n)]
            for proc in rest:
                self._wait_ready(proc, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def ensure_secret(self) -> Path:
        """Create the work directory and, unless it exists, the secret file: created 0600
        (``O_EXCL``, the mode given to ``open``), so it is never readable by others, not even
        for the moment between a write and a chmod."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.secret_file.exists():
            create_private(self.secret_file, secrets.token_hex(32).encode())
        return self.secret_file

    def _spawn(
        self,
        index: int,
        bootstrap: str | None,
        ports: list[str] | None = None,
    ) -> AgentProcess:
        data_dir = self.workdir / f"agent-{index}"
        data_dir.mkdir(parents=True, exist_ok=True)
        args = [*(self.wrap(index) if self.wrap else [])]
        args += [sys.executable, "-m", "agent.cli", "agent", "--secret-file", str(self.secret_file)]
        args += ["--data-dir", str(data_dir), "--agents", str(self.logical_agents)]
        host = self.hosts.get(index)
        if host:
            args += ["--host", host, "--api-host", host]
        if bootstrap:
            args += ["--bootstrap", bootstrap]
        for name, path in self.inputs.get(index, {}).items():
            args += ["--input", f"{name}={path}"]
        args += self.extra_args
        args += self.agent_args.get(index, [])
        args += ports or []
        env = {**os.environ, **self.env, "PYTHONUNBUFFERED": "1"}
        # the agent's log may quote rejected lines: private, like the dead letters; a restart
        # appends, so the log of the crashed run stays readable
        log_file = open_private(data_dir / "stderr.log", append=ports is not None)
        stderr = os.fdopen(log_file, "w")
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env, cwd=self.cwd
        )
        stderr.close()
        agent = AgentProcess(index, proc, data_dir)
        if index < len(self.procs):
            self.procs[index] = agent
        else:
            self.procs.append(agent)
        return agent

    def _wait_ready(self, agent: AgentProcess, timeout: float) -> None:
        result: list[str] = []

        def read() -> None:
            assert agent.process.stdout is not None
            for line in agent.process.stdout:
                if line.startswith(READY_PREFIX):
                    result.append(line[len(READY_PREFIX) :])
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(timeout)
        if not result:
            tail = (agent.data_dir / "stderr.log").read_text()[-3000:]
            raise ClusterError(f"agent process {agent.index} did not become ready:\n{tail}")
        agent.agents = json.loads(result[0])

    def settled(self) -> bool:
        """Whether the jobs tree spans every agent process with exactly one root (the state in
        which a submitted job reaches everyone at once)."""
        return self._jobs_tree_views()[0]

    def _jobs_tree_views(self) -> tuple[bool, list[str]]:
        """(settled, one line per agent process: its jobs-tree view or why there is none)."""
        views: list[dict[str, Any] | None] = []
        lines: list[str] = []
        for i in range(len(self.procs)):
            try:
                view = self.client(i).status().get("jobs_tree")
            except ApiError as exc:
                return False, [*lines, f"agent {i}: no status ({exc})"]
            views.append(view)
            lines.append(f"agent {i}: {_view_line(view)}")
        return spans_one_tree(views), lines

    def wait_settled(self, timeout: float = 60.0) -> None:
        """Poll :meth:`settled` until true; raise :class:`ClusterError` after ``timeout``,
        naming every agent's last view of the jobs tree (what a failed CI run leaves to read)."""
        deadline = time.monotonic() + timeout
        while True:
            done, lines = self._jobs_tree_views()
            if done:
                return
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"the cluster's jobs tree did not settle in {timeout}s:\n" + "\n".join(lines)
                )
            time.sleep(0.2)  # polling other processes' state

    def stop(self, timeout: float = 20.0) -> None:
        _RUNNING.discard(self)
        for proc in self.procs:
            if proc.process.poll() is None:
                proc.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.process.kill()
                proc.process.wait()
            if proc.process.stdout is not None:
                proc.process.stdout.close()

    def kill(self, index: int) -> None:
        """Kill one agent process without a graceful leave (a crash: SIGKILL)."""
        proc = self.procs[index].process
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def terminate(self, index: int, timeout: float = 60.0) -> int:
        """Stop one agent process gracefully (SIGTERM: it drains and leaves); returns its
        exit code (killed after ``timeout`` seconds)."""
        proc = self.procs[index].process
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return code

    def signal(self, index: int, sig: int) -> None:
        """Send ``sig`` to agent process ``index`` (SIGSTOP / SIGCONT: a stalled agent)."""
        os.kill(self.procs[index].process.pid, sig)

    def alive(self, index: int) -> bool:
        return self.procs[index].process.poll() is None

    def restart(self, index: int, timeout: float = 60.0) -> AgentProcess:
        """Run a dead process's command again: same data directory, same overlay, data-plane
        and API ports (so the same node id and API URL), bootstrapping from a live process.
        Returns once it printed its ready line (raises :class:`ClusterError` otherwise)."""
        old = self.procs[index]
        if old.process.poll() is None:
            raise ClusterError(f"agent process {index} is still running")
        first = old.agents[0]
        ports = [
            "--port",
            first["overlay"].rsplit(":", 1)[1],
            "--data-port",
            str(urlsplit(first["data_url"]).port),
            "--api-port",
            str(urlsplit(first["api_url"]).port),
        ]
        peers = [p for p in self.procs if p.index != index and p.process.poll() is None]
        bootstrap = peers[0].overlay_address if peers else None
        proc = self._spawn(index, bootstrap, ports)
        try:
            self._wait_ready(proc, timeout)
        except ClusterError:
            proc.process.kill()
            proc.process.wait()
            raise
        return proc

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
