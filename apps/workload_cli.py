"""``elf generate``: the workload generator on the command line (installed through the
``elf.commands`` entry-point group; :mod:`agent.cli` adds it at start).

Contract: writes a seeded clickstream (``clicks``) or tweet stream (``tweets``) from
:mod:`apps.workload` — to stdout, to a file (optionally rotated like logrotate), or POSTed in
batches to an agent's ingest input (``--post-to``, with the shared ``--api``/``--token-file``/
``--secret-file`` options of :mod:`agent.cli_common`; prints the accepted/rejected totals).
The same arguments give the same lines. Invalid options exit with a one-line error; Ctrl-C
or a closed pipe end the stream quietly. An operator-side program, like ``apps.demo``.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import click

from agent.cli_common import api_client, api_options, print_json
from agent.client import ApiError
from apps import workload


@click.command()
@click.argument("kind", type=click.Choice(["clicks", "tweets"]))
@click.option("--events", "-n", type=int, default=10_000, show_default=True, help="0 = endless.")
@click.option("--rate", type=float, default=1000.0, show_default=True, help="Events/s.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--start", type=float, help="First event time (epoch s; default: now).")
@click.option("--realtime", is_flag=True, help="Emit events at their event time.")
@click.option("--speedup", type=float, default=1.0, show_default=True, help="With --realtime.")
@click.option("--format", "fmt", type=click.Choice(["json", "nginx"]), default="json")
@click.option("--out", "-o", default="-", show_default=True, help="File, or - for stdout.")
@click.option("--rotate-bytes", type=int, help="Rotate --out when it would pass this size.")
@click.option("--users", type=int, default=10_000, show_default=True)
@click.option("--products", type=int, default=1000, show_default=True)
@click.option("--catalogue", type=click.Path(dir_okay=False), help="Write products (.csv/.json).")
@click.option("--post-to", "input_name", help="POST to this ingest input of --api instead.")
@api_options
def generate(
    kind: str,
    events: int,
    rate: float,
    seed: int,
    start: float | None,
    realtime: bool,
    speedup: float,
    fmt: str,
    out: str,
    rotate_bytes: int | None,
    users: int,
    products: int,
    catalogue: str | None,
    input_name: str | None,
    api: str,
    token_file: str | None,
    secret_file: str | None,
) -> None:
    """Generate a seeded clickstream or tweet stream (apps/workload.py)."""
    if fmt == "nginx" and kind != "clicks":
        raise click.ClickException("--format nginx renders clicks only")
    limit = events or None
    try:
        if kind == "clicks":
            cat = workload.make_catalogue(products, seed=seed)
            if catalogue:
                workload.write_catalogue(cat, catalogue)
            gen: Any = workload.ClickstreamGenerator(
                seed=seed, users=users, rate=rate, start=start, limit=limit, catalogue=cat
            )
        else:
            gen = workload.TweetGenerator(
                seed=seed, users=users, rate=rate, start=start, limit=limit
            )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    stream = workload.paced(gen, speedup=speedup) if realtime else iter(gen)
    render = workload.RENDERERS[fmt]
    lines = (render(e) for e in stream)
    if input_name:
        try:
            client = api_client(api, token_file, secret_file)
            totals = workload.post_lines(lines, client, input_name)
        except ApiError as exc:
            raise click.ClickException(str(exc)) from None
        print_json(totals)
    elif out == "-":
        with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):
            for line in lines:
                sys.stdout.write(line + "\n")
            sys.stdout.flush()
    else:
        with (
            workload.RotatingWriter(out, rotate_bytes=rotate_bytes) as w,
            contextlib.suppress(KeyboardInterrupt),
        ):
            for line in lines:
                w.write(line)
