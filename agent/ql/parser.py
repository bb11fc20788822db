"""The ELF QL parser: recursive descent from tokens to a :class:`~agent.ql.nodes.Query`.

Contract: :func:`parse` returns the syntax tree of one query or raises
:class:`~agent.ql.errors.QLError` at the first token that does not fit, saying what was
expected there (``"line 3, column 1: expected ',', WHERE, GROUP BY, ... or end of query, got
'FORM'"``). Syntax only: names, types and aggregates are checked by ``agent.ql.checker``.
Grammar (EBNF, see docs/ql.md)::

    query     = SELECT item {"," item} FROM inputs [WHERE expr] [GROUP BY expr {"," expr}]
                [HAVING expr] [ORDER BY order {"," order}] [LIMIT int]
                {WINDOW (dur | SESSION "(" dur ")") [EVERY dur] | MODE (SYNC | ASYNC)
                 | PARTITIONS int | EMIT (FINAL | CHANGES)} [";"]
    item      = expr [AS name]              inputs = "*" | name {"," name}
    order     = expr [ASC | DESC]           dur    = number [unit]
    expr      = and {OR and}                and    = not {AND not}
    not       = NOT not | pred
    pred      = sum [cmp sum | IS [NOT] NULL | [NOT] IN "(" expr {"," expr} ")"
                     | [NOT] (LIKE | RLIKE | REGEXP) sum | [NOT] BETWEEN sum AND sum]
    sum       = product {("+" | "-") product}
    product   = unary {("*" | "/" | "%") unary}
    unary     = "-" unary | postfix         postfix = primary {"[" expr "]"}
    primary   = number | string | TRUE | FALSE | NULL | "(" expr ")"
              | name "(" [ "*" | [DISTINCT] expr {"," expr} ] ")" | name {"." name}
    EMIT, FINAL and CHANGES are not keywords (a field may be named emit): an identifier EMIT
    where a clause may start is the EMIT clause (no expression continues with an identifier).
    approx_percentile's second argument may be ARRAY "[" [expr {"," expr}] "]" (a Call named
    "array"; ARRAY is not a keyword, so a field named array stays a field elsewhere)
"""

from __future__ import annotations

from typing import NoReturn

from agent.ql import nodes as n
from agent.ql.errors import QLError
from agent.ql.lexer import Token, tokenize

_CMP = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
# clause keyword -> how "expected" names it, in query order
_CLAUSES = (
    ("WHERE", "WHERE"),
    ("GROUP", "GROUP BY"),
    ("HAVING", "HAVING"),
    ("ORDER", "ORDER BY"),
    ("LIMIT", "LIMIT"),
    ("WINDOW", "WINDOW"),
    ("MODE", "MODE"),
    ("PARTITIONS", "PARTITIONS"),
    ("EMIT", "EMIT"),
)
EMITS = ("FINAL", "CHANGES")
COUNT_WINDOWS_REFUSED = (
    "expected a duration: count windows (WINDOW n ROWS) are not supported - epochs are "
    "intervals of event time, and a window of n rows per key has no epoch it ends in "
    "(docs/ql.md, Known limits); use a time WINDOW, or WINDOW SESSION(gap)"
)
MAX_DEPTH = 50  # nested (), NOT, unary minus: ~10 Python frames per level
MAX_TREE_DEPTH = 200  # operator chains: every later stage recurses over the tree


def parse(text: str) -> n.Query:
    """Parse one query (see module docstring)."""
    return _Parser(tokenize(text)).query()


