"""The ``twin`` typer app: one sub-app per noun (run it through ``twin.cli.main``)."""

from __future__ import annotations

import typer

from twin import __version__
from twin.cli import (
    calibrate,
    cost,
    models,
    plan,
    replay,
    report,
    reproduce,
    simulate,
    validate,
    workload,
)

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
app.command("simulate", epilog=simulate.engine_flags_help())(simulate.simulate)
app.command("replay")(replay.replay)
app.command("calibrate")(calibrate.calibrate)
app.command("cost")(cost.cost)
app.command("validate")(validate.validate)
app.command("reproduce")(reproduce.reproduce_cmd)
app.command("plan")(plan.plan_cmd)


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
