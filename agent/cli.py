"""The ``elf`` command-line interface.

One click group. ``elf agent`` runs an agent daemon (config file, ``ELF_*`` environment and
flags, in increasing precedence); ``elf cluster`` runs a local multi-process cluster on
loopback; ``elf submit / jobs / stop / change / results / tap / query / status / top /
dashboard / retire / leave`` talk to any agent's HTTP API (``--api`` or ``ELF_API``; token from
``--token-file``/``ELF_TOKEN`` or derived from the cluster secret file, never from a flag:
:mod:`agent.cli_common`); ``elf spark`` runs a Spark job over the lake. Errors print one line
naming what was wrong and exit non-zero. ``elf tap`` and ``elf spark`` are defined in
:mod:`agent.cli_data` and added here.

Commands of higher layers are plugged in, not imported: :func:`load_commands` adds the click
commands installed distributions declare in the ``elf.commands`` entry-point group (this
project's ``elf demo`` and ``elf generate`` live in ``apps``, which ``agent`` never imports).
A broken entry point is logged and skipped; the other commands still work.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import tempfile
import threading
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from typing import Any

import click

from agent.cli_common import api_client, api_options, call, fetch, print_json
from agent.cli_data import spark, tap
from agent.cli_views import membership_lines, result_line, retire_problem
from agent.client import ApiError
from agent.config import load_config
from agent.errors import ConfigError
from agent.ingest.formats import FORMATS
from agent.ql import QLError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
COMMANDS_GROUP = "elf.commands"

log = logging.getLogger("agent.cli")  # also when run as ``python -m agent.cli``


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
@click.option(
    "--input-log-format",
    "input_log_format",
    multiple=True,
    metavar="NAME=LOG_FORMAT",
    help="The nginx log_format / Apache LogFormat string of input NAME (an nginx or apache "
    "input; docs/inputs.md).",
)
@click.option("--agents", "logical_agents", type=int, help="Logical agents in this process.")
@click.option("--node-id", help="Hex node id (default: SHA-1 of host:port).")
@click.option("--lake", help="Rollup lake path or URI (default <data-dir>/lake; off: none).")
@click.option("--log-level", default="WARNING", show_default=True)
@click.option(
    "--log-format",
    type=click.Choice(["plain", "json"]),
    default="plain",
    show_default=True,
    help="json: one JSON object per line with agent, job and epoch (docs/metrics.md).",
)
def agent(config_path: str | None, log_level: str, log_format: str, **flags: Any) -> None:
    """Run an agent daemon until SIGTERM/SIGINT."""
    from agent.runtime.ops.logs import configure
    from agent.server.daemon import run

    configure(log_format, log_level, sys.stderr)
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


def fault_options(fn: Any) -> Any:
    """The per-job fault-tolerance settings as flags (``elf submit`` and ``elf change``)."""
    for option in reversed(
        (
            click.option(
                "--straggler-epochs",
                type=int,
                help="Leap over a tree member this many epochs behind (0: never; default 2).",
            ),
            click.option(
                "--tentative-deadline",
                type=float,
                help="Seconds before a held-up epoch is previewed tentative (0: never).",
            ),
            click.option(
                "--checkpoint-replicas",
                type=int,
                help="Neighbours each agent replicates its snapshots to (0-8; default 2).",
            ),
            click.option(
                "--retire-after",
                type=float,
                help="Seconds before an absent agent is retired (its missed epochs partial; "
                "default 900).",
            ),
            click.option(
                "--fault-tolerance",
                help="passive (default), replicated[:R]: R active replicas of each tree "
                "position (2-5; default 2), budget:R: one active replica for each of at "
                "most R positions the master plans (1-64), or adaptive:T: mirrors of the "
                "inner positions for a p99 target of T ms (50-3600000).",
            ),
        )
    ):
        fn = option(fn)
    return fn


def _fault_fields(
    straggler_epochs: int | None,
    tentative_deadline: float | None,
    checkpoint_replicas: int | None,
    retire_after: float | None,
    fault_tolerance: str | None = None,
) -> dict[str, Any]:
    """The fault-tolerance flags given, as spec/change fields (the agent validates them)."""
    given = {
        "straggler_epochs": straggler_epochs,
        "tentative_deadline": tentative_deadline,
        "checkpoint_replicas": checkpoint_replicas,
        "retire_after": retire_after,
        "fault_tolerance": None if fault_tolerance is None else _policy_flag(fault_tolerance),
    }
    return {k: v for k, v in given.items() if v is not None}


def _policy_flag(text: str) -> Any:
    """``--fault-tolerance``: ``passive``, ``replicated``, ``replicated:R``, ``budget:R`` or
    ``adaptive:T`` as the spec's ``fault_tolerance`` value (anything else goes as given: the
    agent says what is wrong)."""
    policy, _, replicas = text.partition(":")
    if not replicas:
        return {"policy": policy}
    key = {"budget": "replica_budget", "adaptive": "latency_target_ms"}.get(policy, "replicas")
    try:
        return {"policy": policy, key: int(replicas)}
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: the number after ':' must be an integer", param_hint="--fault-tolerance"
        ) from None


@cli.command()
@click.argument("spec_file", type=click.File("r"), required=False)
@click.option("--name", help="Job name (instead of SPEC_FILE).")
@click.option("--job", "job_class", help="Registered job class, e.g. wordcount.")
@click.option("--input", "inputs", multiple=True, help="Input name the job reads.")
@click.option("--epoch-seconds", type=float, help="Epoch length in seconds.")
@click.option("--param", "params", multiple=True, help="KEY=VALUE job parameter (JSON value).")
@click.option("--query", help="An ELF QL query, or a file holding one (with --name).")
@click.option(
    "--allowed-lateness",
    type=float,
    help="Seconds of event time a record may lag the newest one and still count (later ones "
    "are counted as late, never silently dropped).",
)
@fault_options
@api_options
def submit(
    spec_file: Any,
    name: str | None,
    job_class: str | None,
    inputs: tuple[str, ...],
    epoch_seconds: float | None,
    params: tuple[str, ...],
    query: str | None,
    allowed_lateness: float | None,
    straggler_epochs: int | None,
    tentative_deadline: float | None,
    checkpoint_replicas: int | None,
    retire_after: float | None,
    fault_tolerance: str | None,
    api: str,
    token_file: str | None,
    secret_file: str | None,
) -> None:
    """Submit a job: a JSON spec file, --name/--job/... flags, or --name/--query.

    Every flag given is applied or refused with the reason, never ignored: with --query,
    --input sets the inputs of a query FROM * (a FROM naming others is refused),
    --epoch-seconds the epochs of a query without WINDOW (a WINDOW fixes them: refused unless
    equal), --param sets params (the ql job accepts ts_field), --job must be ql; a
    SPEC_FILE takes no other job flag. --allowed-lateness sets allowed_lateness;
    --straggler-epochs, --tentative-deadline, --checkpoint-replicas, --retire-after and
    --fault-tolerance set those spec fields (docs/fault-tolerance.md)."""
    faults = _fault_fields(
        straggler_epochs, tentative_deadline, checkpoint_replicas, retire_after, fault_tolerance
    )
    if allowed_lateness is not None:
        faults["allowed_lateness"] = allowed_lateness  # a SPEC_FILE refuses it as the others
    if spec_file is not None:
        given = [
            flag
            for flag, value in (
                ("--name", name), ("--job", job_class), ("--input", inputs),
                ("--epoch-seconds", epoch_seconds), ("--param", params), ("--query", query),
                *((f"--{k.replace('_', '-')}", v) for k, v in faults.items()),
            )
            if value not in (None, ())
        ]  # fmt: skip
        if given:
            raise click.ClickException(
                f"{', '.join(given)} cannot be combined with SPEC_FILE (the file is the whole "
                "spec; edit it, or submit with flags only)"
            )
    if query is not None:
        from agent.runtime.local.oneshot import query_spec

        if not name:
            raise click.ClickException("--query needs --name")
        if job_class not in (None, "ql"):
            raise click.ClickException(f"--job {job_class} cannot run --query (its class is ql)")
        text = Path(query).read_text() if os.path.isfile(query) else query
        overrides: dict[str, Any] = {}
        if params:
            overrides["params"] = _key_values(params, "--param")
        try:
            spec = query_spec(text, epoch_seconds, **overrides)
        except ValueError as exc:
            raise click.ClickException(f"query: {exc}") from None
        spec["name"], spec["creator"] = name, os.environ.get("USER", "elf")
        if inputs:
            from_inputs = spec["inputs"]
            if from_inputs and sorted(from_inputs) != sorted(inputs):
                raise click.ClickException(
                    f"--input {', '.join(inputs)} disagrees with the query's FROM "
                    f"{', '.join(from_inputs)}; change FROM (or write FROM * and use --input)"
                )
            spec["inputs"] = list(inputs)
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
    spec.update(faults)
    call(api_client(api, token_file, secret_file).submit, spec)


@cli.command()
@api_options
def jobs(api: str, token_file: str | None, secret_file: str | None) -> None:
    """List the cluster's jobs."""
    call(api_client(api, token_file, secret_file).jobs)


