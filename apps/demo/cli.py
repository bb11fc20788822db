"""The ``elf demo`` command: its options, turned into a :class:`~apps.demo.state.DemoConfig`
for :func:`~apps.demo.run.run_demo`.

Contract: installed through the ``elf.commands`` entry-point group (``pyproject.toml``);
:mod:`agent.cli` adds it at start without importing ``apps``. Importing this module costs
only ``click``: the demo's modules (and through them the agent runtime) load when the command
runs, so every other ``elf`` command starts as fast as before. Invalid options exit with a
one-line error; otherwise the process exits with the demo's code (0, 1 or 130).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command("demo")
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
def demo_command(
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
    from apps.demo.run import run_demo  # the demo itself only when it runs
    from apps.demo.state import DemoConfig

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
