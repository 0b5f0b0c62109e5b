"""Helpers shared by the CLI commands: JSON output and progress bars."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Protocol

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from twin.errors import TwinError

# Tables and bars go to stderr-free stdout; progress goes to stderr so that
# ``--json`` output stays pipeable.
console = Console()
err_console = Console(stderr=True)


class Advance(Protocol):
    """A progress bar's ``advance(amount=1)``: callable with or without an amount."""

    def __call__(self, amount: float = 1, /) -> None: ...


def parse_pairs(pairs: list[str], flag: str, example: str) -> dict[str, str]:
    """``KEY=VALUE`` flag values as a dict; a ``TwinError`` naming the flag on a malformed one."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise TwinError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} {example}")
        parsed[key.strip()] = value.strip()
    return parsed


def _option_value(text: str) -> Any:
    """A policy option's value: int, then float, then the string itself."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text


def policy_options(pairs: list[str]) -> dict[str, Any]:
    """``--policy-option KEY=VALUE`` values as keyword options (dashes read as underscores)."""
    options = parse_pairs(pairs, "--policy-option", "alpha=1.0")
    return {key.replace("-", "_"): _option_value(value) for key, value in options.items()}


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (plain print: no markup, pipeable)."""
    print(json.dumps(data, indent=2))


@contextlib.contextmanager
def progress_bar(description: str, total: float | None, unit: str = "") -> Iterator[Advance]:
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

        def advance(amount: float = 1) -> None:
            progress.advance(task, amount)

        yield advance


# Options shared by the commands that build a cluster (simulate, report capacity).
ModelOption = Annotated[
    str,
    typer.Option(
        "--model", "-m", help="Preset model name (see `twin models list`) or a config.json."
    ),
]
GpuOption = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        help="Shipped profile by GPU name (h100, b200, l40s, a100, ...; default h100): "
        "measured from NVIDIA's kernel tables where they cover the GPU, else the datasheet "
        "roofline; NAME-datasheet forces the datasheet one.",
    ),
]
EngineOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="Whose kernels price the steps: vllm (default), sglang or trtllm "
        "(twin.costmodel.kernel_sources).",
    ),
]
ProfileOption = Annotated[
    Path | None,
    typer.Option("--profile", help="A profile file from `twin calibrate` instead of --gpu."),
]
ModelSetOption = Annotated[
    list[str],
    typer.Option(
        "--model-set",
        help="Override a model field, FIELD=VALUE, repeatable "
        "(e.g. --model-set n_ssm_layers=32 --model-set ssm_d_state=16).",
    ),
]
PolicyOptionOption = Annotated[
    list[str],
    typer.Option(
        "--policy-option",
        help="KEY=VALUE for the policy, repeatable (e.g. alpha=1.0, bootstrap_multiplier=15).",
    ),
]
ReplicasOption = Annotated[int, typer.Option("--replicas", "-r", min=1, help="Model replicas.")]
TpOption = Annotated[int, typer.Option("--tp", min=1, help="Tensor-parallel GPUs per replica.")]


def format_ms(seconds: float | None, digits: int = 1) -> str:
    """Seconds as milliseconds for a table; ``-`` for a missing (None or NaN) value."""
    if seconds is None or seconds != seconds:
        return "-"
    return f"{1e3 * seconds:,.{digits}f}"


def format_pct(x: float | None) -> str:
    """A fraction as a percentage with one decimal; ``-`` for a missing value."""
    return "-" if x is None or x != x else f"{x:.1%}"


_UNTUNED = ("warmup", "window", "untuned")


def alpha_label(alpha: float | None, source: str) -> str:
    """A Marconi alpha and where it came from: ``0.3 (tuned)``, ``0.0 (untuned)``, ``-``."""
    if alpha is None:
        return "-"
    return f"{alpha:.1f} ({'untuned' if source in _UNTUNED else source})"


def format_bytes(n: float) -> str:
    """Decimal units, as the papers quote them (17.4 GB)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
