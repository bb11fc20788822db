"""NetnsLab: real namespaces, veths and a bridge (root only; skipped elsewhere, saying why).

Checked with real sockets and the kernel's own view (``ip``): a TCP listener started inside each
agent's namespace is reached from the caller's namespace through the bridge; a lab opened while
another (a killed run's leftover, here a live one) holds the subnet its tag maps to takes the next
free one; ``link(i, False)`` cuts agent ``i`` off and ``close`` leaves nothing behind.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agent.server.netns import NetnsLab, netns_available


@pytest.fixture(autouse=True)
def _needs_netns() -> None:
    ok, why = netns_available()
    if not ok:
        pytest.skip(f"no network namespaces here: {why}")


_LISTENER = """
import socket, sys
s = socket.create_server((sys.argv[1], 0))
print(s.getsockname()[1], flush=True)
while True:
    s.accept()[0].close()
"""


@contextmanager
def _listening(lab: NetnsLab, i: int) -> Iterator[int]:
    """A TCP listener on agent ``i``'s address, inside its namespace; yields its port."""
    proc = subprocess.Popen(
        [*lab.wrap(i), sys.executable, "-c", _LISTENER, lab.hosts[i]],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


def _reaches(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=2).close()
    except OSError:
        return False
    return True


def _addresses() -> str:
    return subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout


def test_a_second_lab_on_a_taken_subnet_moves_to_a_free_one() -> None:
    with NetnsLab(2) as first:
        second = NetnsLab(2)
        second.subnet = first.subnet  # as if its tag mapped to the taken subnet
        with second:
            assert second.subnet != first.subnet
            assert all(h.startswith(f"10.{second.subnet}.0.") for h in second.hosts.values())
            for lab in (first, second):
                for i, host in lab.hosts.items():
                    with _listening(lab, i) as port:
                        assert _reaches(host, port), (lab.subnet, i)
            with _listening(second, 1) as port:
                second.link(1, False)
                assert not _reaches(second.hosts[1], port)
                second.link(1, True)
        assert f" 10.{second.subnet}.0." not in _addresses()
    assert f" 10.{first.subnet}.0." not in _addresses()
