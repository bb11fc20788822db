"""Log records with the agent, job and epoch they concern; plain or one JSON object per line.

Contract: :func:`configure` sets up the root logger for ``elf agent``: ``"plain"`` (the default,
for a terminal) or ``"json"`` — one JSON object per line (orjson), with ``ts`` (Unix seconds),
``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, ``agent`` (the logical agent's
hex node id), ``job`` and ``epoch`` (``null`` where not known), ``thread``, and ``exc`` (the
formatted traceback) when the record carries one. Where the fields come from, first match
wins: a call's ``extra={"job": ..., "epoch": ...}``; else the context variables
:data:`AGENT`, :data:`JOB` and :data:`EPOCH` — the agent sets :data:`AGENT` when it starts (its
tasks inherit it, and its record thread runs each call in the caller's context) and
:data:`JOB` around the start of a job's runtime. :class:`ContextFilter` copies them onto each
record, so a plain format can use ``%(agent)s`` too. Values are never evaluated or formatted
beyond ``str``; a message whose arguments fail to format is logged with the raw template.
"""

from __future__ import annotations

import contextvars
import datetime
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import orjson


class AgentName:
    """The hex node id of a logical agent, filled in once known (the overlay binds its port,
    which makes the id, after the agent's first tasks exist: they share this holder)."""

    __slots__ = ("value",)

    def __init__(self, value: str | None = None) -> None:
        self.value = value


#: the logical agent the running code belongs to
AGENT: contextvars.ContextVar[AgentName | None] = contextvars.ContextVar("elf_agent", default=None)
#: the job the running code works for
JOB: contextvars.ContextVar[str | None] = contextvars.ContextVar("elf_job", default=None)
#: the epoch the running code works on
EPOCH: contextvars.ContextVar[int | None] = contextvars.ContextVar("elf_epoch", default=None)

FORMATS = ("plain", "json")
# logging.basicConfig's format with a timestamp: an operator lines up agents' logs around a fault
PLAIN = "%(asctime)s " + logging.BASIC_FORMAT


@contextmanager
def job_context(job: str | None) -> Iterator[None]:
    """Run the block (and the tasks it creates) with :data:`JOB` set to ``job``."""
    token = JOB.set(job)
    try:
        yield
    finally:
        JOB.reset(token)


class ContextFilter(logging.Filter):
    """Puts ``agent``, ``job`` and ``epoch`` on every record (``extra`` wins over context)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "agent", None) is None:
            holder = AGENT.get()
            record.agent = holder.value if holder is not None else None
        for name, var in (("job", JOB), ("epoch", EPOCH)):
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (see the module contract)."""

    def format(self, record: logging.LogRecord) -> str:
        try:
            message = record.getMessage()
        except Exception:  # bad arguments: the template is still worth a line
            message = str(record.msg)
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
            "agent": _plain(getattr(record, "agent", None)),
            "job": _plain(getattr(record, "job", None)),
            "epoch": _plain(getattr(record, "epoch", None)),
            "thread": record.threadName,
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exc"] = record.exc_text
        return orjson.dumps(out).decode()


def _plain(value: Any) -> str | int | None:
    if value is None or isinstance(value, str) or (type(value) is int):
        return value
    return str(value)


def configure(
    fmt: str = "plain", level: str | int = "WARNING", stream: TextIO | None = None
) -> None:
    """The root logger's one handler on ``stream`` (stderr) in ``fmt``; replaces others."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {FORMATS}, got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(PLAIN))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
