"""The one error ELF QL raises: :class:`QLError`, with the position it refers to.

Contract: every syntax, type or semantic error in a query is a ``QLError`` (a ``ValueError``
and an :class:`~agent.errors.AgentError` with no HTTP status) whose ``line`` and ``column``
(1-based) point into the query text and whose message reads ``"line L, column C: <what was
expected>, got <what came>"``. Nothing else escapes the lexer, parser, checker or compiler for
any input text.
"""

from __future__ import annotations

from agent.errors import AgentError


class QLError(AgentError, ValueError):
    """A query error at ``line``/``column`` (1-based); ``detail`` is the message without the
    position prefix."""

    def __init__(self, line: int, column: int, detail: str) -> None:
        super().__init__(f"line {line}, column {column}: {detail}")
        self.line = line
        self.column = column
        self.detail = detail
