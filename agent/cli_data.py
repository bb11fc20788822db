"""The ``elf`` commands that look at a job's data rather than manage the job: ``elf tap``
(a live sample of the parsed records a job sees on one agent, through the HTTP API) and
``elf spark`` (a Spark job over the rollup lake).

Plain click commands, not tied to a group: :mod:`agent.cli` adds them to the ``elf`` group
(this module never imports it). ``elf spark`` imports ``spark_sink`` (and so PySpark) only
when it runs.
"""

from __future__ import annotations

import json
import sys

import click

from agent.cli_common import api_client, api_options, fetch
from agent.cli_views import tap_line
from agent.client import ApiClient


@click.command()
@click.argument("name")
@click.option(
    "--agent",
    "which",
    help="The agent whose records to sample: a node id prefix or an API URL (default: --api).",
)
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=10, show_default=True, help="Records."
)
@click.option(
    "--timeout",
    type=click.FloatRange(0, 60, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds to wait for them at most.",
)
@api_options
def tap(
    name: str,
    which: str | None,
    limit: int,
    timeout: float,
    api: str,
    token_file: str | None,
    secret_file: str | None,
) -> None:
    """Print a live sample of the parsed records job NAME sees on one agent.

    Stdout: up to --limit records captured from now on, one JSON object per line
    (``input``, ``origin``, ``epoch``, ``record``), in the order the job saw them. Stderr: one
    line saying how many, whether the limit was reached before --timeout, and how many
    records the job processed meanwhile that the tap did not keep. The tap has no effect on
    the job's results."""
    client = api_client(api, token_file, secret_file)
    if which:
        client = ApiClient(_agent_api(client, which), client.token, client.timeout)
    reply = fetch(client.tap, name, limit, timeout)
    for item in reply.get("records", []):
        click.echo(json.dumps(item, ensure_ascii=False, sort_keys=True))
    click.echo(tap_line(reply), err=True)


def _agent_api(client: ApiClient, which: str) -> str:
    """``--agent``: an API URL as given, or the API URL of the one agent of the cluster
    picture (``GET /api/v1/dashboard/cluster`` at ``client``) whose node id starts with the
    hex prefix ``which``."""
    if which.startswith(("http://", "https://")):
        return which
    prefix = which.lower()
    if not all(c in "0123456789abcdef" for c in prefix):
        raise click.BadParameter(
            f"{which!r}: give a node id prefix (hex) or an API URL", param_hint="--agent"
        )
    agents = fetch(client.dashboard).get("agents", [])
    found = {
        a["node_id"]: a.get("api_url")
        for a in agents
        if isinstance(a, dict) and str(a.get("node_id", "")).startswith(prefix)
    }
    if len(found) != 1:
        known = ", ".join(sorted(str(a.get("node_id", "?"))[:10] for a in agents)) or "none"
        what = "no agent" if not found else f"{len(found)} agents"
        raise click.ClickException(
            f"--agent {which}: {what} of the cluster picture at {client.url} has a node id "
            f"starting so (agents: {known})"
        )
    node, url = found.popitem()
    if not url:
        raise click.ClickException(f"--agent {which}: agent {node[:10]} published no API URL")
    return str(url)


@click.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
)
@click.argument("job_name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def spark(job_name: str, args: tuple[str, ...]) -> None:
    """Run a Spark job over the rollup lake: hourly, daily, percentiles, uniques,
    promotion-lift, sales-table (`elf spark JOB --help` for its options)."""
    from spark_sink.jobs import job_main  # pyspark only when asked for
    from spark_sink.session import JavaMissing

    try:
        run = job_main(job_name)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None
    try:
        code = run(list(args))
    except JavaMissing as exc:  # what to install, not a JVM start-up traceback
        raise click.ClickException(str(exc)) from None
    sys.exit(code)
