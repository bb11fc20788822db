"""One-line human summaries the ``elf`` commands print to stderr beside their JSON on stdout.

Contract: pure functions of an API reply, never raising on a reply that lacks a field (an
older agent, a job without a master here): :func:`membership_lines` names, per job of a
``GET /api/v1/status`` reply, the origins its masters here count absent (since when, their
last epoch, when they are retired automatically), retired (when, from which epoch, why) and
left; :func:`result_line` says of a ``GET /api/v1/jobs/{name}/results`` reply whether the
epoch is final, tentative or partial, with its term, version, coverage and lacking origins
(and, for a session query, how many sessions the epoch closed and how many are flagged);
:func:`retire_problem` says why a retirement reply is not complete (None when it is);
:func:`tap_line` sums up a ``GET /api/v1/jobs/{name}/tap`` reply. Node ids
are shortened to 8 hex digits after padding to 40 (results name them without leading zeros).
"""

from __future__ import annotations

import time
from typing import Any


def short(node: Any) -> str:
    text = str(node)
    return text.rjust(40, "0")[:8] if text != "?" else text


def _clock(at: Any) -> str:
    if not isinstance(at, int | float) or isinstance(at, bool):
        return "?"
    try:
        return time.strftime("%H:%M:%S", time.localtime(at))
    except (OverflowError, OSError, ValueError):  # NaN, or out of the platform's range
        return "?"


def _records(value: Any) -> list[dict[str, Any]]:
    """The objects of a list (anything else: none)."""
    return [o for o in value if isinstance(o, dict)] if isinstance(value, list) else []


def membership_lines(status: Any) -> list[str]:
    """Per job with an absent, retired or left origin: one line each (module contract)."""
    out: list[str] = []
    jobs = status.get("jobs") if isinstance(status, dict) else None
    if not isinstance(jobs, dict):
        return out
    for name, job in sorted(jobs.items()):
        m = job.get("membership") if isinstance(job, dict) else None
        if not isinstance(m, dict):
            continue
        for o in _records(m.get("absent")):
            last = o.get("last_epoch")
            out.append(
                f"job {name}: origin {short(o.get('origin'))} absent since {_clock(o.get('since'))}"
                + (f", last epoch {last}" if last is not None else "")
                + (f" ({o['why']})" if o.get("why") else "")
                + (
                    f", retired automatically at {_clock(o['retire_at'])}"
                    if o.get("retire_at") is not None
                    else ", until it comes back or is retired (elf retire)"
                )
            )
        for o in _records(m.get("retired")):
            out.append(
                f"job {name}: origin {short(o.get('origin'))} retired at {_clock(o.get('at'))} "
                f"from epoch {o.get('from_epoch')} ({o.get('why') or 'no reason given'})"
            )
        for o in _records(m.get("left")):
            out.append(
                f"job {name}: origin {short(o.get('origin'))} left from epoch {o.get('from_epoch')}"
            )
    return out


def result_state(result: dict[str, Any]) -> str:
    """final, tentative or partial: the reply's ``state``, else read from its flags."""
    state = result.get("state")
    if state in ("final", "tentative", "partial"):
        return str(state)
    if result.get("partial"):
        return "partial"
    return "tentative" if result.get("tentative") else "final"


def result_line(result: dict[str, Any]) -> str:
    """``epoch E: STATE (term T, version V), coverage C, lacking ...`` (module contract)."""
    state = result_state(result)
    where = [f"term {result['term']}"] if result.get("term") is not None else []
    where.append(f"version {result.get('version', 1)}")
    line = f"epoch {result.get('epoch')}: {state} ({', '.join(where)})"
    if state != "final":
        coverage = result.get("coverage")
        if isinstance(coverage, int | float) and not isinstance(coverage, bool):
            line += f", coverage {coverage:.0%}"
        lacking = result.get("lacking")
        if isinstance(lacking, list) and lacking:
            line += ", lacking " + " ".join(short(o) for o in lacking)
    sessions = result.get("sessions")
    if isinstance(sessions, dict):  # a session query: what this epoch closed, or why not
        rows = sessions.get("rows")
        if isinstance(rows, list):
            flagged = sum(1 for r in rows if isinstance(r, dict) and r.get("flags"))
            line += f"; {len(rows)} sessions closed" + (f" ({flagged} flagged)" if flagged else "")
        else:
            line += f"; sessions unknown here: {sessions.get('why', '?')}"
    return line


def retire_problem(reply: dict[str, Any]) -> str | None:
    """Why a retirement reply (one job's, or every job's) is not complete; None if it is."""
    if reply.get("complete", True):
        return None
    jobs = reply.get("jobs") if "jobs" in reply else {reply.get("job"): reply}
    refused = [
        f"{job}: {m.get('master')} {m.get('status')} {m.get('error', '')}".rstrip()
        for job, one in sorted((jobs or {}).items(), key=lambda kv: str(kv[0]))
        for m in one.get("masters") or ()
        if m.get("status") != 200
    ]
    failed = reply.get("failed") or {}
    refused += [f"{job}: {f.get('error')}" for job, f in sorted(failed.items())]
    return "not every master retired it: " + "; ".join(refused)


def tap_line(reply: dict[str, Any]) -> str:
    """A tap reply in one line: how many records, from which agent, whether the limit was
    reached, and how many the job processed meanwhile that the tap did not keep."""
    records = reply.get("records")
    n = len(records) if isinstance(records, list) else 0
    end = "limit reached" if reply.get("complete") else "timeout"
    return (
        f"tap {reply.get('job', '?')} on {short(reply.get('node_id', '?'))}: {n} records "
        f"({end}) in {reply.get('seconds', '?')} s; {reply.get('seen', '?')} seen, "
        f"{reply.get('dropped', '?')} not kept"
    )
