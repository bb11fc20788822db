"""WordCount: the count of every word per epoch, the job class registered as ``"wordcount"``.

Contract: the text is ``params["field"]`` (default: the record's ``"line"`` field, else its
``"text"`` field); it is lowercased and split into words, a word being a maximal run of
Unicode letters and digits (``[^\\W_]+``: punctuation, underscores and whitespace separate
words). ``map_keys(record)`` (the counting fast path the worker uses) returns the words;
``map(record)`` the same as ``(word, 1)`` pairs. A record without a string text field yields
nothing. ``params["min_length"]`` (default 1) drops shorter words. Aggregator: ``count``.

Master side: it keeps the last ``RETAINED_EPOCHS`` epoch results it completed and answers
cross-job queries ``{"word": w}`` (optionally ``"epochs": n``, the newest n) with
``{"word", "count", "epochs": [first, last] | None}``: the word's count summed over them.
This state lives in the master's job instance; a new master starts it afresh (the epoch
results themselves move with the master role).
"""

from __future__ import annotations

import re
from collections import deque
from typing import TYPE_CHECKING, Any

from agent.api import Job, register_job
from cbt import Snapshot

if TYPE_CHECKING:  # pyarrow loads with the first columnar batch (map_batch), not the class
    import pyarrow as pa

RETAINED_EPOCHS = 64

_WORD = re.compile(r"[^\W_]+")


@register_job("wordcount")
class WordCount(Job):
    """Counts lowercase words of a text field (see module docstring)."""

    default_aggregator = "count"

    def setup(self) -> None:
        field = self.params.get("field")
        if field is not None and (not isinstance(field, str) or not field):
            raise ValueError(f"params.field must be a non-empty string, got {field!r}")
        self.fields = (field,) if field else ("line", "text")
        min_length = self.params.get("min_length", 1)
        if isinstance(min_length, bool) or not isinstance(min_length, int) or min_length < 1:
            raise ValueError(f"params.min_length must be an integer >= 1, got {min_length!r}")
        self.min_length = min_length

    def map_keys(self, record: dict[str, Any]) -> list[str]:
        for name in self.fields:
            text = record.get(name)
            if isinstance(text, str):
                break
        else:
            return []
        words = _WORD.findall(text.lower())
        n = self.min_length
        return words if n == 1 else [w for w in words if len(w) >= n]

    def batch_projection(self) -> frozenset[str] | None:
        return frozenset(self.fields) | {str(self.params.get("ts_field", "ts"))}

    def map_batch(self, table: pa.Table) -> pa.Table:
        """``map_keys`` on a whole table. ASCII texts are lowercased and split by Arrow
        kernels (for ASCII, Python's ``[^\\W_]+`` is ``[A-Za-z0-9]+``); other texts take
        ``map_keys``'s Python (its Unicode case mapping and word classes), row by row."""
        import pyarrow as pa
        import pyarrow.compute as pc

        text: pa.Array | None = None
        for name in self.fields:  # per row: the first of the fields holding a string
            if name in table.column_names:
                col = table.column(name).combine_chunks()
                if pa.types.is_string(col.type):
                    text = col if text is None else pc.coalesce(text, col)
        if text is None or len(text) == 0:
            return pa.table({"key": pa.array([], pa.string())})
        ascii_mask = pc.fill_null(pc.string_is_ascii(text), False)
        plain = text.filter(ascii_mask)
        pieces = pc.list_flatten(pc.split_pattern_regex(pc.ascii_lower(plain), "[^a-z0-9]+"))
        keep = pc.greater_equal(pc.utf8_length(pieces), max(1, self.min_length))
        words = pieces.filter(keep)
        rest = text.filter(pc.invert(ascii_mask)).drop_null()
        if len(rest):
            extra = [w for t in rest.to_pylist() for w in self._words(t)]
            words = pa.concat_arrays([words, pa.array(extra, pa.string())])
        return pa.table({"key": words})

    def _words(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        n = self.min_length
        return words if n == 1 else [w for w in words if len(w) >= n]

    # ---- master side ----------------------------------------------------------------------
    def on_epoch_result(self, epoch: int, snapshot: Snapshot) -> None:
        if not hasattr(self, "_recent"):
            self._recent: deque[tuple[int, Snapshot]] = deque(maxlen=RETAINED_EPOCHS)
        self._recent.append((epoch, snapshot))

    def on_query(self, message: dict[str, Any]) -> dict[str, Any]:
        word = message.get("word")
        if not isinstance(word, str) or not word:
            return {"error": "query needs a non-empty string 'word'"}
        n = message.get("epochs", RETAINED_EPOCHS)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            return {"error": "'epochs' must be a positive integer"}
        recent = list(getattr(self, "_recent", ()))[-n:]
        count = sum(int(snap.get(word.lower(), 0)) for _, snap in recent)
        span = [recent[0][0], recent[-1][0]] if recent else None
        return {"word": word, "count": count, "epochs": span}
