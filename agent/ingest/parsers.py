"""The row parser of any input format: a built-in name or a custom access-log format.

Contract: :func:`make_parser` takes what an input's configuration names as its format
(:func:`input_format`): one of :data:`~agent.ingest.formats.FORMATS`, or a
:class:`~agent.log_format.LogFormat` (an nginx ``log_format`` / Apache ``LogFormat`` string,
checked when the configuration was loaded), and returns its
:class:`~agent.ingest.records.LineParser`. :func:`format_label` names either in a status.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agent.ingest.formats import make_parser as make_named_parser
from agent.ingest.log_format import LogFormatParser
from agent.ingest.records import EncodingRepairs, LineParser
from agent.log_format import LogFormat

Format = str | LogFormat


def make_parser(
    fmt: Format,
    *,
    ts_field: str = "ts",
    clock: Callable[[], float] = time.time,
    repairs: EncodingRepairs | None = None,
) -> LineParser:
    """The parser of ``fmt`` (see module docstring); the other arguments as
    :func:`agent.ingest.formats.make_parser`'s."""
    if isinstance(fmt, LogFormat):
        return LogFormatParser(fmt, clock=clock, repairs=repairs)
    return make_named_parser(fmt, ts_field=ts_field, clock=clock, repairs=repairs)


def input_format(cfg: Any) -> Format | None:
    """The format an input configuration (:class:`~agent.config.InputConfig`, or anything
    with a ``format``) names: its custom :class:`LogFormat` when it has one, else the name."""
    custom = getattr(cfg, "log_format", None)
    fmt = getattr(cfg, "format", None)
    if isinstance(custom, str) and fmt in ("nginx", "apache"):
        return LogFormat(fmt, custom)
    return fmt


def format_label(fmt: Format | None) -> Any:
    """``fmt`` as JSON: the name, or ``{"dialect", "log_format"}``."""
    if isinstance(fmt, LogFormat):
        return {"dialect": fmt.dialect, "log_format": fmt.text}
    return fmt
