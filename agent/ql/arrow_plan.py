"""A compiled ELF QL query run over Arrow tables: per-chunk partial aggregates per key.

Contract: :class:`ArrowPlan` (built once per query from its
:class:`~agent.ql.checker.Analysis`) gives ``partials(table) -> (keys, states)``: for the rows
of ``table`` (one epoch's accepted rows of a chunk) the GROUP BY keys, encoded as the row path
encodes them (:mod:`agent.ql.keys`), and for each key the partial state (PAO) of the query's
CBT aggregator. Folding those states into a CBT with
:meth:`cbt.CompressedBufferTree.merge_states` gives exactly the tree the row path's per-record
``insert`` calls give (up to the rounding order of float sums, see docs/ql.md), with one
insert per group instead of one per record. WHERE, GROUP BY expressions and aggregate
arguments are evaluated by :mod:`agent.ql.arrow_eval`; the grouping is Arrow's hash group-by
(``Table.group_by().aggregate()``).

Exactness: where the row path would count a map error (a ``sum`` over strings, a composite
value the CBT refuses) or where a column cannot say exactly what each row held, ``partials``
raises :class:`~agent.ql.fallback.Unsupported` and the caller runs the chunk on the row path.

Also :func:`pair_partials`: a ``(key, value)`` table (a job class's ``map_batch``) to partial
states of any aggregator, pre-aggregated natively for ``count``, ``sum``, ``avg``, ``min`` and
``max``.

``fields``: the top-level record fields the query reads (the chunk parser's projection).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from agent.ql import keys as qkeys
from agent.ql import nodes as n
from agent.ql.arrow_eval import ArrowEval, has_nan, kind, max_abs
from agent.ql.checker import AggSpec, Analysis
from agent.ql.compiler import part_value
from agent.ql.fallback import Unsupported
from cbt import Aggregator

_INT64_LIMIT = 1 << 63
_ONLY_VALID = pc.CountOptions(mode="only_valid")
_NUMERIC_AGGS = ("sum", "avg", "min", "max")
_SET_AGGS = ("distinct", "collect_set", "approx_distinct")
#: sketches fed each group's whole list of values (Arrow's hash "list" aggregate)
_LIST_AGGS = ("approx_percentile", "approx_top_k")


def _plan_name(spec: AggSpec) -> str:
    """How a spec is computed here: its aggregate's name, or for the sketches their CBT
    aggregator's (approx_quantiles is approx_percentile at other ranks)."""
    return spec.kind.cbt if spec.kind.cbt in _LIST_AGGS else spec.kind.name


def referenced_fields(an: Analysis) -> frozenset[str]:
    """The top-level record fields a query reads (WHERE, GROUP BY, aggregate arguments)."""
    roots: list[n.Node] = list(an.group_by)
    if an.query.where is not None:
        roots.append(an.query.where)
    for spec in an.aggregates:
        roots.extend(spec.args)
    out = set()
    for root in roots:
        for x in n.walk(root):
            if isinstance(x, n.Field):
                out.add(x.path[0])
    return frozenset(out)


