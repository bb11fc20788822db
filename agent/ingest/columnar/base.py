"""What every format kernel shares: its result type, the projection of a schema, and the
conversion of row-parser records to Arrow.

Contract: a kernel is ``kernel(lines, want) -> KernelResult`` (see :class:`KernelResult`);
:func:`rows_to_table` converts row-parser records to a table of a given schema, raising
:class:`UnsupportedChunk` when the values cannot form its columns; :func:`project` and
:func:`select` restrict and build tables of a kernel's schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa


class UnsupportedChunk(ValueError):
    """The chunk's values cannot form Arrow columns (see module): use the row path."""


@dataclass(slots=True)
class KernelResult:
    """What a format kernel returns: the rows of the lines it parsed itself, and the lines
    (indices, ascending) it leaves to the row parser. ``repaired`` counts the repaired lines
    among the kernel's own (accepted) lines; the row parser counts the rest."""

    table: pa.Table
    line_index: np.ndarray
    fallback: np.ndarray
    repaired: int


def rows_to_table(rows: Sequence[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Row-parser records as a table of ``schema`` (an empty schema: the union of the
    records' keys, in order of appearance, types inferred; missing keys are null)."""
    try:
        if not len(schema):
            keys = dict.fromkeys(k for r in rows for k in r)
            return pa.table({k: pa.array([r.get(k) for r in rows]) for k in keys})
        return pa.Table.from_pylist(list(rows), schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        raise UnsupportedChunk(f"values do not fit the chunk's Arrow columns: {exc}") from None


def select(columns: dict[str, pa.Array], schema: pa.Schema) -> pa.Table:
    """A table of ``schema`` from the computed ``columns`` (each cast to its field's type)."""
    arrays = []
    for f in schema:
        arr = columns[f.name]
        if arr.type != f.type:
            arr = arr.cast(f.type)
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, schema=schema)


def project(schema: pa.Schema, want: frozenset[str] | None) -> pa.Schema:
    """``schema`` restricted to ``want`` (None: all), in the schema's order."""
    if want is None:
        return schema
    return pa.schema([f for f in schema if f.name in want])


def duplicate_rows(pair_row: np.ndarray, keys: pa.Array) -> np.ndarray:
    """The rows (ascending) in which a key occurs twice; ``pair_row`` is sorted."""
    codes = np.asarray(keys.dictionary_encode().indices.to_numpy(zero_copy_only=False)).astype(
        np.int64
    )
    kinds = int(codes.max()) + 1
    if kinds <= 62:
        # a row's keys are distinct iff the sum of their bits equals their OR
        bits = np.left_shift(np.int64(1), codes)
        starts = np.flatnonzero(np.r_[True, pair_row[1:] != pair_row[:-1]])
        dup = np.add.reduceat(bits, starts) != np.bitwise_or.reduceat(bits, starts)
        return pair_row[starts[dup]]
    combo = pair_row.astype(np.int64) * kinds + codes
    uniq, counts = np.unique(combo, return_counts=True)
    return np.unique(uniq[counts > 1] // kinds)
