"""The ``twin`` typer app (run it through ``twin.cli.main``): its commands and sub-apps are
registered by name in ``twin.cli.lazy.COMMANDS`` and imported when run, so ``twin --help``
imports none of them."""

from __future__ import annotations

import typer

from twin.cli.lazy import LazyGroup
from twin.cli.rich_help import defer_unused_rich

defer_unused_rich()  # before typer formats any help

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
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        from twin import __version__

        print(f"twin {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version."
    ),
) -> None:
    """Predict how an LLM serving cluster performs before you buy GPUs."""
