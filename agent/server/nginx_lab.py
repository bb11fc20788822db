"""Real nginx for the chaos harness: one nginx serving one site per agent, each site logging
to the access-log file its agent tails, traffic against them, and an independent reading of
those logs.

Contract.

* :func:`nginx_available` says whether a real nginx can be run here (the binary, and root:
  CI installs Debian's nginx as root), with the reason when not.
* :class:`NginxLab` writes one config under ``workdir`` (``daemon off``, pid file, error log
  and temporary paths all in ``workdir``) with one ``server`` block per log path, each on
  ``127.0.0.1`` at a port found free by binding port 0, logging every request in nginx's
  ``combined`` format, unbuffered, to its own path. It answers fixed bodies of a few sizes
  (``return``: no file is served, so the worker user needs no access to ``workdir``) and 404
  for anything else. :meth:`NginxLab.start` runs the master process and waits until every
  port answers; :meth:`NginxLab.stop` ends it (SIGQUIT, then SIGKILL after 10 s).
* :class:`Traffic` sends ``rate`` GET requests per second to each site from one thread
  (urllib; :data:`TRAFFIC_PATHS`, some of them 404s) until stopped, counting the answers.
* :func:`access_record` reads one ``combined`` line by its own regex and ``strptime``
  (independent of :mod:`agent.ingest.formats`): ``{"ts", "status", "bytes"}``; ``ts`` is the
  ``$time_local`` time (whole seconds: the agents' event time too).

Bounds: ports are found free then released, so another process could take one in between
(start then fails naming nginx's error log); every wait has a timeout.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

#: (path, weight): three bodies of different sizes and two kinds of 404
TRAFFIC_PATHS = (("/", 4), ("/small", 3), ("/big", 2), ("/missing", 1), ("/nope/x", 1))
_BODIES = {"/": "home\n", "/small": "s" * 40 + "\n", "/big": "b" * 2000 + "\n"}
#: nginx's ``combined`` format, as nginx defines it
COMBINED = re.compile(
    r'^(?P<addr>\S+) - (?P<user>\S+) \[(?P<time>[^\]]+)\] "(?P<request>(?:[^"\\]|\\.)*)" '
    r'(?P<status>\d{3}) (?P<bytes>\d+|-) "(?:[^"\\]|\\.)*" "(?:[^"\\]|\\.)*"$'
)


def nginx_available() -> tuple[bool, str]:
    """(True, "") when a real nginx can run here; else (False, why)."""
    binary = shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None
    )
    if binary is None:
        return False, "nginx is not installed (CI installs Debian's nginx when root)"
    if os.geteuid() != 0:
        return False, "not root: the nginx scenario runs where CI installs nginx (as root)"
    return True, ""


def _nginx() -> str:
    return shutil.which("nginx") or "/usr/sbin/nginx"


def free_ports(n: int) -> list[int]:
    """``n`` distinct free ports: all held bound until all are found (a port released at once
    may be handed out again by the next bind, which gave one port to two servers)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(n):
            s = held.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def access_record(line: str) -> dict[str, Any] | None:
    """``{"ts", "status", "bytes"}`` of one ``combined`` line (None if it is not one)."""
    m = COMBINED.match(line.rstrip("\n"))
    if m is None:
        return None
    ts = datetime.strptime(m["time"], "%d/%b/%Y:%H:%M:%S %z").timestamp()
    size = 0 if m["bytes"] == "-" else int(m["bytes"])
    return {"ts": ts, "status": int(m["status"]), "bytes": size}


class NginxLab:
    """One nginx master with a ``server`` per access-log path (module contract)."""

    def __init__(self, workdir: Path, logs: list[Path]) -> None:
        self.workdir = Path(workdir)
        self.logs = [Path(p) for p in logs]
        self.ports = free_ports(len(self.logs))
        self.conf = self.workdir / "nginx.conf"
        self.error_log = self.workdir / "nginx-error.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    def config(self) -> str:
        w = self.workdir
        temp = "".join(
            f"    {kind}_temp_path {w / ('nginx-' + kind)};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        bodies = "".join(
            f'        location = {path} {{ return 200 "{body.strip()}\\n"; }}\n'
            for path, body in _BODIES.items()
        )
        servers = "".join(
            f"    server {{\n        listen 127.0.0.1:{port};\n"
            f"        access_log {log} combined;\n{bodies}"
            "        location / { return 404; }\n    }\n"
            for port, log in zip(self.ports, self.logs, strict=True)
        )
        return (
            f"daemon off;\nmaster_process on;\nworker_processes 1;\npid {w / 'nginx.pid'};\n"
            f"error_log {self.error_log} warn;\nevents {{ worker_connections 256; }}\n"
            f"http {{\n    default_type text/plain;\n{temp}{servers}}}\n"
        )

    def start(self, timeout: float = 20.0) -> NginxLab:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(self.config())
        cmd = [_nginx(), "-p", str(self.workdir), "-e", str(self.error_log), "-c", str(self.conf)]
        self.process = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=self.error_log.open("ab")
        )
        deadline = time.monotonic() + timeout
        for port in self.ports:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"nginx exited: {self.error_log.read_text()[-2000:]}")
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"nginx not listening on {port}") from None
                    time.sleep(0.05)  # the poll interval of another process's start
        return self

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(3)  # SIGQUIT: graceful, the logs are complete
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


class Traffic:
    """``rate`` requests per second to each of ``urls`` from one thread (module contract)."""

    def __init__(self, urls: list[str], rate: float = 30.0, seed: int = 1) -> None:
        self.urls = urls
        self.rate = rate
        self.rng = random.Random(seed)
        self.answers: Counter[int] = Counter()
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nginx-traffic", daemon=True)

    def start(self) -> Traffic:
        self._thread.start()
        return self

    def _run(self) -> None:
        paths, weights = zip(*TRAFFIC_PATHS, strict=True)
        interval = 1.0 / self.rate
        due = time.monotonic()
        while not self._stop.is_set():
            for url in self.urls:
                self._get(url + self.rng.choices(paths, weights)[0])
            due += interval
            # a schedule, not a synchronisation: the load's pace
            self._stop.wait(max(0.0, due - time.monotonic()))

    def _get(self, url: str) -> None:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                resp.read()
                self.answers[resp.status] += 1
        except urllib.error.HTTPError as exc:
            exc.close()
            self.answers[exc.code] += 1
        except OSError:
            self.errors += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