@cli.command()
@click.argument("name")
@api_options
def stop(name: str, api: str, token_file: str | None, secret_file: str | None) -> None:
    """Stop a job."""
    call(api_client(api, token_file, secret_file).stop_job, name)


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
@click.option("--emit", type=click.Choice(["final", "changes"]), help="What readers see.")
@fault_options
@api_options
def change(
    name: str,
    sets: tuple[str, ...],
    query_text: str | None,
    top_k: int | None,
    epoch_seconds: float | None,
    aggregator: str | None,
    empty: bool,
    batch: bool,
    emit: str | None,
    straggler_epochs: int | None,
    tentative_deadline: float | None,
    checkpoint_replicas: int | None,
    retire_after: float | None,
    fault_tolerance: str | None,
    api: str,
    token_file: str | None,
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
    if emit is not None:
        body["emit"] = emit
    body.update(
        _fault_fields(
            straggler_epochs, tentative_deadline, checkpoint_replicas, retire_after, fault_tolerance
        )
    )
    if not body:
        raise click.ClickException(
            "nothing to change: give --set, --query, --top-k, --epoch-seconds, --aggregator, "
            "--straggler-epochs, --tentative-deadline, --checkpoint-replicas, --retire-after, "
            "--fault-tolerance, --emit, --empty or --batch"
        )
    call(api_client(api, token_file, secret_file).change, name, body)


@cli.command()
@click.argument("name")
@click.option("--epoch", type=int, help="Epoch index (default: the latest complete one).")
@click.option(
    "--emit",
    type=click.Choice(["final", "changes"]),
    help="final: final and partial versions only; changes: every version (default: the job's).",
)
@click.option("--follow", is_flag=True, help="Follow the results stream until the job stops.")
@click.option("--after", metavar="E:R", help="With --follow: resume after this cursor.")
@api_options
def results(
    name: str,
    epoch: int | None,
    emit: str | None,
    follow: bool,
    after: str | None,
    api: str,
    token_file: str | None,
    secret_file: str | None,
) -> None:
    """Print a job's result for one epoch, fetched from its master.

    Stdout: the result as JSON. Stderr: one line saying whether the epoch is final,
    tentative (waiting for an absent origin) or partial (a retired origin's part is missing
    for good), with the master's term, the result version, its coverage and the origins it
    lacks. --follow: one JSON line per version as the job's masters produce them (under
    --emit final only final and partial ones), each with its line on stderr, until the job
    stops (Ctrl-C: exit 130; every line's ``cursor`` resumes with --after)."""
    if follow or after:
        if epoch is not None or not follow:
            raise click.UsageError("--follow takes no --epoch; --after needs --follow")
        from agent.cli_follow import follow as follow_stream

        client = api_client(api, token_file, secret_file)
        sys.exit(follow_stream(client, name, emit, after))
    reply = fetch(api_client(api, token_file, secret_file).results, name, epoch, emit)
    print_json(reply)
    click.echo(result_line(reply), err=True)


@cli.command()
@click.argument("name")
@click.argument("message")
@api_options
def query(
    name: str, message: str, api: str, token_file: str | None, secret_file: str | None
) -> None:
    """Send a JSON query MESSAGE to a job's master and print its reply."""
    try:
        body = json.loads(message)
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"MESSAGE is not JSON: {exc}") from None
    call(api_client(api, token_file, secret_file).query, name, body)


