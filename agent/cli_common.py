"""What ``elf`` subcommands that talk to an agent's HTTP API share: the connection options,
the client they build, and how results and errors are printed.

Contract: :func:`api_options` adds ``--api`` (``ELF_API``, default ``http://127.0.0.1:7480``),
``--token`` (``ELF_TOKEN``) and ``--secret-file`` (``ELF_SECRET_FILE``) to a click command;
:func:`api_client` turns them into an :class:`~agent.client.ApiClient` (the token, else one
derived from the cluster secret file; neither is a :class:`click.ClickException`);
:func:`print_json` prints indented, key-sorted JSON; :func:`call` prints what an API call
returns and turns an :class:`~agent.client.ApiError` into a one-line ``ClickException``.

Used by the commands of :mod:`agent.cli` and by the ones installed through the
``elf.commands`` entry-point group (e.g. ``elf generate`` in ``apps``), so every command
takes the same flags. This module holds no state.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from agent.client import ApiClient, ApiError
from agent.config import derive_api_token, read_secret
from agent.errors import ConfigError

DEFAULT_API = "http://127.0.0.1:7480"

F = TypeVar("F", bound=Callable[..., Any])


def api_client(api: str, token: str | None, secret_file: str | None) -> ApiClient:
    """The client for ``--api``, authenticated by ``--token`` or ``--secret-file``."""
    if not token:
        if not secret_file:
            raise click.ClickException("no API token: pass --token or --secret-file")
        try:
            token = derive_api_token(read_secret(secret_file))
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    return ApiClient(api, token)


def api_options(fn: F) -> F:
    """Decorator: the ``--api``, ``--token`` and ``--secret-file`` options."""
    fn = click.option("--secret-file", envvar="ELF_SECRET_FILE", help="Derive the token.")(fn)
    fn = click.option("--token", envvar="ELF_TOKEN", help="API token.")(fn)
    return click.option("--api", envvar="ELF_API", default=DEFAULT_API, show_default=True)(fn)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True))


def call(fn: Callable[..., Any], *args: Any) -> None:
    """Print ``fn(*args)`` as JSON; an API error exits with its one-line message."""
    try:
        print_json(fn(*args))
    except ApiError as exc:
        raise click.ClickException(str(exc)) from None
