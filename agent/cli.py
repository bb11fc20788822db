"""The ``elf`` command-line interface.

One click group. ``elf agent`` runs an agent daemon (config file, ``ELF_*`` environment and
flags, in increasing precedence); ``elf cluster`` runs a local multi-process cluster on
loopback; ``elf demo`` runs the main demo (``agent/demo.py``); ``elf submit / jobs / stop /
results / query / status`` talk to any agent's HTTP API (``--api`` or ``ELF_API``; token from
``--token``/``ELF_TOKEN`` or derived from the cluster secret file). Errors print one
line naming what was wrong and exit non-zero.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import tempfile
import threading
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import click

from agent.client import ApiClient, ApiError
from agent.config import derive_api_token, load_config, read_secret
from agent.errors import ConfigError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def package_version() -> str:
    """The installed ``elf-stream`` distribution's version, or ``unknown`` from a bare tree."""
    try:
        return version("elf-stream")
    except PackageNotFoundError:
        return "unknown"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_version(), "-V", "--version", prog_name="elf")
def cli() -> None:
    """ELF: decentralized, lightweight stream processing over a peer-to-peer overlay."""


@cli.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML file.")
@click.option("--host", help="Advertised host for the overlay and data plane.")
@click.option("--port", "overlay_port", type=int, help="Overlay UDP port (0 = any).")
@click.option("--data-port", type=int, help="Data-plane HTTP port (0 = any).")
@click.option("--api-host", help="HTTP API listen host.")
@click.option("--api-port", type=int, help="HTTP API port (0 = any).")
@click.option("--bootstrap", multiple=True, help="host:port of a peer (repeatable).")
@click.option("--secret-file", type=click.Path(dir_okay=False), help="Cluster secret file.")
@click.option("--token-file", type=click.Path(dir_okay=False), help="API token file.")
@click.option("--data-dir", type=click.Path(file_okay=False), help="Data directory.")
@click.option("--domain", help="Failure-domain label (e.g. rack).")
@click.option(
    "--input", "inputs", multiple=True, help="NAME[:FORMAT]=PATH of a log file (PATH - = stdin)."
)
@click.option("--agents", "logical_agents", type=int, help="Logical agents in this process.")
@click.option("--node-id", help="Hex node id (default: SHA-1 of host:port).")
@click.option("--lake", help="Rollup lake path or URI (default <data-dir>/lake; off: none).")
@click.option("--log-level", default="WARNING", show_default=True)
def agent(config_path: str | None, log_level: str, **flags: Any) -> None:
    """Run an agent daemon until SIGTERM/SIGINT."""
    from agent.server.daemon import run

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr)
    try:
        config = load_config(config_path, overrides=flags)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    asyncio.run(run(config))


@cli.command()
@click.option("--agents", "n", type=int, default=4, show_default=True, help="Agent processes.")
@click.option("--workdir", type=click.Path(file_okay=False), help="Default: a temp directory.")
@click.option("--logical", type=int, default=1, show_default=True, help="Agents per process.")
def cluster(n: int, workdir: str | None, logical: int) -> None:
    """Run a local multi-process cluster on loopback until Ctrl-C."""
    from agent.server.cluster import LocalCluster

    root = Path(workdir or tempfile.mkdtemp(prefix="elf-cluster-"))
    local = LocalCluster(n, root, logical_agents=logical)
    # Handlers, not KeyboardInterrupt: a signal at any point (also SIGTERM, which would
    # otherwise kill this process and orphan the agents) leads to one orderly stop.
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in STOP_SIGNALS}
    try:
        local.start()
        click.echo(f"secret file: {local.secret_file}")
        for a in local.agents():
            click.echo(f"agent {a['node_id'][:10]}  overlay {a['overlay']}  api {a['api_url']}")
        click.echo("Ctrl-C stops the cluster.")
        while not stop.wait(0.5):
            if all(p.process.poll() is not None for p in local.procs):
                click.echo("every agent process has exited", err=True)
                break
    finally:
        local.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@cli.command()
