"""Wire formats of the tree layer's messages, and their validation.

Contract: every message the tree layer receives from the network goes through one ``parse_*``
function here, which returns plain validated Python values or raises
:class:`~srt.trees.types.BadTreeMessage` naming what is wrong. Nothing is pickled or evaluated;
ids travel as 20-byte strings, nodes as ``NodeInfo.to_wire()`` lists. The formats are listed
in docs/srt-trees.md ("Messages").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from overlay import NodeInfo
from srt.trees.types import BadTreeMessage

APP = "srt"  # the RoutingApplication name on the overlay
HB = "srt.hb"
LEAVE = "srt.leave"
MOVED = "srt.moved"
ADOPT = "srt.adopt"
TAKEOVER = "srt.takeover"
MC = "srt.mc"
QR = "srt.qr"

MAX_JOB = 256
MAX_URL = 512
MAX_PATH = 64
MAX_HB_TREES = 64  # trees per heartbeat datagram (≈ 64 × 80 B with the roots in the reply)
ID_BYTES = 20
TOKEN_BYTES = 8
REASONS = ("left", "moved", "failed")


def bad(what: str) -> BadTreeMessage:
    return BadTreeMessage(what)


def want_dict(obj: Any, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise bad(f"{what}: payload must be a map, got {type(obj).__name__}")
    return obj


def tree_id(raw: Any, what: str = "tree id") -> int:
    if not isinstance(raw, bytes) or len(raw) != ID_BYTES:
        raise bad(f"{what} must be {ID_BYTES} bytes")
    return int.from_bytes(raw, "big")


def id_bytes(value: int) -> bytes:
    return value.to_bytes(ID_BYTES, "big")


def token(raw: Any, what: str) -> bytes:
    if not isinstance(raw, bytes) or len(raw) != TOKEN_BYTES:
        raise bad(f"{what} must be {TOKEN_BYTES} bytes")
    return raw


def text(raw: Any, what: str, limit: int, *, empty: bool = True) -> str:
    if not isinstance(raw, str) or len(raw) > limit or (not empty and not raw):
        raise bad(f"{what} must be a string of at most {limit} characters")
    return raw


def node(raw: Any, what: str) -> NodeInfo:
    try:
        return NodeInfo.from_wire(raw)
    except (ValueError, TypeError) as exc:
        raise bad(f"{what}: {exc}") from None


def opt_node(raw: Any, what: str) -> NodeInfo | None:
    return None if raw is None else node(raw, what)


def wire(info: NodeInfo | None) -> list[Any] | None:
    return None if info is None else info.to_wire()


@dataclass(frozen=True, slots=True)
class Join:
    job: str
    jid: bytes
    prev: NodeInfo | None  # the node that forwarded it to us (None at the origin)
    url: str  # prev's data-plane URL
    path: tuple[int, ...]  # ids of the nodes that joined through this message so far


def parse_join(msg: Any) -> Join:
    msg = want_dict(msg, "JOIN")
    path_raw = msg.get("path")
    if not isinstance(path_raw, list) or len(path_raw) > MAX_PATH:
        raise bad(f"JOIN path must be a list of at most {MAX_PATH} ids")
    return Join(
        job=text(msg.get("job"), "JOIN job", MAX_JOB),
        jid=token(msg.get("jid"), "JOIN jid"),
        prev=opt_node(msg.get("prev"), "JOIN prev"),
        url=text(msg.get("url", ""), "JOIN url", MAX_URL),
        path=tuple(tree_id(p, "JOIN path entry") for p in path_raw),
    )


def join_message(job: str, jid: bytes) -> dict[str, Any]:
    return {"k": "join", "job": job, "jid": jid, "prev": None, "url": "", "path": []}


@dataclass(frozen=True, slots=True)
class Heartbeat:
    url: str
    trees: tuple[int, ...]


def parse_hb(payload: Any) -> Heartbeat:
    payload = want_dict(payload, "heartbeat")
    trees = payload.get("trees")
    if not isinstance(trees, list) or not 0 < len(trees) <= MAX_HB_TREES:
        raise bad(f"heartbeat trees must be a list of 1..{MAX_HB_TREES} ids")
    return Heartbeat(
        url=text(payload.get("url", ""), "heartbeat url", MAX_URL),
        trees=tuple(tree_id(t) for t in trees),
    )


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    url: str
    lost: frozenset[int]  # trees in which the parent does not count us as a child
    roots: tuple[NodeInfo | None, ...]  # the parent's known root per tree (aligned)


def parse_hb_reply(reply: Any, n: int) -> HeartbeatReply:
    reply = want_dict(reply, "heartbeat reply")
    lost = reply.get("lost")
    roots = reply.get("roots")
    if not isinstance(lost, list) or not isinstance(roots, list) or len(roots) != n:
        raise bad("heartbeat reply needs lost (list) and roots (one per tree)")
    return HeartbeatReply(
        url=text(reply.get("url", ""), "heartbeat reply url", MAX_URL),
        lost=frozenset(tree_id(t) for t in lost),
        roots=tuple(opt_node(r, "heartbeat reply root") for r in roots),
    )


def parse_tree_reason(payload: Any, what: str) -> tuple[int, str]:
    payload = want_dict(payload, what)
    reason = payload.get("reason", "left")
    if reason not in REASONS:
        raise bad(f"{what} reason must be one of {REASONS}")
    return tree_id(payload.get("t")), reason


def parse_moved(payload: Any) -> tuple[int, NodeInfo | None]:
    payload = want_dict(payload, "moved")
    return tree_id(payload.get("t")), opt_node(payload.get("parent"), "moved parent")


def parse_adopt(payload: Any) -> tuple[int, str, str]:
    payload = want_dict(payload, "adopt")
    return (
        tree_id(payload.get("t")),
        text(payload.get("job", ""), "adopt job", MAX_JOB),
        text(payload.get("url", ""), "adopt url", MAX_URL),
    )


def parse_takeover(payload: Any) -> tuple[int, str]:
    payload = want_dict(payload, "takeover")
    return tree_id(payload.get("t")), text(payload.get("job", ""), "takeover job", MAX_JOB)
