"""ELF QL: a HiveQL-like query per job, compiled into a per-record pipeline.

``compile_query(text) -> CompiledQuery`` (spec fields, ``map``, ``rows``); every error is a
:class:`QLError` with ``line``/``column``. Modules: ``lexer`` (tokens), ``nodes`` (syntax
tree, ``to_sql``), ``parser`` (recursive descent), ``checker`` (names and types),
``functions`` (scalar functions, aggregates), ``compiler`` (closures, per-record ``map``),
``keys`` (GROUP BY values as CBT keys), ``rows`` (master-side rows), ``query`` (the entry
point). See docs/ql.md.
"""

from agent.ql.errors import QLError
from agent.ql.parser import parse
from agent.ql.query import CompiledQuery, compile_query

__all__ = ["CompiledQuery", "QLError", "compile_query", "parse"]