@click.option("--agents", type=int, default=8, show_default=True, help="Agent processes.")
@click.option(
    "--duration", type=float, default=60.0, show_default=True, help="Seconds; 0 = until Ctrl-C."
)
@click.option(
    "--dir", "workdir", type=click.Path(file_okay=False), help="Work dir (default: temp)."
)
@click.option("--epoch-seconds", type=float, default=2.0, show_default=True, help="Epoch length.")
@click.option("--rate", type=float, default=100.0, show_default=True, help="Events/s per agent.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--no-spark", is_flag=True, help="Skip the final Spark join.")
@click.option("--plain", is_flag=True, help="Plain periodic lines instead of the live view.")
def demo(
    agents: int,
    duration: float,
    workdir: str | None,
    epoch_seconds: float,
    rate: float,
    seed: int,
    no_spark: bool,
    plain: bool,
) -> None:
    """The main demo: a local cluster, live streams, four apps, a runtime change, Spark."""
    from agent.demo import DemoConfig, run_demo

    try:
        config = DemoConfig(
            agents=agents,
            duration=duration,
            workdir=Path(workdir) if workdir else None,
            epoch_seconds=epoch_seconds,
            rate=rate,
            spark=not no_spark,
            seed=seed,
            live=False if plain else None,
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(run_demo(config))


def _client(api: str, token: str | None, secret_file: str | None) -> ApiClient:
    if not token:
        if not secret_file:
            raise click.ClickException("no API token: pass --token or --secret-file")
        try:
            token = derive_api_token(read_secret(secret_file))
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    return ApiClient(api, token)


def _api_options(fn: Any) -> Any:
    fn = click.option("--secret-file", envvar="ELF_SECRET_FILE", help="Derive the token.")(fn)
    fn = click.option("--token", envvar="ELF_TOKEN", help="API token.")(fn)
    default_api = "http://127.0.0.1:7480"
    return click.option("--api", envvar="ELF_API", default=default_api, show_default=True)(fn)


def _print(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def _call(fn: Any, *args: Any) -> None:
    try:
        _print(fn(*args))
    except ApiError as exc:
        raise click.ClickException(str(exc)) from None


@cli.command()
@click.argument("spec_file", type=click.File("r"), required=False)
@click.option("--name", help="Job name (instead of SPEC_FILE).")
@click.option("--job", "job_class", help="Registered job class, e.g. wordcount.")
@click.option("--input", "inputs", multiple=True, help="Input name the job reads.")
@click.option("--epoch-seconds", type=float, help="Epoch length in seconds.")
@click.option("--param", "params", multiple=True, help="KEY=VALUE job parameter (JSON value).")
@click.option("--query", help="An ELF QL query, or a file holding one (with --name).")
@_api_options
def submit(
    spec_file: Any,
    name: str | None,
    job_class: str | None,
    inputs: tuple[str, ...],
    epoch_seconds: float | None,
    params: tuple[str, ...],
    query: str | None,
    api: str,
    token: str | None,
    secret_file: str | None,
) -> None:
    """Submit a job: a JSON spec file, --name/--job/... flags, or --name/--query."""
    if query is not None:
        from agent.jobs.ql_job import spec_from_query

        if not name:
            raise click.ClickException("--query needs --name")
        text = Path(query).read_text() if os.path.isfile(query) else query
        try:
            spec = spec_from_query(name, os.environ.get("USER", "elf"), text)
        except ValueError as exc:
            raise click.ClickException(f"query: {exc}") from None
    elif spec_file is not None:
        try:
            spec = json.load(spec_file)
        except json.JSONDecodeError as exc:
            raise click.ClickException(f"{spec_file.name}: not JSON: {exc}") from None
    else:
        if not name or not job_class:
            raise click.ClickException("give a SPEC_FILE or both --name and --job")
        spec = {"name": name, "job_class": job_class, "creator": os.environ.get("USER", "elf")}
        if inputs:
            spec["inputs"] = list(inputs)
        if epoch_seconds is not None:
            spec["epoch_seconds"] = epoch_seconds
        if params:
            spec["params"] = _key_values(params, "--param")
    _call(_client(api, token, secret_file).submit, spec)


@cli.command()
@_api_options
def jobs(api: str, token: str | None, secret_file: str | None) -> None:
    """List the cluster's jobs."""
    _call(_client(api, token, secret_file).jobs)


@cli.command()
@click.argument("name")
@_api_options
def stop(name: str, api: str, token: str | None, secret_file: str | None) -> None:
    """Stop a job."""
    _call(_client(api, token, secret_file).stop_job, name)


def _key_values(items: tuple[str, ...], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` flags as a dict; a VALUE that parses as JSON is that value (numbers,
    booleans, lists), anything else is a string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise click.ClickException(f"{flag} wants KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(text)
        except json.JSONDecodeError:
            out[key] = text
    return out


@cli.command()
@click.argument("name")
@click.option("--set", "sets", multiple=True, metavar="KEY=JSON", help="Set a job param.")
@click.option("--query", "query_text", help="New ELF QL text (ql jobs), or @FILE.")
@click.option("--top-k", type=int, help="New k for the job's top-k.")
@click.option("--epoch-seconds", type=float, help="New epoch length (batch/iterative jobs).")
@click.option("--aggregator", help="New CBT aggregator (a new reduce function), e.g. sum.")
@click.option("--empty", is_flag=True, help="Empty every agent's windows now.")
@click.option("--batch", is_flag=True, help="Start a new batch.")
@_api_options
def change(
    name: str,
    sets: tuple[str, ...],
    query_text: str | None,
    top_k: int | None,
    epoch_seconds: float | None,
    aggregator: str | None,
    empty: bool,
    batch: bool,
    api: str,
    token: str | None,
    secret_file: str | None,
) -> None:
    """Change a running job without restarting it; prints when every agent applied it."""
    body: dict[str, Any] = {}
    params = _key_values(sets, "--set")
    if params:
        body["params"] = params
    if query_text is not None:
        body["query"] = (
            Path(query_text[1:]).read_text() if query_text.startswith("@") else query_text
        )
    if top_k is not None:
        body["top_k"] = top_k
    if epoch_seconds is not None:
        body["epoch_seconds"] = epoch_seconds
    if aggregator is not None:
        body["aggregator"] = aggregator
    if empty:
        body["empty"] = True
    if batch:
        body["batch"] = True
    if not body:
        raise click.ClickException(
            "nothing to change: give --set, --query, --top-k, --epoch-seconds, --aggregator, "
            "--empty or --batch"
        )
    _call(_client(api, token, secret_file).change, name, body)


@cli.command()
@click.argument("name")
@click.option("--epoch", type=int, help="Epoch index (default: the latest complete one).")
@_api_options
def results(
    name: str, epoch: int | None, api: str, token: str | None, secret_file: str | None
) -> None:
    """Print a job's result for one epoch, fetched from its master."""
    _call(_client(api, token, secret_file).results, name, epoch)


@cli.command()
@click.argument("name")
@click.argument("message")
@_api_options
def query(name: str, message: str, api: str, token: str | None, secret_file: str | None) -> None:
    """Send a JSON query MESSAGE to a job's master and print its reply."""
    try:
        body = json.loads(message)
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"MESSAGE is not JSON: {exc}") from None
    _call(_client(api, token, secret_file).query, name, body)


@cli.command()
@_api_options
def status(api: str, token: str | None, secret_file: str | None) -> None:
    """Print the agent's status: node id, neighbours, roles and trees per job."""
    _call(_client(api, token, secret_file).status)


@cli.command()
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
@_api_options
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
    token: str | None,
    secret_file: str | None,
) -> None:
    """Generate a seeded clickstream or tweet stream (agent/workload.py)."""
    from agent import workload

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
            totals = workload.post_lines(lines, _client(api, token, secret_file), input_name)
        except ApiError as exc:
            raise click.ClickException(str(exc)) from None
        _print(totals)
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


@cli.command(
    context_settings={
        "ignore_unknown_options": True,
        "allow_extra_args": True,
        "help_option_names": [],
    },
)
@click.argument("job_name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def spark(job_name: str, args: tuple[str, ...]) -> None:
    """Run a Spark job over the rollup lake: hourly, daily, promotion-lift, sales-table
    (`elf spark JOB --help` for its options)."""
    from spark_sink.jobs import job_main  # pyspark only when asked for

    try:
        run = job_main(job_name)
    except KeyError as exc:
        raise click.ClickException(str(exc.args[0])) from None
    sys.exit(run(list(args)))


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
