"""The ``elf`` command-line interface.

One click group; each subsystem adds its subcommands here (``agent``, ``cluster``, ``demo``,
``submit``... arrive with the issues that build them). The group itself only knows the
version and help.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import click


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


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
