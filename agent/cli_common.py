"""What ``elf`` subcommands that talk to an agent's HTTP API share: the connection options,
the client they build, and how results and errors are printed.

Contract: :func:`api_options` adds ``--api`` (``ELF_API``, default ``http://127.0.0.1:7480``),
``--token-file`` (``ELF_TOKEN_FILE``) and ``--secret-file`` (``ELF_SECRET_FILE``) to a click
command; :func:`api_client` turns them into an :class:`~agent.client.ApiClient`, authenticated
by, in this order: the token file, the ``ELF_TOKEN`` environment variable, a token derived from
the cluster secret file (none of them: a :class:`click.ClickException`). Secrets never come
from the command line, where every local user sees them (``ps``, ``/proc/<pid>/cmdline``): a
``--token`` flag is **refused** with a message naming the alternatives, before anything runs
(not deprecated with a warning: by the time a warning prints, the token has been visible). Token
and secret files readable by others are refused (:mod:`agent.private_files`).
:func:`print_json` prints indented, key-sorted JSON; :func:`fetch` returns what an API call
returns, :func:`call` prints it; both turn an :class:`~agent.client.ApiError` into a one-line
``ClickException``.

Used by the commands of :mod:`agent.cli` and by the ones installed through the
``elf.commands`` entry-point group (e.g. ``elf generate`` in ``apps``), so every command
takes the same flags. This module holds no state.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from agent.client import ApiClient, ApiError
from agent.config import derive_api_token, read_secret, read_token
from agent.errors import ConfigError

DEFAULT_API = "http://127.0.0.1:7480"

F = TypeVar("F", bound=Callable[..., Any])


TOKEN_FLAG_REFUSED = (
    "--token is refused: a token on the command line is visible to every local user (ps). "
    "Use --token-file FILE (mode 600), the ELF_TOKEN environment variable, or --secret-file."
)


def api_client(
    api: str,
    token_file: str | None,
    secret_file: str | None,
    env: dict[str, str] | None = None,
) -> ApiClient:
    """The client for ``--api``, authenticated by ``--token-file``, else ``ELF_TOKEN`` (from
    ``env``, default ``os.environ``), else a token derived from ``--secret-file``."""
    env = dict(os.environ) if env is None else env
    try:
        if token_file:
            token = read_token(token_file, f"--token-file {token_file}")
        elif env.get("ELF_TOKEN", "").strip():
            token = env["ELF_TOKEN"].strip()
        elif secret_file:
            token = derive_api_token(read_secret(secret_file, f"--secret-file {secret_file}"))
        else:
            raise click.ClickException(
                "no API token: pass --token-file or --secret-file, or set ELF_TOKEN"
            )
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    return ApiClient(api, token)


def _refuse_token_flag(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        raise click.UsageError(TOKEN_FLAG_REFUSED, ctx)


def api_options(fn: F) -> F:
    """Decorator: the ``--api``, ``--token-file`` and ``--secret-file`` options (the command
    receives ``api``, ``token_file`` and ``secret_file``), and a hidden ``--token`` that only
    exists to be refused with a useful message instead of "no such option"."""
    fn = click.option("--secret-file", envvar="ELF_SECRET_FILE", help="Derive the token.")(fn)
    fn = click.option(
        "--token",
        hidden=True,
        expose_value=False,
        is_eager=True,
        callback=_refuse_token_flag,
        help="Refused (visible in ps).",
    )(fn)
    fn = click.option(
        "--token-file",
        envvar="ELF_TOKEN_FILE",
        type=click.Path(dir_okay=False),
        help="API token file (or ELF_TOKEN).",
    )(fn)
    return click.option("--api", envvar="ELF_API", default=DEFAULT_API, show_default=True)(fn)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def fetch(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``; an API error exits with its one-line message."""
    try:
        return fn(*args)
    except ApiError as exc:
        raise click.ClickException(str(exc)) from None


def call(fn: Callable[..., Any], *args: Any) -> None:
    """Print ``fn(*args)`` as JSON; an API error exits with its one-line message."""
    print_json(fetch(fn, *args))
