"""The ``twin`` command line: one typer app with a sub-app per noun."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from twin import __version__
from twin.cli import calibrate, cost, models, replay, report, simulate, validate, workload
from twin.errors import TwinError

app = typer.Typer(
    name="twin",
    help=(
        "Predict how an LLM serving cluster performs before you buy GPUs.\n\n"
        "Examples:\n\n"
        "  twin models list\n\n"
        "  twin workload generate chat --sessions 100 -o chat.parquet\n\n"
        "  twin workload info chat.parquet\n\n"
        "  twin cost --model marconi-hybrid-7b --gpu h100"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(models.app, name="models")
app.add_typer(workload.app, name="workload")
app.add_typer(report.app, name="report")
app.command("simulate")(simulate.simulate)
app.command("replay")(replay.replay)
app.command("calibrate")(calibrate.calibrate)
app.command("cost")(cost.cost)
app.command("validate")(validate.validate)


def _version_callback(value: bool) -> None:
    if value:
        print(f"twin {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """Predict how an LLM serving cluster performs before you buy GPUs."""


def main() -> None:
    """Console entry point: user errors become one line on stderr and exit status 2.

    Typer runs standalone, so it reports usage errors (a bad flag or value)
    itself, with exit status 2; every other user error is a ``TwinError``.
    """
    try:
        app()
    except TwinError as err:
        Console(stderr=True).print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        sys.exit(2)
