"""Predicate pushdown: the byte substrings every raw line matching a WHERE clause must contain.

Contract: :func:`line_needles` takes a query's WHERE (``None``: no WHERE) and an input format
and returns a :class:`Needles` — a conjunction of clauses, each clause a tuple of byte strings
of which a matching line contains at least one — plus the ``escape`` byte: a line that
contains the escape byte may encode a value in another way, so it must always be parsed. The
guarantee (exact, never a false skip): for every raw line ``L`` whose parsed record makes the
WHERE clause TRUE, ``escape in L`` or every clause has a needle ``n`` with ``n in L``. A line
that passes is parsed and filtered normally, so results never change; only lines that cannot
match are skipped. ``None`` is returned when nothing can be pushed down (then every line must
be parsed).

Pushed-down conjuncts (top-level ``AND`` only; anything else, e.g. ``OR``, ``NOT``, ``lower()``,
numbers, contributes no clause — a weaker but still exact filter):

* ``field = 'lit'`` (either side), ``field IN ('a', 'b', ...)`` (string items only) and
  ``field LIKE 'pattern'`` for the shapes ``'x'``, ``'x%'``, ``'%x'``, ``'%x%'`` (no ``_`` or
  ``\\``), on any field path; ``starts_with(field, 'x')``, ``ends_with(field, 'x')`` and
  ``contains(field, 'x')`` as the LIKE shapes they equal.

Per format (the reason each rule is exact):

* ``json`` — escape ``\\``. A JSON string is written either literally, between quotes, or
  with at least one backslash escape (``\\"``, ``\\/``, ``\\u00e9``, ...). So a line without
  any backslash holding a string value ``v`` contains ``"v"`` verbatim (its UTF-8 bytes). The
  needle of ``= 'v'`` is ``"v"`` (quotes included: more selective), of ``LIKE 'x%'`` it is
  ``"x``, of ``'%x'`` ``x"``, of ``'%x%'`` ``x``. Literals whose JSON encoding itself needs a
  backslash (quote, backslash, control characters) are not pushed down. Invalid UTF-8 in a
  line is read as U+FFFD (:mod:`agent.ingest.records`): every other character of a value is
  still its own bytes in the line, so only literals holding U+FFFD are not pushed down.
* ``nginx`` / ``apache`` (:class:`~agent.ingest.formats.AccessLogParser`) — escape ``%``. Every
string
  field of an access-log record is a substring of the line, except where the parser decodes:
  ``%XX`` (path and query: only when the line has a ``%``), ``+`` to space (query), and
  ``\\"`` / ``\\x22`` / ``\\\\`` (quoted fields). Literals are pushed down only when they are
  printable ASCII without space, ``"``, ``\\``, ``%`` or ``+``: then a decoded value equal to
  the literal was written verbatim unless the line has a ``%`` (each other decoding produces
  a space, quote or backslash the literal does not have; invalid UTF-8 never turns into
  ASCII). For a query-string parameter (``query.name = 'v'``) the needle is ``name=v``, and
  there ``v`` may hold spaces: form decoding turns ``+`` into a space, and a request target
  holds no raw space, so in a line without ``%`` the value was written with ``+`` for each
  space (``query.dir = 'Video Games'`` → ``dir=Video+Games``).
* other formats (syslog derives ``facility_name`` from a number, raw lines are whole): no
  pushdown.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from agent.ql import nodes as n
from agent.ql.compiler import like_plan

#: formats with pushdown rules and each one's escape byte
ESCAPES = {"json": b"\\", "nginx": b"%", "apache": b"%"}
_ACCESS_BAD = frozenset('"\\%+ ')


@dataclass(frozen=True)
class Needles:
    """Clauses (each: a line must contain one of its needles) and the always-parse byte."""

    clauses: tuple[tuple[bytes, ...], ...]
    escape: bytes

    def may_match(self, line: bytes) -> bool:
        """False only when ``line`` cannot match (the reference the fast filters must equal)."""
        if self.escape in line:
            return True
        return all(any(x in line for x in clause) for clause in self.clauses)


def line_needles(where: n.Node | None, fmt: str) -> Needles | None:
    """The pushdown of ``where`` for lines of format ``fmt`` (see module docstring)."""
    escape = ESCAPES.get(fmt)
    if where is None or escape is None:
        return None
    clauses: list[tuple[bytes, ...]] = []
    for conjunct in _conjuncts(where):
        clause = _clause(conjunct, fmt)
        if clause and clause not in clauses:
            clauses.append(clause)
    return Needles(tuple(clauses), escape) if clauses else None


def _conjuncts(node: n.Node) -> list[n.Node]:
    if isinstance(node, n.Binary) and node.op == "AND":
        return _conjuncts(node.left) + _conjuncts(node.right)
    return [node]


def _clause(node: n.Node, fmt: str) -> tuple[bytes, ...] | None:
    """Alternatives one of which a line matching ``node`` contains (None: no clause)."""
    if isinstance(node, n.Binary) and node.op == "=":
        for f, lit in ((node.left, node.right), (node.right, node.left)):
            if isinstance(f, n.Field) and isinstance(lit, n.Literal) and type(lit.value) is str:
                needle = _needle(f.path, "eq", lit.value, fmt)
                return None if needle is None else (needle,)
        return None
    if isinstance(node, n.InList) and not node.negated and isinstance(node.expr, n.Field):
        items = node.items
        if not items or not all(isinstance(i, n.Literal) and type(i.value) is str for i in items):
            return None
        out = []
        for item in items:
            assert isinstance(item, n.Literal)
            needle = _needle(node.expr.path, "eq", item.value, fmt)
            if needle is None:
                return None
            if needle not in out:
                out.append(needle)
        return tuple(out)
    if (
        isinstance(node, n.Match)
        and node.op == "LIKE"
        and not node.negated
        and isinstance(node.expr, n.Field)
        and isinstance(node.pattern, n.Literal)
        and type(node.pattern.value) is str
    ):
        kind, arg = like_plan(node.pattern.value)
        if kind == "call" or not arg:
            return None
        needle = _needle(node.expr.path, kind, arg, fmt)
        return None if needle is None else (needle,)
    if (
        isinstance(node, n.Call)
        and node.name in _STRING_TESTS
        and len(node.args) == 2
        and isinstance(node.args[0], n.Field)
        and isinstance(node.args[1], n.Literal)
        and type(node.args[1].value) is str
        and node.args[1].value
    ):
        # starts_with(f, 'x') is TRUE exactly when f LIKE 'x%' is (and so on): the same needle
        needle = _needle(node.args[0].path, _STRING_TESTS[node.name], node.args[1].value, fmt)
        return None if needle is None else (needle,)
    return None


_STRING_TESTS = {"starts_with": "prefix", "ends_with": "suffix", "contains": "contains"}


def _needle(path: tuple[str, ...], kind: str, text: str, fmt: str) -> bytes | None:
    """The needle of ``path <kind> text`` (kind: eq, prefix, suffix, contains) or None."""
    if "\ufffd" in text:
        # U+FFFD is what an invalid byte decodes to: a line holding a bad byte (not these
        # UTF-8 bytes) can match, so no byte needle implies the value
        return None
    if fmt == "json":
        enc = orjson.dumps(text)
        if b"\\" in enc:
            return None
        body = enc[1:-1]
        return {
            "eq": enc,
            "prefix": b'"' + body,
            "suffix": body + b'"',
            "contains": body,
        }[kind]
    if not text or not text.isascii() or not text.isprintable():
        return None
    if len(path) == 2 and path[0] == "query" and kind in ("eq", "prefix"):
        # A query value is form-decoded ('+' is a space): in a line without '%', a value with
        # spaces was written with '+' in their place (a request target holds no raw space).
        name = path[1]
        plain = name.isascii() and name.isprintable() and "=" not in name and "&" not in name
        if name and plain and not _ACCESS_BAD.intersection(name):
            if not _ACCESS_BAD.intersection(text.replace(" ", "")):
                return (name + "=" + text.replace(" ", "+")).encode("ascii")
            return None
    if _ACCESS_BAD.intersection(text):
        return None
    return text.encode("ascii")