class ArrowPlan:
    """One query's per-chunk pre-aggregation on Arrow (see module docstring)."""

    def __init__(self, an: Analysis, agg: Aggregator) -> None:
        self.an = an
        self.agg = agg
        self.where = an.query.where
        self.group = an.group_by
        self.specs: list[AggSpec] = list(an.aggregates)
        self.fields = referenced_fields(an)
        self.composite = len(self.specs) > 1
        self.fallback_expressions = 0

    def partials(self, table: pa.Table) -> tuple[list[Any], list[Any]]:
        """``(keys, states)`` of ``table``'s rows (see module docstring)."""
        out = self._partials(table, None)
        return (out[0][1], out[0][2]) if out else ([], [])

    def partials_by_epoch(
        self, table: pa.Table, epochs: np.ndarray
    ) -> list[tuple[int, list[Any], list[Any]]]:
        """``[(epoch, keys, states)]`` of rows spanning several epochs (``epochs``: each
        row's), in one hash group-by with the epoch as an extra key; the same as
        :meth:`partials` on each epoch's rows."""
        if any(spec.kind.name == "topk" for spec in self.specs):
            return [
                (int(e), *self.partials(table.filter(pa.array(epochs == e))))
                for e in np.unique(epochs).tolist()
            ]
        return self._partials(table, pa.array(epochs, pa.int64()))

    def _partials(
        self, table: pa.Table, epochs: pa.Array | None
    ) -> list[tuple[int, list[Any], list[Any]]]:
        if table.num_rows == 0:
            return []
        if self.where is not None:
            ev = ArrowEval(table)
            mask = pc.fill_null(ev.full(ev.pred(self.where)), False)
            self.fallback_expressions += ev.fallbacks
            table = table.filter(mask)
            if epochs is not None:
                epochs = epochs.filter(mask)
            if table.num_rows == 0:
                return []
        ev = ArrowEval(table)
        key_cols = [self._key_column(ev, g) for g in self.group]
        values = [self._value_column(ev, spec) for spec in self.specs]
        self.fallback_expressions += ev.fallbacks
        keys, states, groups_epochs = self._group(key_cols, values, table.num_rows, epochs)
        if not self.composite and self.specs and self.specs[0].args:
            # one aggregate over an argument: a record whose argument is NULL makes no pair,
            # so a group none of whose records had a value has no key
            kept = [i for i, s in enumerate(states) if s is not None]
            if len(kept) < len(states):
                keys = [keys[i] for i in kept]
                states = [states[i] for i in kept]
                if groups_epochs is not None:
                    groups_epochs = [groups_epochs[i] for i in kept]
        if groups_epochs is None:
            return [(0, keys, states)]
        per: dict[int, tuple[list[Any], list[Any]]] = {}
        for e, k, st in zip(groups_epochs, keys, states, strict=True):
            slot = per.setdefault(e, ([], []))
            slot[0].append(k)
            slot[1].append(st)
        return [(e, ks, sts) for e, (ks, sts) in sorted(per.items())]

    # ---- columns --------------------------------------------------------------------------
    def _key_column(self, ev: ArrowEval, node: n.Node) -> pa.Array:
        col = ev.full(ev.value(node))
        k = kind(col)
        if k == "other":
            raise Unsupported("a GROUP BY value that is a list or an object")
        if k == "null":
            return pa.nulls(len(col), pa.int64())  # all NULL: one group, decoded below
        return col

    def _value_column(self, ev: ArrowEval, spec: AggSpec) -> pa.Array | None:
        if not spec.args:
            return None  # count(*)
        name = _plan_name(spec)
        if name == "topk":
            # folded with the aggregator's own lift/merge (see _topk_states): the row path's
            # (item, weight) values, computed by its closure
            ev.fallbacks += 1
            f = part_value(spec, ev.closures)
            assert f is not None
            return [f(r) for r in ev.rows()]  # type: ignore[return-value]
        col = ev.full(ev.value(spec.args[0]))
        k = kind(col)
        if name == "count":
            return col
        if name in _NUMERIC_AGGS:
            if k == "null":
                return col
            if k not in ("int", "float"):
                if pc.all(pc.is_null(col)).as_py():
                    return pa.nulls(len(col))
                raise Unsupported(f"{name} over non-numbers (the row path counts map errors)")
            if name in ("min", "max") and has_nan(col):
                raise Unsupported("NaN in min/max (Python's order-dependent comparison)")
            return col
        if name in _SET_AGGS:
            if k not in ("str", "int", "bool", "float", "null"):
                raise Unsupported(f"{name} over lists or objects")
            if has_nan(col):
                raise Unsupported(f"NaN in {name}")
            return col
        if name == "approx_percentile":  # numbers; NaN is skipped by KLL on both paths
            if k in ("int", "float", "null"):
                return col
            if pc.all(pc.is_null(col)).as_py():
                return pa.nulls(len(col))
            raise Unsupported(f"{name} over non-numbers (the row path counts map errors)")
        if name == "approx_top_k":
            if k not in ("str", "int", "bool", "float", "null"):
                raise Unsupported(f"{name} over lists or objects")
            return col
        raise Unsupported(f"aggregate {name}")

    # ---- grouping -------------------------------------------------------------------------
    def _group(
        self, key_cols: list[pa.Array], values: list[Any], rows: int, epochs: pa.Array | None
    ) -> tuple[list[Any], list[Any], list[int] | None]:
        cols: dict[str, pa.Array] = {}
        float_keys = set()
        for i, c in enumerate(key_cols):
            if kind(c) == "float":
                # group by the bits: Python keys tell -0.0 from 0.0 (float.hex)
                if has_nan(c):
                    raise Unsupported("NaN as a GROUP BY value")
                c = _float_bits(c)
                float_keys.add(i)
            cols[f"k{i}"] = c
        aggs: list[tuple[Any, ...]] = [([], "count_all")]
        plan: list[tuple[str, Any]] = []  # per spec: how to read its state
        for j, (spec, v) in enumerate(zip(self.specs, values, strict=True)):
            name = _plan_name(spec)
            if v is None and name != "topk":
                plan.append(("count_all", None))
                continue
            if name == "topk":
                plan.append(("topk", j))
                continue
            col = f"v{j}"
            if name in _SET_AGGS and kind(v) == "float":
                v = _float_bits(v)
                plan.append((name + "_float", col))
            elif name == "count":
                plan.append(("count", col))
            else:
                plan.append((name, col))
            if kind(v) == "null":
                v = pa.nulls(len(v), pa.int64())
            cols[col] = v
            if name == "count":
                aggs.append((col, "count", _ONLY_VALID))
            elif name in ("sum", "avg"):
                if kind(v) == "int" and max_abs(v) * len(v) >= _INT64_LIMIT:
                    raise Unsupported("an integer sum that could pass int64")
                aggs += [(col, "sum"), (col, "count", _ONLY_VALID)]
            elif name in ("min", "max"):
                aggs.append((col, name))
            elif name in _LIST_AGGS:
                aggs.append((col, "list"))  # NULLs included: dropped per group below
            else:
                aggs.append((col, "distinct", _ONLY_VALID))
        names = [f"k{i}" for i in range(len(key_cols))]
        if epochs is not None:
            cols["ep"] = epochs
            names.append("ep")
        if not names:  # no GROUP BY: one group (hash aggregates need a key: a constant)
            cols["k_"] = pa.nulls(rows, pa.int8())
            names = ["k_"]
        tab = pa.table(cols)
        grouped = tab.group_by(names, use_threads=False).aggregate(aggs)
        keys = self._keys(grouped, len(key_cols), float_keys)
        topk = {
            j: self._topk_states(j, values[j], key_cols, keys) for how, j in plan if how == "topk"
        }
        per_spec = [self._states(grouped, how, ref, topk) for how, ref in plan]
        if not self.specs:
            states = grouped.column("count_all").to_pylist()  # GROUP BY only: counts
        elif self.composite:
            states = [tuple(parts) for parts in zip(*per_spec, strict=True)]
        else:
            states = per_spec[0]
        group_epochs = None if epochs is None else grouped.column("ep").to_pylist()
        return keys, states, group_epochs

    @staticmethod
    def _keys(grouped: pa.Table, width: int, float_keys: set[int]) -> list[Any]:
        enc = qkeys.encode
        if width == 0:
            return [()] * grouped.num_rows
        parts = []
        for i in range(width):
            col = grouped.column(f"k{i}").combine_chunks()
            if i in float_keys:
                col = _bits_float(col)
            parts.append(col.to_pylist())
        if width == 1:
            return [k if type(k) is str else enc(k) for k in parts[0]]
        return [tuple([enc(v) for v in row]) for row in zip(*parts, strict=True)]

    def _states(self, grouped: pa.Table, how: str, col: Any, topk: dict[int, list]) -> list:
        if how == "count_all":
            return grouped.column("count_all").to_pylist()
        if how == "topk":
            return topk[col]
        if how == "count":
            return [c or None for c in grouped.column(f"{col}_count").to_pylist()]
        if how in ("sum", "avg"):
            sums = grouped.column(f"{col}_sum").to_pylist()
            counts = grouped.column(f"{col}_count").to_pylist()
            return [None if c == 0 else (s, c) for s, c in zip(sums, counts, strict=True)]
        if how in ("min", "max"):
            return grouped.column(f"{col}_{how}").to_pylist()
        if how in _LIST_AGGS:
            return self._sketch_states(grouped.column(f"{col}_list"), how, int(col[1:]))
        col_d = grouped.column(f"{col}_distinct")
        base = how.removesuffix("_float")
        if how.endswith("_float"):
            lists = [
                None if v is None else _bits_float(pa.array(v, pa.int64())).to_pylist()
                for v in col_d.to_pylist()
            ]
        else:
            lists = col_d.to_pylist()
        out: list[Any] = []
        for values in lists:
            if not values:
                out.append(None)
            elif base == "approx_distinct":
                agg = self._part_at(int(col[1:]))
                # the group's distinct values into one HLL: the registers the row path's
                # per-record inserts give
                out.append(agg.add_values(agg.empty(), values))  # type: ignore[attr-defined]
            else:
                out.append(set(values))
        return out

    def _sketch_states(self, lists: Any, how: str, j: int) -> list:
        """Each group's sketch from its list of values (NULLs dropped; a group without a
        non-NULL value has no state), fed in one batch: KLL takes the group's float64 slice of
        the flattened column, frequent items each distinct item with its count."""
        agg: Any = self._part_at(j)
        col = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
        offsets = col.offsets.to_numpy()
        flat = col.values
        valid = flat.is_valid().to_numpy(zero_copy_only=False)
        out: list[Any] = []
        if how == "approx_percentile":
            if kind(flat) == "null":
                return [None] * len(col)
            nums = flat.cast(pa.float64(), safe=False).fill_null(0.0).to_numpy()
            for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
                vals = nums[lo:hi][valid[lo:hi]]
                out.append(agg.add_array(agg.empty(), vals) if len(vals) else None)
            return out
        items = flat.to_pylist()
        for lo, hi in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            counts: dict[Any, int] = {}
            for v in items[lo:hi]:
                if v is not None:
                    counts[v] = counts.get(v, 0) + 1
            out.append(
                agg.add_counts(agg.empty(), list(counts), list(counts.values())) if counts else None
            )
        return out

    def _part_at(self, j: int) -> Aggregator:
        return self.agg.parts[j] if self.composite else self.agg  # type: ignore[attr-defined]

    def _topk_states(
        self, j: int, pairs: list[Any], key_cols: list[pa.Array], keys: list[Any]
    ) -> list:
        """topk's partial per group, folded with the aggregator itself (lift and merge of the
        row path's (item, weight) values): exact, row by row."""
        agg = self.agg.parts[j] if self.composite else self.agg  # type: ignore[attr-defined]
        enc = qkeys.encode
        width = len(key_cols)
        key_lists = [c.to_pylist() for c in key_cols]
        states: dict[Any, Any] = {}
        for i, v in enumerate(pairs):
            if v is None:
                continue
            if width == 0:
                key: Any = ()
            elif width == 1:
                k = key_lists[0][i]
                key = k if type(k) is str else enc(k)
            else:
                key = tuple([enc(kl[i]) for kl in key_lists])
            try:
                lifted = agg.lift(v)
            except TypeError as exc:
                raise Unsupported(f"a topk value the CBT refuses: {exc}") from None
            prior = states.get(key)
            states[key] = lifted if prior is None else agg.merge(prior, lifted)
        return [states.get(k) for k in keys]


