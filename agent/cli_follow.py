"""``elf results NAME --follow``: a job's results stream printed as it comes.

Contract: :func:`follow` reads ``GET /api/v1/jobs/{name}/results/stream`` through
:meth:`agent.client.ApiClient.follow_results` and prints, per ``result`` event, the result as
one JSON line on stdout (the event's body: ``cursor``, ``epoch``, ``state``, ``version``,
``revision``, ``rows``, ...) and its :func:`agent.cli_views.result_line` on stderr; a ``gone``
event is one stderr line; keepalives print nothing. It returns when the agent ends the stream
(the job stopped: exit 0, the reason on stderr); Ctrl-C stops it quietly (exit 130, the last
event's ``resume`` cursor on stderr for ``--after``); a lost connection raises
``ClickException`` naming it.
"""

from __future__ import annotations

import json

import click

from agent.cli_views import result_line
from agent.client import ApiClient, ApiError

#: the exit status after Ctrl-C (128 + SIGINT, as a shell reports it)
INTERRUPTED = 130


def follow(client: ApiClient, name: str, emit: str | None, after: str | None) -> int:
    """Print the stream until it ends (module contract); returns the exit status."""
    cursor = after
    try:
        for event in client.follow_results(name, emit=emit, after=after):
            kind = event.get("event")
            if kind == "result":
                cursor = str(event.get("resume") or event.get("cursor") or cursor)
                click.echo(json.dumps(event, ensure_ascii=False, sort_keys=True))
                click.echo(result_line(event), err=True)
            elif kind == "gone":
                click.echo(f"epoch {event.get('epoch')}: gone ({event.get('error')})", err=True)
            elif kind == "end":
                click.echo(f"stream ended: {event.get('reason')}", err=True)
                return 0
    except KeyboardInterrupt:
        if cursor:
            click.echo(f"stopped; resume with --after {cursor}", err=True)
        return INTERRUPTED
    except ApiError as exc:
        resume = f"; resume with --after {cursor}" if cursor else ""
        raise click.ClickException(f"{exc}{resume}") from None
    raise click.ClickException(
        "the results stream closed without an end event"
        + (f"; resume with --after {cursor}" if cursor else "")
    )
