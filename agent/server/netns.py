"""Network namespaces for a local cluster: one namespace, veth pair and address per agent.

Contract: :func:`netns_available` says whether this process may create namespaces (root and a
working ``ip netns``), with the reason when not. :class:`NetnsLab` creates, for ``n`` agents, a
Linux bridge in the caller's namespace holding ``10.<x>.0.1/24`` and, per agent ``i``, a
namespace ``elf<tag>-<i>`` whose ``eth0`` (one end of a veth pair, the other end enslaved to the
bridge) holds ``10.<x>.0.<i+2>``. :meth:`NetnsLab.wrap` is the command prefix that runs a
process inside agent ``i``'s namespace and :attr:`NetnsLab.hosts` the address it binds
(:class:`agent.server.cluster.LocalCluster` takes both). :meth:`NetnsLab.link` takes agent
``i``'s link down or up: a partition of that agent from every other agent and from the caller.
:meth:`NetnsLab.close` deletes every namespace, veth and the bridge (also on a failed set-up).

The subnet is the first one no interface of the caller's namespace holds (a lab a killed run left
behind keeps its bridge). Bounds: at most 250 agents (one /24); names stay within the kernel's 15
characters. Every ``ip`` call is a subprocess with a 10 s timeout; a failing one raises
:class:`NetnsError` with its stderr.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess

MAX_AGENTS = 250


class NetnsError(RuntimeError):
    """An ``ip`` command failed; the message carries the command and its stderr."""


def _ip(*args: str) -> str:
    try:
        done = subprocess.run(
            ["ip", *args], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"ip {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def netns_available() -> tuple[bool, str]:
    """(available, why not): namespaces need root, the ``ip`` tool and kernel support, which
    is tried by creating and deleting a scratch namespace."""
    if os.geteuid() != 0:
        return False, "not root: network namespaces need CAP_SYS_ADMIN"
    if shutil.which("ip") is None:
        return False, "the ip tool (iproute2) is not installed"
    probe = f"elfprobe{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
        _ip("netns", "del", probe)
    except NetnsError as exc:
        return False, f"ip netns does not work here: {exc}"
    return True, ""


class NetnsLab:
    """Namespaces, veths and a bridge for ``n`` agents (module contract)."""

    def __init__(self, n: int, subnet: int | None = None) -> None:
        if not 1 <= n <= MAX_AGENTS:
            raise ValueError(f"a lab holds 1..{MAX_AGENTS} agents, got {n}")
        self.n = n
        self.tag = secrets.token_hex(2)  # 4 hex digits: unique names next to other labs
        self._fixed_subnet = subnet is not None  # else open() moves it to a free one
        self.subnet = subnet if subnet is not None else 100 + int(self.tag, 16) % 100
        self.bridge = f"elfbr{self.tag}"
        self._made: list[tuple[str, str]] = []  # ("netns"|"link", name), for close()

    @property
    def hosts(self) -> dict[int, str]:
        """Agent index → the address it binds inside its namespace."""
        return {i: f"10.{self.subnet}.0.{i + 2}" for i in range(self.n)}

    def namespace(self, i: int) -> str:
        return f"elf{self.tag}-{i}"

    def veth(self, i: int) -> str:
        return f"ev{self.tag}{i}"  # the bridge-side end, in the caller's namespace

    def _free_subnet(self) -> int:
        """The first ``10.<x>.0.0/24`` (x in 100..199, from the tag's) no interface here holds
        yet: a lab left behind by a killed run keeps its bridge, and two bridges on one
        subnet would route one lab's packets to the other."""
        used = _ip("-4", "-o", "addr", "show")
        for step in range(100):
            x = 100 + (self.subnet - 100 + step) % 100
            if f" 10.{x}.0." not in used:
                return x
        raise NetnsError("every subnet 10.100-199.0.0/24 is in use here")

    def open(self) -> NetnsLab:
        if not self._fixed_subnet:
            self.subnet = self._free_subnet()
        hosts = self.hosts
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            _ip("addr", "add", f"10.{self.subnet}.0.1/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i in range(self.n):
                ns, veth = self.namespace(i), self.veth(i)
                _ip("netns", "add", ns)
                self._made.append(("netns", ns))
                _ip("link", "add", veth, "type", "veth", "peer", "name", f"ep{self.tag}{i}")
                self._made.append(("link", veth))
                _ip("link", "set", f"ep{self.tag}{i}", "netns", ns)
                _ip("-n", ns, "link", "set", f"ep{self.tag}{i}", "name", "eth0")
                _ip("-n", ns, "addr", "add", f"{hosts[i]}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("link", "set", veth, "master", self.bridge)
                _ip("link", "set", veth, "up")
        except BaseException:
            self.close()
            raise
        return self

    def wrap(self, i: int) -> list[str]:
        """The command prefix running a process in agent ``i``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(i)]

    def link(self, i: int, up: bool) -> None:
        """Take agent ``i``'s link down (a partition) or up again."""
        _ip("link", "set", self.veth(i), "up" if up else "down")

    def close(self) -> None:
        """Delete what :meth:`open` made (veths go with their namespaces; errors ignored so
        a half-made lab is still cleaned up)."""
        for kind, name in reversed(self._made):
            try:
                if kind == "netns":
                    _ip("netns", "del", name)
                else:
                    _ip("link", "del", name)
            except NetnsError:
                pass
        self._made.clear()

    def __enter__(self) -> NetnsLab:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
