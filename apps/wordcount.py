"""WordCount: the count of every word per epoch, the job class registered as ``"wordcount"``.

Contract: the text is ``params["field"]`` (default: the record's ``"line"`` field, else its
``"text"`` field); it is lowercased and split into words, a word being a maximal run of
Unicode letters and digits (``[^\\W_]+``: punctuation, underscores and whitespace separate
words). ``map_keys(record)`` (the counting fast path the worker uses) returns the words;
``map(record)`` the same as ``(word, 1)`` pairs. A record without a string text field yields
nothing. ``params["min_length"]`` (default 1) drops shorter words. Aggregator: ``count``.
"""

from __future__ import annotations

import re
from typing import Any

from agent.job import Job, register_job

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