def _float_bits(col: pa.Array) -> pa.Array:
    """float64 values as their int64 bit patterns (nulls kept)."""
    arr = col.cast(pa.float64())
    data = arr.fill_null(0.0).to_numpy(zero_copy_only=False).view(np.int64)
    return pa.array(data, pa.int64(), mask=arr.is_null().to_numpy(zero_copy_only=False))


def _bits_float(col: pa.Array) -> pa.Array:
    data = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64).view(np.float64)
    return pa.array(data, pa.float64(), mask=col.is_null().to_numpy(zero_copy_only=False))


def pair_partials(kv: pa.Table, agg: Aggregator) -> tuple[list[Any], list[Any]]:
    """Partial states per key of a ``(key, value)`` table (``value`` absent: every value is
    1), exactly as inserting each pair would build them (see module docstring)."""
    if kv.num_rows == 0:
        return [], []
    if "key" not in kv.column_names:
        raise ValueError("map_batch must return a table with a 'key' column")
    key = kv.column("key").combine_chunks()
    if kind(key) not in ("str", "int"):
        raise Unsupported("map_batch keys other than strings or ints")
    has_value = "value" in kv.column_names
    value = kv.column("value").combine_chunks() if has_value else None
    name = agg.name
    vk = None if value is None else kind(value)
    if value is not None and value.null_count:
        raise Unsupported("NULL values from map_batch")
    if name == "count" and vk in (None, "int"):
        if value is None:
            g = (
                pa.table({"key": key})
                .group_by(["key"], use_threads=False)
                .aggregate([([], "count_all")])
            )
            return g.column("key").to_pylist(), g.column("count_all").to_pylist()
        if max_abs(value) * len(value) >= _INT64_LIMIT >> 1:
            raise Unsupported("count weights that could pass int64")
        g = (
            pa.table({"key": key, "v": value})
            .group_by(["key"], use_threads=False)
            .aggregate([("v", "sum")])
        )
        return g.column("key").to_pylist(), g.column("v_sum").to_pylist()
    if name in ("sum", "avg") and vk in ("int", "float"):
        assert value is not None
        if vk == "int" and max_abs(value) * len(value) >= _INT64_LIMIT:
            raise Unsupported("an integer sum that could pass int64")
        g = (
            pa.table({"key": key, "v": value})
            .group_by(["key"], use_threads=False)
            .aggregate([("v", "sum"), ("v", "count")])
        )
        sums, counts = g.column("v_sum").to_pylist(), g.column("v_count").to_pylist()
        return g.column("key").to_pylist(), list(zip(sums, counts, strict=True))
    if name in ("min", "max") and vk in ("int", "float") and not has_nan(value):  # type: ignore[arg-type]
        g = (
            pa.table({"key": key, "v": value})
            .group_by(["key"], use_threads=False)
            .aggregate([("v", name)])
        )
        return g.column("key").to_pylist(), g.column(f"v_{name}").to_pylist()
    # any other aggregator: its own lift/merge per pair (exact, row by row)
    keys = key.to_pylist()
    vals = [1] * len(keys) if value is None else value.to_pylist()
    states: dict[Any, Any] = {}
    for k, v in zip(keys, vals, strict=True):
        try:
            lifted = agg.lift(v)
        except TypeError as exc:
            raise Unsupported(f"a value the CBT refuses: {exc}") from None
        prior = states.get(k)
        states[k] = lifted if prior is None else agg.merge(prior, lifted)
    return list(states), list(states.values())
