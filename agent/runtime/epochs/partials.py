"""Pure helpers of the worker's CBT inserts: which pre-aggregated partials stand once the clock
has decided lateness, and how far a failed bulk insert got.

Contract:

* :func:`split_accepted` ``(partials, accepted_epochs)``: ``partials`` are ``(epoch, keys,
  states, rows)`` computed elsewhere from every row with a usable timestamp of a chunk,
  ``accepted_epochs`` the epochs of the rows the clock accepted. Returns the partials whose
  epoch's rows were all accepted (they stand as computed) and, sorted, the epochs of which
  only some rows were (their accepted rows must be aggregated again). Epochs none of whose
  rows were accepted are in neither: nothing of them counts. An accepted epoch without a
  partial is in the second list (it does not happen when both cut epochs alike).
* :func:`whole_rows` ``(partials, rows)``: the row count per epoch of partials that cover
  ``rows`` rows (one partial per epoch), or None when they do not (the clock then decides
  row by row).
* :func:`inserted_before_error` ``(tree, keys, values, start)``: how many pairs from
  ``start`` on a fresh tree takes before the first one it refuses (``TypeError``): what a
  failed ``insert_many`` inserted.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cbt import CompressedBufferTree


def split_accepted(
    partials: list[tuple[int, list[Any], list[Any], int]], accepted_epochs: np.ndarray
) -> tuple[list[tuple[int, list[Any], list[Any], int]], list[int]]:
    """(the partials that stand, the epochs to aggregate again) - see module docstring."""
    uniq, counts = np.unique(accepted_epochs, return_counts=True)
    left = dict(zip(uniq.tolist(), counts.tolist(), strict=True))
    whole, mixed = [], []
    for partial in partials:
        got = left.pop(partial[0], 0)
        if got == partial[3]:
            whole.append(partial)
        elif got:
            mixed.append(partial[0])
    return whole, sorted([*mixed, *left])


def whole_rows(
    partials: list[tuple[int, list[Any], list[Any], int]], rows: int
) -> dict[int, int] | None:
    """Epoch -> rows of ``partials`` when they hold ``rows`` rows, one partial per epoch."""
    out = {p[0]: p[3] for p in partials}
    if len(out) != len(partials) or sum(out.values()) != rows:
        return None
    return out


def inserted_before_error(
    tree: CompressedBufferTree, keys: list[Any], values: list[Any] | None, start: int
) -> int:
    """The pairs from ``start`` on a fresh tree takes before one it refuses (see module)."""
    probe = CompressedBufferTree(tree.agg)
    for i in range(start, len(keys)):
        try:
            probe.insert(keys[i], 1 if values is None else values[i])
        except TypeError:
            return i - start
    return len(keys) - start