@cli.command()
@api_options
def status(api: str, token_file: str | None, secret_file: str | None) -> None:
    """Print the agent's status: node id, neighbours, roles and trees per job.

    Stdout: the status as JSON (per job, ``membership``: the origins its masters here count
    absent, retired or left). Stderr: one line per such origin."""
    reply = fetch(api_client(api, token_file, secret_file).status)
    print_json(reply)
    for line in membership_lines(reply):
        click.echo(line, err=True)


@cli.command()
@click.argument("agent_id")
@click.option("--job", help="Retire it from this job only (default: every running job).")
@click.option("--why", help="The reason the masters keep (default: operator).")
@api_options
def retire(
    agent_id: str,
    job: str | None,
    why: str | None,
    api: str,
    token_file: str | None,
    secret_file: str | None,
) -> None:
    """Retire AGENT_ID (its hex node id) as an origin: for an agent gone for good.

    An origin that stops without leaving (kill -9, crash, partition) is absent: the epochs
    after it stay tentative, naming it, until it comes back or is retired. Retired, later
    epochs no longer wait for it and the epochs it missed become partial for good (a job's
    retire_after retires it automatically). The agent at --api asks each master of the job
    (of every running job without --job) and the reply says what each answered; the command
    fails unless every master retired it."""
    client = api_client(api, token_file, secret_file)
    if job is None:
        reply = fetch(client.retire_agent, agent_id, why)
    else:
        reply = fetch(client.retire_origin, job, agent_id, why)
    print_json(reply)
    problem = retire_problem(reply)
    if problem:
        raise click.ClickException(problem)