class _Parser:
    """Recursive descent over a token list."""

    def __init__(self, tokens: list[Token]) -> None:
        self.toks = tokens
        self.i = 0
        self.depth = 0

    # ---- token helpers --------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.toks[self.i]

    def advance(self) -> Token:
        t = self.toks[self.i]
        if t.kind != "EOF":
            self.i += 1
        return t

    def is_kw(self, *words: str) -> bool:
        return self.tok.kind == "KEYWORD" and self.tok.value in words

    def is_op(self, *ops: str) -> bool:
        return self.tok.kind == "OP" and self.tok.value in ops

    def accept_kw(self, word: str) -> bool:
        if self.is_kw(word):
            self.i += 1
            return True
        return False

    def accept_op(self, op: str) -> bool:
        if self.is_op(op):
            self.i += 1
            return True
        return False

    def fail(self, expected: str, tok: Token | None = None) -> NoReturn:
        t = tok or self.tok
        raise QLError(t.line, t.column, f"expected {expected}, got {t.describe()}")

    def expect_kw(self, word: str, expected: str | None = None) -> Token:
        if not self.is_kw(word):
            self.fail(expected or word)
        return self.advance()

    def expect_op(self, op: str, expected: str | None = None) -> Token:
        if not self.is_op(op):
            self.fail(expected or repr(op))
        return self.advance()

    # ---- clauses --------------------------------------------------------------------------
    def query(self) -> n.Query:
        pos: dict[str, tuple[int, int]] = {}
        self.expect_kw("SELECT", "SELECT at the start of the query")
        items = [self.select_item()]
        while self.accept_op(","):
            items.append(self.select_item())
        if not self.is_kw("FROM"):
            self.fail("',' or FROM")
        self.advance()
        inputs = self.inputs()
        where = having = None
        group: list[n.Node] = []
        order: list[n.OrderItem] = []
        limit = partitions = None
        window = mode = emit = None
        done = 0  # clauses before _CLAUSES[done] are no longer allowed
        trailing_seen: set[str] = set()
        while True:
            allowed = [kw for kw, _ in _CLAUSES[done:] if kw not in trailing_seen]
            t = self.tok
            if (t.kind == "KEYWORD" and t.value in allowed) or self.emit_next(allowed):
                kw = str(t.value).upper()
                pos[kw] = (t.line, t.column)
                self.advance()
                idx = [c for c, _ in _CLAUSES].index(kw)
                if kw == "WHERE":
                    where = self.expr()
                elif kw == "GROUP":
                    self.expect_kw("BY", "BY after GROUP")
                    group.append(self.expr())
                    while self.accept_op(","):
                        group.append(self.expr())
                elif kw == "HAVING":
                    having = self.expr()
                elif kw == "ORDER":
                    self.expect_kw("BY", "BY after ORDER")
                    order.append(self.order_item())
                    while self.accept_op(","):
                        order.append(self.order_item())
                elif kw == "LIMIT":
                    limit = self.positive_int("LIMIT")
                elif kw == "WINDOW":
                    window = self.window(t)
                elif kw == "MODE":
                    if not self.is_kw("SYNC", "ASYNC"):
                        self.fail("SYNC or ASYNC after MODE")
                    mode = self.advance().value
                elif kw == "EMIT":
                    emit = self.emit()
                else:
                    partitions = self.positive_int("PARTITIONS")
                if idx >= 5:  # WINDOW, MODE, PARTITIONS, EMIT: any order, once each
                    trailing_seen.add(kw)
                    done = max(done, 5)
                else:
                    done = idx + 1
                continue
            if self.accept_op(";") or t.kind == "EOF":
                break
            names = [label for kw, label in _CLAUSES[done:] if kw not in trailing_seen]
            if done in (0, 2, 4):  # after FROM, GROUP BY, ORDER BY lists: another item
                names.insert(0, "','")
            self.fail(", ".join([*names, "';'"]) + " or end of query")
        if self.tok.kind != "EOF":
            self.fail("end of query after ';'")
        return n.Query(
            select=tuple(items),
            inputs=inputs,
            where=where,
            group_by=tuple(group),
            having=having,
            order_by=tuple(order),
            limit=limit,
            window=window,
            mode=mode,
            partitions=partitions,
            emit=emit,
            positions=pos,
        )

    def emit_next(self, allowed: list[str]) -> bool:
        """The identifier EMIT starts the EMIT clause here (it is no keyword: module doc)."""
        t = self.tok
        return "EMIT" in allowed and t.kind == "IDENT" and str(t.value).upper() == "EMIT"

    def emit(self) -> str:
        t = self.tok
        word = str(t.value).upper() if t.kind in ("IDENT", "KEYWORD") else ""
        if word not in EMITS:
            self.fail("FINAL or CHANGES after EMIT")
        self.advance()
        return word

    def select_item(self) -> n.SelectItem:
        if self.is_op("*"):
            self.fail("an expression (SELECT * is not supported: name the columns)")
        expr = self.expr()
        alias = None
        if self.accept_kw("AS"):
            if self.tok.kind != "IDENT":
                self.fail("a column name after AS")
            alias = self.advance().value
        return n.SelectItem(expr, alias)

    def inputs(self) -> tuple[str, ...]:
        if self.accept_op("*"):
            return ()
        names = [self.input_name()]
        while self.is_op(",") and self.toks[self.i + 1].kind in ("IDENT", "STRING"):
            self.advance()
            names.append(self.input_name())
        return tuple(names)

    def input_name(self) -> str:
        t = self.tok
        if t.kind == "STRING":
            self.advance()
            if not t.value:
                self.fail("a non-empty input name", t)
            return t.value
        if t.kind != "IDENT":
            self.fail("an input name or '*' after FROM")
        parts = [self.advance().value]
        while self.is_op(".") and self.toks[self.i + 1].kind == "IDENT":
            self.advance()
            parts.append(self.advance().value)
        return ".".join(parts)

    def order_item(self) -> n.OrderItem:
        expr = self.expr()
        if self.accept_kw("DESC"):
            return n.OrderItem(expr, True)
        self.accept_kw("ASC")
        return n.OrderItem(expr, False)

    def positive_int(self, clause: str) -> int:
        t = self.tok
        if t.kind != "NUMBER" or not isinstance(t.value, int) or t.value < 1:
            self.fail(f"a positive integer after {clause}")
        self.advance()
        return int(t.value)

    def window(self, at: Token) -> n.Window:
        t, nxt = self.tok, self.toks[min(self.i + 1, len(self.toks) - 1)]
        if t.kind == "IDENT" and t.value.upper() == "SESSION" and self.is_op_at(self.i + 1, "("):
            return self.session_window(at)
        if t.kind == "NUMBER" and nxt.kind == "IDENT" and nxt.value.upper() in ("ROW", "ROWS"):
            raise QLError(nxt.line, nxt.column, COUNT_WINDOWS_REFUSED)
        size = self.duration("WINDOW")
        slide = self.duration("EVERY") if self.accept_kw("EVERY") else None
        return n.Window(size, slide, at.line, at.column)

    def session_window(self, at: Token) -> n.Window:
        """``SESSION "(" gap ")" [EVERY step]`` (``SESSION`` is not a keyword: only before
        ``(`` here); ``step`` (the epoch length, default the gap) is kept as ``slide``."""
        self.advance()  # SESSION
        self.advance()  # "("
        gap = self.duration("SESSION(")
        self.expect_op(")", "')' after the SESSION gap")
        step = self.duration("EVERY") if self.accept_kw("EVERY") else None  # the epoch length
        return n.Window(gap, step, at.line, at.column, session=True)

    def duration(self, clause: str) -> float:
        t = self.tok
        if t.kind != "NUMBER" or t.value <= 0:
            self.fail(f"a positive duration after {clause} (e.g. 30 s, 5 min)")
        self.advance()
        unit = 1.0
        if self.tok.kind == "IDENT":
            u = self.tok.value.lower()
            if u not in UNITS:
                self.fail("a time unit (ms, s, min, h, d)")
            unit = UNITS[u]
            self.advance()
        return float(t.value) * unit

    # ---- expressions ----------------------------------------------------------------------
    def expr(self) -> n.Node:
        start = self.tok
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self.fail(f"an expression nested at most {MAX_DEPTH} deep")
        try:
            node = self.or_expr()
        finally:
            self.depth -= 1
        if self.depth == 0 and n.depth(node) > MAX_TREE_DEPTH:
            raise QLError(
                start.line,
                start.column,
                f"expected an expression nested at most {MAX_TREE_DEPTH} deep",
            )
        return node

    def or_expr(self) -> n.Node:
        left = self.and_expr()
        while self.is_kw("OR"):
            t = self.advance()
            left = n.Binary("OR", left, self.and_expr(), line=t.line, column=t.column)
        return left

    def and_expr(self) -> n.Node:
        left = self.not_expr()
        while self.is_kw("AND"):
            t = self.advance()
            left = n.Binary("AND", left, self.not_expr(), line=t.line, column=t.column)
        return left

    def not_expr(self) -> n.Node:
        if self.is_kw("NOT"):
            t = self.advance()
            self.depth += 1
            if self.depth > MAX_DEPTH:
                self.fail(f"an expression nested at most {MAX_DEPTH} deep")
            try:
                return n.Unary("NOT", self.not_expr(), line=t.line, column=t.column)
            finally:
                self.depth -= 1
        return self.predicate()

    def predicate(self) -> n.Node:
        left = self.additive()
        t = self.tok
        where = {"line": t.line, "column": t.column}
        if t.kind == "OP" and t.value in _CMP:
            self.advance()
            return n.Binary(_CMP[t.value], left, self.additive(), **where)
        if self.accept_kw("IS"):
            negated = self.accept_kw("NOT")
            self.expect_kw("NULL", "NULL or NOT NULL after IS")
            return n.IsNull(left, negated, **where)
        negated = False
        if self.is_kw("NOT"):
            nxt = self.toks[self.i + 1]
            if not (
                nxt.kind == "KEYWORD" and nxt.value in ("IN", "LIKE", "RLIKE", "REGEXP", "BETWEEN")
            ):
                self.advance()
                self.fail("IN, LIKE, RLIKE, REGEXP or BETWEEN after NOT")
            self.advance()
            negated = True
        if self.accept_kw("IN"):
            self.expect_op("(", "'(' after IN")
            items = [self.expr()]
            while self.accept_op(","):
                items.append(self.expr())
            self.expect_op(")", "',' or ')' in the IN list")
            return n.InList(left, tuple(items), negated, **where)
        if self.is_kw("LIKE", "RLIKE", "REGEXP"):
            op = self.advance().value
            op = "RLIKE" if op == "REGEXP" else op
            return n.Match(op, left, self.additive(), negated, **where)
        if self.accept_kw("BETWEEN"):
            low = self.additive()
            self.expect_kw("AND", "AND in BETWEEN ... AND ...")
            return n.Between(left, low, self.additive(), negated, **where)
        return left

    def additive(self) -> n.Node:
        left = self.multiplicative()
        while self.is_op("+", "-"):
            t = self.advance()
            left = n.Binary(t.value, left, self.multiplicative(), line=t.line, column=t.column)
        return left

    def multiplicative(self) -> n.Node:
        left = self.unary()
        while self.is_op("*", "/", "%"):
            t = self.advance()
            left = n.Binary(t.value, left, self.unary(), line=t.line, column=t.column)
        return left

    def unary(self) -> n.Node:
        if self.is_op("-"):
            t = self.advance()
            nxt = self.tok
            if nxt.kind == "NUMBER" and not self.is_op_at(self.i + 1, "["):
                self.advance()
                return n.Literal(-nxt.value, line=t.line, column=t.column)
            self.depth += 1
            if self.depth > MAX_DEPTH:
                self.fail(f"an expression nested at most {MAX_DEPTH} deep")
            try:
                return n.Unary("-", self.unary(), line=t.line, column=t.column)
            finally:
                self.depth -= 1
        return self.postfix()

    def is_op_at(self, i: int, op: str) -> bool:
        t = self.toks[min(i, len(self.toks) - 1)]
        return t.kind == "OP" and t.value == op

    def postfix(self) -> n.Node:
        node = self.primary()
        while self.is_op("["):
            t = self.advance()
            index = self.expr()
            self.expect_op("]", "']' after the index")
            node = n.Index(node, index, line=t.line, column=t.column)
        return node

    def primary(self) -> n.Node:
        t = self.tok
        where = {"line": t.line, "column": t.column}
        if t.kind == "NUMBER":
            self.advance()
            return n.Literal(t.value, **where)
        if t.kind == "STRING":
            self.advance()
            return n.Literal(t.value, **where)
        if t.kind == "KEYWORD" and t.value in ("TRUE", "FALSE", "NULL"):
            self.advance()
            return n.Literal({"TRUE": True, "FALSE": False, "NULL": None}[t.value], **where)
        if self.accept_op("("):
            inner = self.expr()
            self.expect_op(")", "')'")
            return inner
        if t.kind == "KEYWORD" and t.value == "DISTINCT" and self.is_op_at(self.i + 1, "("):
            self.advance()
            return self.call(Token("IDENT", "distinct", t.line, t.column))  # distinct(x)
        if t.kind == "KEYWORD" and t.value == "CASE":
            return self.case()
        if t.kind == "IDENT":
            self.advance()
            if t.value.lower() == "cast" and self.is_op("("):
                return self.cast(t)
            if self.is_op("("):
                return self.call(t)
            path = [t.value]
            while self.is_op("."):
                self.advance()
                if self.tok.kind != "IDENT":
                    self.fail("a field name after '.'")
                path.append(self.advance().value)
            return n.Field(tuple(path), **where)
        self.fail("an expression (a field, literal, function call or '(')")

    def array_next(self, call: str, position: int) -> bool:
        """An ``ARRAY[...]`` of percentages comes next (approx_percentile's 2nd argument)."""
        t = self.tok
        return (
            call == "approx_percentile"
            and position == 1
            and t.kind == "IDENT"
            and t.value.upper() == "ARRAY"
            and self.is_op_at(self.i + 1, "[")
        )

    def array(self) -> n.Node:
        t = self.advance()
        self.advance()  # "["
        items: list[n.Node] = []
        if not self.is_op("]"):
            items.append(self.expr())
            while self.accept_op(","):
                items.append(self.expr())
        self.expect_op("]", "',' or ']' in ARRAY[...]")
        return n.Call("array", tuple(items), line=t.line, column=t.column)

    def call(self, name_tok: Token) -> n.Node:
        self.advance()  # "("
        name = name_tok.value.lower()
        where = {"line": name_tok.line, "column": name_tok.column}
        if self.is_op("*"):
            star = self.advance()
            self.expect_op(")", "')' after '*'")
            return n.Call(name, (n.Star(line=star.line, column=star.column),), **where)
        distinct = self.accept_kw("DISTINCT")
        args: list[n.Node] = []
        if not self.is_op(")"):
            args.append(self.expr())
            while self.accept_op(","):
                args.append(self.array() if self.array_next(name, len(args)) else self.expr())
        self.expect_op(")", "',' or ')' in the argument list")
        return n.Call(name, tuple(args), distinct, **where)

    def case(self) -> n.Node:
        """``CASE [operand] WHEN w THEN r { WHEN w THEN r } [ELSE e] END``."""
        t = self.advance()
        if self.is_kw("END", "THEN", "ELSE"):
            self.fail("WHEN in CASE")
        operand = None if self.is_kw("WHEN") else self.expr()
        whens: list[n.Node] = []
        results: list[n.Node] = []
        if not self.is_kw("WHEN"):
            self.fail("WHEN in CASE")
        while self.accept_kw("WHEN"):
            whens.append(self.expr())
            self.expect_kw("THEN", "THEN after the WHEN condition")
            results.append(self.expr())
        default = self.expr() if self.accept_kw("ELSE") else None
        self.expect_kw("END", "WHEN, ELSE or END in CASE")
        return n.Case(operand, tuple(whens), tuple(results), default, line=t.line, column=t.column)

    def cast(self, name_tok: Token) -> n.Node:
        """``CAST(expr AS type)`` (``cast`` is not a keyword: a field may be named cast)."""
        self.advance()  # "("
        expr = self.expr()
        self.expect_kw("AS", "AS in CAST(x AS type)")
        t = self.tok
        canonical = n.CAST_TYPES.get(str(t.value).upper()) if t.kind == "IDENT" else None
        if canonical is None:
            self.fail("a type after AS (BIGINT, DOUBLE, VARCHAR, BOOLEAN or TIMESTAMP)")
        self.advance()
        self.expect_op(")", "')' after the CAST type")
        return n.Cast(expr, canonical, line=name_tok.line, column=name_tok.column)
