"""Projection pushdown for access logs: parse only the record fields the jobs read.

Contract:

* :func:`referenced_fields` — the top-level record fields a compiled QL query can read
  (every ``Field`` in SELECT, WHERE, GROUP BY, HAVING, ORDER BY; aliases count too, which only
  widens the set), or None when it cannot tell (``*`` outside ``count(*)``).
* :class:`ProjectedAccessLogParser` — an :class:`~agent.ingest.formats.AccessLogParser` that builds
  only ``ts`` and the requested fields. It accepts and rejects exactly the lines the full
  parser does, with the same reason and message (the same regex, then the same timestamp
  check), and every field it returns equals the full parser's (the same helpers compute it,
  invalid UTF-8 replaced and counted alike);
  fields it does not build specially (``bytes``, ``ident``, ``remote_user``, ``referer``,
  ``user_agent``, ``extra``) make it fall back to the full parse, filtered. Property-tested
  against the full parser on valid and garbage lines.
* :func:`projected_parser` — the parser for an input of format ``fmt`` read by ``jobs``: a
  projected one when every job is a QL job with known fields and the format is an access
  log, else None (keep the input's own parser).

A QL job never sees the fields it does not name, so its results are unchanged; other job
classes get full records (they may read anything).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from agent.ingest.formats import (
    ACCESS_REFUSAL,
    AccessLogParser,
    count_repaired,
    decode_escapes,
    matched_line,
    split_request,
)
from agent.ingest.formats import severity_of_status as _severity
from agent.ingest.records import EncodingRepairs
from agent.ql import nodes as n
from agent.ql.query import CompiledQuery

#: fields the projected parse builds itself (anything else: full parse, filtered)
# the request line's parts
_REQUEST = frozenset(("method", "scheme", "host", "path", "query", "protocol"))
BUILT = frozenset(("ts", "source_ip", "priority", "status", "body", "request")) | _REQUEST


def referenced_fields(compiled: CompiledQuery) -> frozenset[str] | None:
    """Top-level fields ``compiled`` may read (see module docstring)."""
    q = compiled.query
    out: set[str] = set()
    roots: list[Any] = [item.expr for item in q.select]
    roots += [q.where, q.having, *q.group_by, *(o.expr for o in q.order_by)]
    if any(isinstance(r, n.Star) for r in roots):
        return None
    stack = [r for r in roots if r is not None]
    while stack:
        node = stack.pop()
        if isinstance(node, n.Field):
            out.add(node.path[0])
        elif isinstance(node, n.Node):
            stack.extend(_children(node))
    return frozenset(out)


def _children(node: n.Node) -> list[Any]:
    kids: list[Any] = []
    for f in dataclasses.fields(node):  # every sub-node, whatever the node type
        value = getattr(node, f.name)
        if isinstance(value, n.Node):
            kids.append(value)
        elif isinstance(value, tuple):
            kids.extend(v for v in value if isinstance(v, n.Node))
    return kids


class ProjectedAccessLogParser(AccessLogParser):
    """Access-log lines to records holding only ``ts`` and ``fields`` (see module)."""

    def __init__(self, fields: Iterable[str], *, repairs: EncodingRepairs | None = None) -> None:
        super().__init__(repairs=repairs)
        self.fields = frozenset(fields) | {"ts"}
        self._fallback = not self.fields <= BUILT
        self._request = bool(self.fields & _REQUEST)
        self._want = tuple(sorted(self.fields))

    def parse(self, line: bytes | str) -> dict[str, Any]:
        if self._fallback:
            full = super().parse(line)
            return {k: full[k] for k in self._want if k in full}
        # bad bytes replaced and counted, as the full parse
        text, m, before = matched_line(line, self.repairs, self._match, ACCESS_REFUSAL)
        want = self.fields
        event: dict[str, Any] = {}
        request = m.group(5)
        if "\\" in text:
            # escapes are decoded (and their invalid UTF-8 counted) in every quoted field, as
            # the full parse does, so the repair count does not depend on the projection
            request, bad = decode_escapes(request)
            if m.group(8) is not None:
                bad = decode_escapes(m.group(8))[1] or decode_escapes(m.group(9))[1] or bad
            count_repaired(self.repairs, before, bad)
        if "request" in want:
            event["request"] = request
        if "body" in want:
            event["body"] = request
        if self._request:
            parts = split_request(request, query="query" in want)
            for name in _REQUEST & want:
                event[name] = parts[name]
        if "status" in want or "priority" in want:
            status = m.group(6)
            code = None if status == "-" else int(status)
            if "status" in want:
                event["status"] = code
            if "priority" in want:
                event["priority"] = _severity(code)
        if "source_ip" in want:
            event["source_ip"] = m.group(1)
        event["ts"] = self.timestamp(m.group(4))
        return event


def projected_parser(
    jobs: Iterable[Any], fmt: str | None, *, repairs: EncodingRepairs | None = None
) -> ProjectedAccessLogParser | None:
    """A projected parser for ``jobs`` reading ``fmt`` lines, or None (see module); it counts
    its encoding repairs in ``repairs`` (the input's, so a swap loses no count)."""
    if fmt not in ("nginx", "apache"):
        return None
    fields: set[str] = set()
    any_job = False
    for job in jobs:
        compiled = getattr(job, "compiled", None)
        if not isinstance(compiled, CompiledQuery):
            return None
        got = referenced_fields(compiled)
        if got is None:
            return None
        fields |= got
        any_job = True
    return ProjectedAccessLogParser(fields, repairs=repairs) if any_job else None
