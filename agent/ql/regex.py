"""ELF QL regular expressions on RE2, a linear-time engine (``google-re2``, module ``re2``).

Contract: :func:`compile_regex` turns a pattern into a :class:`Regex` whose ``search`` /
``fullmatch`` take time linear in the input whatever the pattern (RE2 simulates the automaton;
it never backtracks), so a user's pattern cannot stall a worker on a pathological line the way
``(a+)+$`` stalls Python's ``re``. A pattern RE2 cannot run (backreferences, lookaround,
atomic groups, possessive quantifiers, Python-only flags) or one too large for its memory
bound raises :class:`RegexRefused` naming the pattern and RE2's reason; callers turn it into
a ``QLError`` at submission, so it never reaches an agent's record path.

Semantics kept from Python's ``re`` for the patterns both accept: leftmost-first matching
(RE2's default, like Perl and Python), group numbering and names, ``search`` vs ``fullmatch``,
``dotall`` for LIKE's ``%``/``_`` and inline flags ``(?i)``, ``(?s)``, ``(?m)``. ``\\Z`` (Python's
end of string) is rewritten to RE2's ``\\z``. Known differences (docs/ql.md): ``\\d``, ``\\w``,
``\\s`` and ``\\b`` are ASCII-only in RE2 (Python's are Unicode), and ``$`` without ``(?m)``
matches only at the very end (Python's also before a final newline).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import re2

#: RE2's per-pattern memory bound (its default): a pattern whose automaton needs more is refused
#: at compile time; matching itself allocates within this bound.
MAX_MEM = 8 << 20

# re2's pattern compiler (the analogue of re.compile; never the builtin that compiles code).
_re2_pattern = re2.compile


class RegexRefused(ValueError):
    """A pattern RE2 cannot run; ``str(exc)`` names the pattern and RE2's reason."""


class Regex:
    """A compiled RE2 pattern; ``search`` / ``fullmatch`` return a match object or None
    (``m.group(i)``, ``m.groups()`` as in ``re``); ``groups`` is the number of groups;
    ``found(text)`` / ``whole(text)`` are the boolean forms (RLIKE, LIKE), several times
    cheaper because they skip the wrapper's match objects."""

    __slots__ = ("found", "fullmatch", "groups", "pattern", "search", "whole")

    def __init__(self, pattern: str, compiled: Any) -> None:
        self.pattern = pattern
        self.groups: int = compiled.groups
        self.search = compiled.search
        self.fullmatch = compiled.fullmatch
        self.found = _boolean(compiled, _ANCHORS[0]) or (lambda s: self.search(s) is not None)
        self.whole = _boolean(compiled, _ANCHORS[1]) or (lambda s: self.fullmatch(s) is not None)


# The wrapper's search() runs a Python generator and decodes spans per call (~2.7 us); the
# pybind object it wraps answers a boolean in ~0.5 us. Both are optional: a wrapper without
# them falls back to the public methods.
_RE2_CLASS = getattr(getattr(re2, "_re2", None), "RE2", None)
_ANCHORS = (
    getattr(getattr(_RE2_CLASS, "Anchor", None), "UNANCHORED", None),
    getattr(getattr(_RE2_CLASS, "Anchor", None), "ANCHOR_BOTH", None),
)
_NO_MATCH = -1


def _boolean(compiled: Any, anchor: Any) -> Callable[[str], bool] | None:
    """``text -> bool`` on the wrapped RE2 object with ``anchor``, or None if unavailable."""
    inner = getattr(compiled, "_regexp", None)
    run = getattr(inner, "Match", None)
    if run is None or anchor is None:
        return None

    def test(text: str) -> bool:
        b = text.encode("utf-8", "surrogatepass")
        return run(anchor, b, 0, len(b))[0][0] != _NO_MATCH

    return test


def re2_spelling(pattern: str) -> str:
    """Rewrite the one Python spelling RE2 lacks but means the same: ``\\Z`` -> ``\\z``."""
    if "\\Z" not in pattern:
        return pattern
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            out.append("\\z" if nxt == "Z" else c + nxt)
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def compile_regex(pattern: str, *, dotall: bool = False) -> Regex:
    """``pattern`` compiled on RE2 (``dotall``: ``.`` matches a newline too).

    Raises :class:`RegexRefused` when RE2 cannot run it (see module docstring)."""
    options = re2.Options()
    options.dot_nl = dotall
    options.max_mem = MAX_MEM
    # RE2 logs every parse error to stderr through absl; the error is ours to report.
    options.log_errors = False
    try:
        compiled = _re2_pattern(re2_spelling(pattern), options)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        if isinstance(detail, bytes):
            detail = detail.decode("utf-8", "replace")
        raise RegexRefused(
            f"pattern {pattern!r} cannot run on RE2, the linear-time engine ELF QL uses "
            f"({detail}; no backreferences, lookaround, atomic groups or possessive "
            "quantifiers, see docs/ql.md)"
        ) from None
    return Regex(pattern, compiled)
