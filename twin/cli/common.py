"""Helpers shared by the CLI commands: JSON output and progress bars."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

# Tables and bars go to stderr-free stdout; progress goes to stderr so that
# ``--json`` output stays pipeable.
console = Console()
err_console = Console(stderr=True)


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (plain print: no markup, pipeable)."""
    print(json.dumps(data, indent=2))


@contextlib.contextmanager
def progress_bar(
    description: str, total: float | None, unit: str = ""
) -> Iterator[Callable[[float], None]]:
    """Show a rich progress bar on stderr; yield ``advance(amount)``."""
    count = MofNCompleteColumn() if unit != "bytes" else TextColumn("")
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        count,
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        # Piped or captured output gets no bar (and no blank lines where it was).
        disable=not err_console.is_terminal,
    ) as progress:
        task = progress.add_task(description, total=total)
        yield lambda amount=1: progress.advance(task, amount)
