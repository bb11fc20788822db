"""The ELF QL syntax tree: frozen dataclasses, each with its source position and ``to_sql()``.

Contract: expression nodes compare equal when they mean the same expression, whatever their
positions (``line``/``column`` are excluded from equality), so "is this SELECT item a GROUP BY
expression" is ``==``. ``to_sql()`` prints a node back as query text that parses to an equal
node (fully parenthesized, keywords upper-case), which is also how an unnamed output column is
named (``count(*)``, ``lower(user.name)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Node:
    """Base of expression nodes."""

    line: int = field(default=0, compare=False, kw_only=True)
    column: int = field(default=0, compare=False, kw_only=True)

    def to_sql(self) -> str:
        raise NotImplementedError

    def children(self) -> tuple[Node, ...]:
        return ()


def quote_string(s: str) -> str:
    """A string literal that lexes back to ``s``."""
    body = s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    body = body.replace("\r", "\\r").replace("\t", "\\t").replace("\0", "\\0")
    return "'" + body + "'"


def quote_name(name: str) -> str:
    """An identifier as query text (backquoted unless it is a plain non-keyword name)."""
    from agent.ql.lexer import KEYWORDS

    plain = name and (name[0].isalpha() or name[0] == "_")
    plain = plain and all(c.isalnum() or c == "_" for c in name)
    if plain and name.upper() not in KEYWORDS:
        return name
    return "`" + name + "`"


@dataclass(frozen=True)
class Literal(Node):
    """A constant: str, int, float, bool or None (NULL)."""

    value: Any = None

    def __eq__(self, other: object) -> bool:
        # 1 and 1.0 and True must stay distinct literals
        return (
            isinstance(other, Literal)
            and type(self.value) is type(other.value)
            and self.value == other.value
        )

    def __hash__(self) -> int:
        return hash((type(self.value), self.value))

    def to_sql(self) -> str:
        v = self.value
        if v is None:
            return "NULL"
        if v is True:
            return "TRUE"
        if v is False:
            return "FALSE"
        if isinstance(v, str):
            return quote_string(v)
        if isinstance(v, float):
            return repr(v)
        return str(v)


@dataclass(frozen=True)
class Field(Node):
    """A record field; ``path`` of several names reads nested JSON objects."""

    path: tuple[str, ...] = ()

    def to_sql(self) -> str:
        return ".".join(quote_name(p) for p in self.path)


@dataclass(frozen=True)
class Star(Node):
    """``*`` (only inside ``count(*)``)."""

    def to_sql(self) -> str:
        return "*"


@dataclass(frozen=True)
class Unary(Node):
    """``NOT x`` or ``-x``."""

    op: str = ""
    operand: Node = field(default_factory=Star)

    def to_sql(self) -> str:
        return f"({self.op} {self.operand.to_sql()})"  # "- -1", never the comment "--1"

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Binary(Node):
    """``left op right``: AND OR = != < <= > >= + - * / %."""

    op: str = ""
    left: Node = field(default_factory=Star)
    right: Node = field(default_factory=Star)

    def to_sql(self) -> str:
        return f"({self.left.to_sql()} {self.op} {self.right.to_sql()})"

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class InList(Node):
    """``expr [NOT] IN (items)``."""

    expr: Node = field(default_factory=Star)
    items: tuple[Node, ...] = ()
    negated: bool = False

    def to_sql(self) -> str:
        op = "NOT IN" if self.negated else "IN"
        return f"({self.expr.to_sql()} {op} ({', '.join(i.to_sql() for i in self.items)}))"

    def children(self) -> tuple[Node, ...]:
        return (self.expr, *self.items)


@dataclass(frozen=True)
class Match(Node):
    """``expr [NOT] LIKE pattern`` or ``expr [NOT] RLIKE|REGEXP pattern``."""

    op: str = "LIKE"
    expr: Node = field(default_factory=Star)
    pattern: Node = field(default_factory=Star)
    negated: bool = False

    def to_sql(self) -> str:
        op = f"NOT {self.op}" if self.negated else self.op
        return f"({self.expr.to_sql()} {op} {self.pattern.to_sql()})"

    def children(self) -> tuple[Node, ...]:
        return (self.expr, self.pattern)


@dataclass(frozen=True)
class IsNull(Node):
    """``expr IS [NOT] NULL``."""

    expr: Node = field(default_factory=Star)
    negated: bool = False

    def to_sql(self) -> str:
        return f"({self.expr.to_sql()} IS {'NOT ' if self.negated else ''}NULL)"

    def children(self) -> tuple[Node, ...]:
        return (self.expr,)


@dataclass(frozen=True)
class Between(Node):
    """``expr [NOT] BETWEEN low AND high``."""

    expr: Node = field(default_factory=Star)
    low: Node = field(default_factory=Star)
    high: Node = field(default_factory=Star)
    negated: bool = False

    def to_sql(self) -> str:
        op = "NOT BETWEEN" if self.negated else "BETWEEN"
        return f"({self.expr.to_sql()} {op} {self.low.to_sql()} AND {self.high.to_sql()})"

    def children(self) -> tuple[Node, ...]:
        return (self.expr, self.low, self.high)


@dataclass(frozen=True)
class Call(Node):
    """``name([DISTINCT] args)``; ``name`` is lower-case."""

    name: str = ""
    args: tuple[Node, ...] = ()
    distinct: bool = False

    def to_sql(self) -> str:
        inner = ", ".join(a.to_sql() for a in self.args)
        if self.name == "array":  # ARRAY[...] parses to a call named array
            return f"ARRAY[{inner}]"
        return f"{self.name}({'DISTINCT ' if self.distinct else ''}{inner})"

    def children(self) -> tuple[Node, ...]:
        return self.args


@dataclass(frozen=True)
class Index(Node):
    """``expr[index]``: an array element (0-based) or an object member."""

    expr: Node = field(default_factory=Star)
    index: Node = field(default_factory=Star)

    def to_sql(self) -> str:
        base = self.expr.to_sql()
        if not isinstance(self.expr, Field | Call | Index):
            base = f"({base})"  # "(-5)[0]", not "-5[0]" (which is -(5[0]))
        return f"{base}[{self.index.to_sql()}]"

    def children(self) -> tuple[Node, ...]:
        return (self.expr, self.index)


@dataclass(frozen=True)
class Case(Node):
    """``CASE [operand] WHEN w THEN r ... [ELSE default] END``.

    Searched form (``operand`` None): the first ``when`` that is TRUE gives its result.
    Simple form: the first ``when`` equal to ``operand`` (SQL ``=``: NULL never matches).
    No match: ``default``, or NULL without ELSE. ``whens`` and ``results`` pair up by index
    (two flat tuples, so tree rewrites that map over node tuples reach every branch)."""

    operand: Node | None = None
    whens: tuple[Node, ...] = ()
    results: tuple[Node, ...] = ()
    default: Node | None = None

    def to_sql(self) -> str:
        parts = ["CASE"]
        if self.operand is not None:
            parts.append(self.operand.to_sql())
        for w, r in zip(self.whens, self.results, strict=True):
            parts.append(f"WHEN {w.to_sql()} THEN {r.to_sql()}")
        if self.default is not None:
            parts.append(f"ELSE {self.default.to_sql()}")
        parts.append("END")
        return " ".join(parts)

    def children(self) -> tuple[Node, ...]:
        head = () if self.operand is None else (self.operand,)
        pairs = tuple(x for wr in zip(self.whens, self.results, strict=True) for x in wr)
        tail = () if self.default is None else (self.default,)
        return (*head, *pairs, *tail)


#: the type names ``CAST(x AS type)`` accepts, with their aliases
CAST_TYPES = {
    "BIGINT": "BIGINT",
    "INT": "BIGINT",
    "INTEGER": "BIGINT",
    "DOUBLE": "DOUBLE",
    "FLOAT": "DOUBLE",
    "VARCHAR": "VARCHAR",
    "STRING": "VARCHAR",
    "TEXT": "VARCHAR",
    "BOOLEAN": "BOOLEAN",
    "BOOL": "BOOLEAN",
    "TIMESTAMP": "TIMESTAMP",
}


@dataclass(frozen=True)
class Cast(Node):
    """``CAST(expr AS type)``; ``type`` is a canonical name of :data:`CAST_TYPES`."""

    expr: Node = field(default_factory=Star)
    type: str = "VARCHAR"

    def to_sql(self) -> str:
        return f"CAST({self.expr.to_sql()} AS {self.type})"

    def children(self) -> tuple[Node, ...]:
        return (self.expr,)


@dataclass(frozen=True)
class SelectItem:
    """One output column: ``expr [AS alias]``; ``name`` is the alias or the expression text."""

    expr: Node
    alias: str | None = None

    @property
    def name(self) -> str:
        return self.alias if self.alias is not None else self.expr.to_sql()

    def to_sql(self) -> str:
        text = self.expr.to_sql()
        return text if self.alias is None else f"{text} AS {quote_name(self.alias)}"


@dataclass(frozen=True)
class OrderItem:
    """``expr [ASC|DESC]``."""

    expr: Node
    descending: bool = False

    def to_sql(self) -> str:
        return f"{self.expr.to_sql()} {'DESC' if self.descending else 'ASC'}"


@dataclass(frozen=True)
class Window:
    """``WINDOW size [EVERY slide]`` in seconds (slide None: tumbling), or ``WINDOW
    SESSION(gap) [EVERY step]`` (``session`` True, ``size`` the gap, ``slide`` the epoch
    length or None: the gap); positions for errors."""

    size: float
    slide: float | None = None
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)
    session: bool = False

    def to_sql(self) -> str:
        text = (
            f"WINDOW SESSION({_num(self.size)} s)"
            if self.session
            else f"WINDOW {_num(self.size)} s"
        )
        return text if self.slide is None else f"{text} EVERY {_num(self.slide)} s"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Query:
    """A whole query; optional clauses are None / empty."""

    select: tuple[SelectItem, ...]
    inputs: tuple[str, ...]
    where: Node | None = None
    group_by: tuple[Node, ...] = ()
    having: Node | None = None
    order_by: tuple[OrderItem, ...] = ()
    limit: int | None = None
    window: Window | None = None
    mode: str | None = None  # "SYNC" | "ASYNC"
    partitions: int | None = None
    emit: str | None = None  # "FINAL" | "CHANGES" (None: not given; the spec's default)
    positions: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False)

    def to_sql(self) -> str:
        parts = ["SELECT " + ", ".join(s.to_sql() for s in self.select)]
        parts.append("FROM " + (", ".join(quote_name(i) for i in self.inputs) or "*"))
        if self.where is not None:
            parts.append("WHERE " + self.where.to_sql())
        if self.group_by:
            parts.append("GROUP BY " + ", ".join(g.to_sql() for g in self.group_by))
        if self.having is not None:
            parts.append("HAVING " + self.having.to_sql())
        if self.order_by:
            parts.append("ORDER BY " + ", ".join(o.to_sql() for o in self.order_by))
        if self.limit is not None:
            parts.append(f"LIMIT {self.limit}")
        if self.window is not None:
            parts.append(self.window.to_sql())
        if self.mode is not None:
            parts.append(f"MODE {self.mode}")
        if self.partitions is not None:
            parts.append(f"PARTITIONS {self.partitions}")
        if self.emit is not None:
            parts.append(f"EMIT {self.emit}")
        return "\n".join(parts)


def depth(node: Node) -> int:
    """How deeply ``node`` nests (a leaf is 1), without recursion."""
    best = 0
    stack = [(node, 1)]
    while stack:
        x, d = stack.pop()
        best = max(best, d)
        stack.extend((c, d + 1) for c in x.children())
    return best


def walk(node: Node) -> list[Node]:
    """``node`` and all its descendants, pre-order."""
    out = [node]
    stack = list(reversed(node.children()))
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(reversed(n.children()))
    return out