@cli.command()
@api_options
def leave(api: str, token_file: str | None, secret_file: str | None) -> None:
    """Stop the agent at --api gracefully, exactly as SIGTERM would.

    Its inputs' end is declared to the jobs' masters, so later epochs are final without it
    (an agent killed instead is absent, its epochs tentative until it returns or is
    retired). The agent answers before it stops; its whole process exits."""
    call(api_client(api, token_file, secret_file).leave)


@cli.command()
@click.option("--show-token", is_flag=True, help="Print a link carrying the token (a secret).")
@click.option("--no-browser", is_flag=True, help="Only print the URL.")
@api_options
def dashboard(
    show_token: bool, no_browser: bool, api: str, token_file: str | None, secret_file: str | None
) -> None:
    """Print the agent's live dashboard URL and open it in a browser if one is available.

    The page asks for the API token (kept in the tab's session storage); --show-token prints a
    link whose #token= fragment fills it in. The browser is opened without the token: a
    command line is visible to every local user."""
    client = api_client(api, token_file, secret_file)
    try:
        client.dashboard()  # reachable, and the token is right
    except ApiError as exc:
        raise click.ClickException(str(exc)) from None
    url = client.dashboard_url()
    click.echo(f"dashboard: {url}")
    if show_token:
        click.echo(f"with token (a secret, keep it private): {client.dashboard_url(True)}")
    if not no_browser and _browser_available():
        import webbrowser

        webbrowser.open(url)


def _browser_available() -> bool:
    """A graphical browser can open: a display on Linux/BSD (elsewhere, whatever Python's
    ``webbrowser`` finds); text browsers cannot run the page's scripts."""
    import webbrowser

    if sys.platform.startswith(("linux", "freebsd", "openbsd")) and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return False
    try:
        webbrowser.get()
    except webbrowser.Error:
        return False
    return True


@cli.command()
@click.option("--once", is_flag=True, help="Print one full picture and exit.")
@api_options
def top(once: bool, api: str, token_file: str | None, secret_file: str | None) -> None:
    """A live terminal view of the cluster: jobs, masters, epoch lag, rates, tentative epochs."""
    from rich.console import Console

    from agent.top import run_top

    try:
        run_top(api_client(api, token_file, secret_file), Console(), once=once)
    except ApiError as exc:
        raise click.ClickException(str(exc)) from None
    except KeyboardInterrupt:
        pass


@cli.command()
@click.argument("query")
@click.option(
    "--file",
    "path",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="A finished log file.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(list(FORMATS)),
    help="Line format (default: json if the first line is an object, else nginx).",
)
@click.option(
    "--log-format",
    help="The server's nginx log_format / Apache LogFormat string (with --format nginx or "
    "apache; docs/inputs.md).",
)
@click.option("--epoch-seconds", type=float, help="Epoch length (a query without WINDOW).")
@click.option(
    "--output",
    type=click.Choice(["table", "jsonl", "csv"]),
    default="table",
    show_default=True,
    help="How the per-epoch results are printed.",
)
@click.option("--row-path", is_flag=True, help="Parse line by line (no columnar path).")
@click.option(
    "--allowed-lateness",
    type=click.FloatRange(min=0),
    help="Apply an agent's lateness rule: a row whose epoch ended this many seconds before the "
    "newest timestamp so far is late (left out, counted per epoch). Default: none is late.",
)
@click.option(
    "--cores",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="Worker processes parsing and pre-aggregating chunks.",
)
def run(query: str, path: str, fmt: str | None, log_format: str | None,
        epoch_seconds: float | None, output: str, row_path: bool, cores: int,
        allowed_lateness: float | None) -> None:  # fmt: skip
    """Run QUERY (ELF QL, or a file holding it) over a finished file, locally: epochs from
    the file's own timestamps (none late unless --allowed-lateness; late rows are counted
    on stderr), per-epoch results printed."""
    text = Path(query).read_text() if os.path.isfile(query) else query
    line_format: Any = fmt
    if log_format is not None:
        line_format = _custom_format(fmt, log_format)
    try:
        result = run_with_progress(
            text, path, line_format, epoch_seconds, columnar=not row_path, processes=cores,
            allowed_lateness=allowed_lateness,
        )  # fmt: skip
    except (ValueError, QLError) as exc:
        raise click.ClickException(str(exc)) from None
    print_results(result, output)


