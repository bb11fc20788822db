"""Which result columns of a job are sketch estimates, and their documented error: the
dashboard shows them marked (≈) and formatted by kind.

Contract: :func:`estimate_columns` takes a job spec (a dict as the job table holds it) and
returns ``{column: {"kind", "error", ...}}`` for every output column of an ELF QL job
(``job_class`` ``ql``) whose expression holds a sketch aggregate (docs/ql.md, "Sketch
aggregates"); ``kind`` is the outermost such aggregate's when the column is that aggregate
itself, else ``"derived"`` (an expression over an estimate):

* ``"percentiles"`` (``approx_percentile``): ``ranks`` (the percentages, in order), ``array``
  (a list value, else one number); error: KLL's rank error for its ``k`` (99 % confidence);
* ``"quantiles"`` (``approx_quantiles``): ``ranks`` 0, 1/n, …, 1;
* ``"distinct"`` (``approx_distinct``): HLL's relative standard error for its ``lg_k``;
* ``"top_k"`` (``approx_top_k``): a list of ``[item, count]``, counts exact while a group has
  few distinct items (docs/ql.md).

Any other job, or a query that does not compile (it could not be running), gives ``{}``.
Compiled queries are cached (:data:`CACHE` texts), so a picture refresh costs one dict
lookup per job; nothing here runs on records.
"""

from __future__ import annotations

import functools
from typing import Any

from agent.ql import QLError
from agent.ql import nodes as n
from agent.ql.checker import analyze
from agent.ql.parser import parse

CACHE = 64
_KINDS = {
    "approx_percentile": "percentiles",
    "approx_quantiles": "quantiles",
    "approx_distinct": "distinct",
    "approx_top_k": "top_k",
}


def estimate_columns(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The estimate columns of ``spec`` (see the module contract)."""
    if spec.get("job_class") != "ql":
        return {}
    text = (spec.get("params") or {}).get("query")
    return dict(_of_query(text)) if isinstance(text, str) else {}


@functools.lru_cache(maxsize=CACHE)
def _of_query(text: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    try:
        an = analyze(parse(text))
    except QLError:
        return ()
    by_call = {a.call: a.params for a in an.aggregates}  # equal calls share one aggregate
    out = []
    for name, expr in zip(an.columns, an.select, strict=True):
        calls = [c for c in n.walk(expr) if isinstance(c, n.Call) and c.name in _KINDS]
        if not calls:
            continue
        call = calls[0]
        info = _describe(call.name, by_call.get(call) or {})
        if call is not expr:
            info = {"kind": "derived", "error": f"computed from {info['error']}"}
        out.append((name, info))
    return tuple(out)


def _describe(name: str, params: dict[str, Any]) -> dict[str, Any]:
    from cbt.sketches import DEFAULT_KLL_K, DEFAULT_LG_K, hll_rse, kll_rank_error

    kind = _KINDS[name]
    if kind in ("percentiles", "quantiles"):
        k = int(params.get("k", DEFAULT_KLL_K))
        return {
            "kind": kind,
            "ranks": list(params.get("ranks") or []),
            "array": bool(params.get("array")),
            "error": f"KLL sketch (k {k}): rank error ≤ {100 * kll_rank_error(k):.2f} % "
            "(99 % confidence)",
        }
    if kind == "distinct":
        lg_k = int(params.get("lg_k", DEFAULT_LG_K))
        return {
            "kind": kind,
            "error": f"HLL sketch (lg_k {lg_k}): relative standard error "
            f"{100 * hll_rse(lg_k):.2f} %",
        }
    return {
        "kind": kind,
        "error": "frequent-items sketch: counts exact while a group has few distinct items "
        "(docs/ql.md)",
    }
