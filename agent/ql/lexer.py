"""The ELF QL lexer: query text to a list of :class:`Token`.

Contract: :func:`tokenize` returns the tokens of ``text`` ending with an ``EOF`` token, or
raises :class:`~agent.ql.errors.QLError` at the first character it cannot read. Token kinds:

* ``KEYWORD`` (value upper-cased; keywords are case-insensitive), ``IDENT`` (letters, digits,
  ``_``, not starting with a digit; or any text in backquotes, ```like this```, which is never
  a keyword);
* ``STRING``: ``'...'`` or ``"..."`` with backslash escapes (``\\n \\t \\r \\0 \\\\ \\' \\"``,
  ``\\uXXXX``; any other escaped character stands for itself, so ``'\\.'`` keeps the
  backslash for regular expressions) and doubled quotes (``'it''s'``);
* ``NUMBER``: ``12``, ``1.5``, ``.5``, ``1e3`` (value int or float);
* ``OP``: ``= == != <> < <= > >= + - * / % ( ) , . [ ] ;``.

``--`` starts a comment to the end of the line. Positions are 1-based line and column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.ql.errors import QLError

KEYWORDS = frozenset(
    [
        "SELECT",
        "FROM",
        "WHERE",
        "GROUP",
        "BY",
        "HAVING",
        "ORDER",
        "ASC",
        "DESC",
        "LIMIT",
        "WINDOW",
        "EVERY",
        "MODE",
        "SYNC",
        "ASYNC",
        "PARTITIONS",
        "AS",
        "AND",
        "OR",
        "NOT",
        "IN",
        "LIKE",
        "RLIKE",
        "REGEXP",
        "IS",
        "NULL",
        "TRUE",
        "FALSE",
        "BETWEEN",
        "DISTINCT",
        "CASE",
        "WHEN",
        "THEN",
        "ELSE",
        "END",
    ]
)
_OPS2 = ("==", "!=", "<>", "<=", ">=")
_OPS1 = "=<>+-*/%(),.[];"
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", "'": "'", '"': '"'}
MAX_QUERY_CHARS = 100_000
_DIGITS = frozenset("0123456789")


@dataclass(frozen=True, slots=True)
class Token:
    """One token: ``kind``, ``value`` (str, or int/float for numbers), 1-based position."""

    kind: str
    value: Any
    line: int
    column: int

    def describe(self) -> str:
        """How an error message names this token."""
        if self.kind == "EOF":
            return "end of query"
        if self.kind == "STRING":
            return f"string {self.value!r}"
        text = str(self.value)
        return repr(text if len(text) <= 40 else text[:37] + "...")


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into tokens (see module docstring)."""
    if not isinstance(text, str):
        raise QLError(1, 1, f"expected the query text as a string, got {type(text).__name__}")
    if len(text) > MAX_QUERY_CHARS:
        raise QLError(1, 1, f"query is longer than {MAX_QUERY_CHARS} characters")
    out: list[Token] = []
    i, n, line, line_start = 0, len(text), 1, 0
    while i < n:
        c = text[i]
        col = i - line_start + 1
        if c == "\n":
            i += 1
            line, line_start = line + 1, i
        elif c.isspace():
            i += 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c.isalpha() or c == "_":
            j = i + 1
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            word = text[i:j]
            up = word.upper()
            if up in KEYWORDS:
                out.append(Token("KEYWORD", up, line, col))
            else:
                out.append(Token("IDENT", word, line, col))
            i = j
        elif c == "`":
            j = text.find("`", i + 1)
            if j < 0 or "\n" in text[i:j]:
                raise QLError(line, col, "expected a closing '`' for the quoted identifier")
            if j == i + 1:
                raise QLError(line, col, "expected a name between backquotes, got ``")
            out.append(Token("IDENT", text[i + 1 : j], line, col))
            i = j + 1
        elif c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            i = _number(text, i, line, col, out)
        elif c in "'\"":
            i, line, line_start = _string(text, i, line, line_start, out)
        elif text.startswith(_OPS2, i):
            out.append(Token("OP", text[i : i + 2], line, col))
            i += 2
        elif c in _OPS1:
            out.append(Token("OP", c, line, col))
            i += 1
        else:
            raise QLError(line, col, f"unexpected character {c!r}")
    out.append(Token("EOF", "", line, n - line_start + 1))
    return out


def _number(text: str, i: int, line: int, col: int, out: list[Token]) -> int:
    n = len(text)
    j = i
    while j < n and text[j] in _DIGITS:
        j += 1
    is_float = False
    if j < n and text[j] == "." and j + 1 < n and text[j + 1] in _DIGITS:
        is_float = True
        j += 1
        while j < n and text[j] in _DIGITS:
            j += 1
    if j < n and text[j] in "eE":
        k = j + 1
        if k < n and text[k] in "+-":
            k += 1
        if k < n and text[k] in _DIGITS:
            is_float = True
            j = k
            while j < n and text[j] in _DIGITS:
                j += 1
    if j < n and (text[j].isalpha() or text[j] == "_"):
        raise QLError(line, col, f"expected a number, got {text[i : j + 1]!r}")
    raw = text[i:j]
    if is_float:
        value: int | float = float(raw)
        if value != value or value in (float("inf"), float("-inf")):
            raise QLError(line, col, f"number {raw!r} is out of range")
    else:
        if len(raw) > 30:
            raise QLError(line, col, f"integer {raw[:20]}... is too large")
        value = int(raw)
    out.append(Token("NUMBER", value, line, col))
    return j


def _string(
    text: str, i: int, line: int, line_start: int, out: list[Token]
) -> tuple[int, int, int]:
    quote = text[i]
    start_line, start_col = line, i - line_start + 1
    parts: list[str] = []
    j, n = i + 1, len(text)
    while True:
        if j >= n:
            raise QLError(start_line, start_col, f"expected a closing {quote} for the string")
        c = text[j]
        if c == quote:
            if j + 1 < n and text[j + 1] == quote:  # doubled quote
                parts.append(quote)
                j += 2
                continue
            j += 1
            break
        if c == "\\":
            if j + 1 >= n:
                raise QLError(start_line, start_col, f"expected a closing {quote} for the string")
            e = text[j + 1]
            if e == "u":
                digits = text[j + 2 : j + 6]
                if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                    col = j - line_start + 1
                    raise QLError(line, col, f"expected 4 hex digits after \\u, got {digits!r}")
                parts.append(chr(int(digits, 16)))
                j += 6
                continue
            parts.append(_ESCAPES.get(e, "\\" + e))
            if e == "\n":
                line, line_start = line + 1, j + 2
            j += 2
            continue
        if c == "\n":
            line, line_start = line + 1, j + 1
        parts.append(c)
        j += 1
    out.append(Token("STRING", "".join(parts), start_line, start_col))
    return j, line, line_start