def _custom_format(fmt: str | None, log_format: str) -> Any:
    """``--log-format`` with ``--format``: the input format ``elf run`` parses with (a
    :class:`~agent.log_format.LogFormat`, or the name when the string is one the built-in
    parser reads), checked as an input's ``log_format`` in a configuration is."""
    from agent.config import checked_log_format
    from agent.log_format import LogFormat

    if fmt is None:
        raise click.UsageError(
            "--log-format needs --format nginx or --format apache (the dialect of the string)"
        )
    try:
        text = checked_log_format(fmt, log_format, "--log-format")
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    return fmt if text is None else LogFormat(fmt, text)


def run_with_progress(
    text: str, path: str, fmt: Any, epoch_seconds: float | None, *, columnar: bool,
    processes: int = 1, allowed_lateness: float | None = None,
) -> Any:  # fmt: skip
    """:func:`agent.runtime.local.oneshot.run_file`, with a progress bar (rich, on stderr) when
    stderr is a terminal."""
    from agent.runtime.local.oneshot import run_file

    kw = {"epoch_seconds": epoch_seconds, "columnar": columnar, "processes": processes,
          "allowed_lateness": allowed_lateness}  # fmt: skip
    if not sys.stderr.isatty():
        return run_file(text, path, fmt, **kw)
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}", BarColumn(), DownloadColumn(),
        TimeRemainingColumn(), console=Console(stderr=True), transient=True,
    ) as bar:  # fmt: skip
        task = bar.add_task(Path(path).name, total=Path(path).stat().st_size)
        return run_file(
            text, path, fmt, **kw,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )  # fmt: skip


def print_results(result: Any, output: str) -> None:
    """Per-epoch rows as a table (rich), JSON lines or CSV on stdout; counts on stderr."""
    import csv

    from agent.jsonable import jsonable

    if result.sessions is not None:  # WINDOW SESSION: one row per session, bounds in it
        columns, rows = list(result.columns), result.sessions
    else:
        columns = ["epoch", "epoch_start", *result.columns]
        rows = [
            {"epoch": e, "epoch_start": e * result.epoch_seconds, **row}
            for e, epoch_rows in result.epochs
            for row in epoch_rows
        ]
    if output == "jsonl":
        for row in rows:
            click.echo(json.dumps(jsonable(row), ensure_ascii=False))
    elif output == "csv":
        writer = csv.DictWriter(sys.stdout, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(jsonable(row))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(*columns)
        for row in rows:
            table.add_row(*(json.dumps(jsonable(row.get(c)), ensure_ascii=False) for c in columns))
        Console().print(table)
    stats = result.input
    late = getattr(result, "late", {})
    click.echo(
        f"{stats['lines']} lines, {stats['records']} records, {stats['rejected']} rejected, "
        f"{len(result.epochs)} epochs, {sum(late.values())} late"
        + ("" if result.sessions is None else f", {len(result.sessions)} sessions"),
        err=True,
    )
    if late:  # never silent: which epochs' rows lack how many late records
        worst = sorted(late.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
        click.echo(
            "late (later than --allowed-lateness, not in the rows): "
            + ", ".join(f"epoch {e}: {n}" for e, n in worst)
            + (f" (+{len(late) - 5} more epochs)" if len(late) > 5 else ""),
            err=True,
        )


def load_commands(group: click.Group, ep_group: str = COMMANDS_GROUP) -> list[str]:
    """Add the click commands installed distributions declare in ``ep_group`` to ``group``,
    each under its entry-point name; returns the names added. An entry point that fails to
    load, is not a click command, or would replace a command already there is logged and
    skipped."""
    added = []
    for ep in entry_points(group=ep_group):
        try:
            command = ep.load()
        except Exception as exc:
            log.warning("elf: command %r (%s) failed to load: %r", ep.name, ep.value, exc)
            continue
        if not isinstance(command, click.Command):
            log.warning("elf: command %r (%s) is not a click command", ep.name, ep.value)
        elif group.commands.get(ep.name) is command:
            continue  # the same distribution seen twice on sys.path (e.g. an egg-info in cwd)
        elif ep.name in group.commands:
            log.warning("elf: command %r (%s) is already defined; skipped", ep.name, ep.value)
        else:
            group.add_command(command, ep.name)
            added.append(ep.name)
    return added


# this package's commands kept in their own modules, before the plugged-in ones
cli.add_command(tap)
cli.add_command(spark)
load_commands(cli)


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
