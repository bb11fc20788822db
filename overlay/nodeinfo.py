"""NodeInfo: who a node is and where it listens.

Contract: immutable and hashable; ``to_wire()`` gives a msgpack-encodable list and
``NodeInfo.from_wire`` validates untrusted input (raising ``ValueError``), so a peer's
description can be embedded in any overlay or application message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from overlay import ids

MAX_DOMAIN_LEN = 64
MAX_HOST_LEN = 255
_DECODED_MAX = 65536

# Wire id -> the NodeInfo last decoded for it (process-wide, bounded). A wire form equal to a
# validated one is valid too, so a hit skips the checks and the int conversion — a find_node
# reply carries up to 20 NodeInfos and most of them are decoded again and again. Sharing one
# object is safe: NodeInfo is immutable.
_decoded: dict[bytes, NodeInfo] = {}


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node's 160-bit id, advertised UDP address and failure-domain label (e.g. a rack).

    Equality and hashing cover all four fields; use ``.id`` to compare identities."""

    id: int
    host: str
    port: int
    domain: str = "default"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def to_wire(self) -> list[Any]:
        return [ids.to_bytes(self.id), self.host, self.port, self.domain]

    @classmethod
    def from_wire(cls, obj: Any) -> NodeInfo:
        if type(obj) is list and len(obj) == 4 and type(obj[0]) is bytes:
            hit = _decoded.get(obj[0])
            if (
                hit is not None
                and type(hit) is cls
                and hit.host == obj[1]
                and type(obj[1]) is str
                and hit.port == obj[2]
                and type(obj[2]) is int
                and hit.domain == obj[3]
                and type(obj[3]) is str
            ):
                return hit
        info = cls._validate(obj)
        if len(_decoded) >= _DECODED_MAX:
            _decoded.clear()
        _decoded[obj[0]] = info
        return info

    @classmethod
    def _validate(cls, obj: Any) -> NodeInfo:
        if not isinstance(obj, list | tuple) or len(obj) != 4:
            raise ValueError("node info must be a 4-item list")
        raw_id, host, port, domain = obj
        if not isinstance(host, str) or not 0 < len(host) <= MAX_HOST_LEN:
            raise ValueError("bad host")
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise ValueError("bad port")
        if not isinstance(domain, str) or len(domain) > MAX_DOMAIN_LEN:
            raise ValueError("bad domain")
        return cls(ids.from_bytes(raw_id), host, port, domain)

    def __str__(self) -> str:
        return f"{ids.short(self.id)}@{self.host}:{self.port}/{self.domain}"
