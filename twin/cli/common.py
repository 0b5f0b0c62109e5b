"""Helpers shared by the CLI commands: JSON output and progress bars."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Protocol

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from twin.errors import TwinError
from twin.limits import MAX_JOBS, check_json_depth

# Tables and bars go to stderr-free stdout; progress goes to stderr so that
# ``--json`` output stays pipeable.
# Width of piped output (no terminal to measure; $COLUMNS still wins): wide
# enough for every table, so logs and README snippets show them whole.
PIPE_WIDTH = 160


class _TableConsole(Console):
    """A console whose tables never cut a cell: a number squeezed by a narrow
    terminal wraps onto a second line (``fold``) instead of ending in ``…``."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        for obj in objects:
            if isinstance(obj, Table):
                for column in obj.columns:
                    column.overflow = "fold"
                    column.no_wrap = False
        super().print(*objects, **kwargs)


console = _TableConsole(
    width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else PIPE_WIDTH
)
err_console = Console(stderr=True)


class Advance(Protocol):
    """A progress bar's ``advance(amount=1)``: callable with or without an amount."""

    def __call__(self, amount: float = 1, /) -> None: ...


def comma_list(flag: str, text: str, example: str = "", sep: str = ",") -> list[str]:
    """A comma-separated option's entries, stripped (``sep``: the pattern they are split
    on); one line refusing an empty entry (``1,2,,3`` is a typo, not three values)."""
    items = [t.strip() for t in re.split(sep, text)]
    if not all(items):
        eg = f", e.g. {example}" if example else ""
        raise TwinError(f"{flag} {text!r}: an empty entry; expected a comma-separated list{eg}")
    return items


def command_line(*words: str) -> str:
    """The command as typed, ``twin`` then ``words`` (the subcommand) and its arguments;
    click keeps no raw argv, so sys.argv is read when it is ours (under a test runner or
    another host program it is not, and a generic line is used)."""
    args = sys.argv[1:]
    if args[: len(words)] == list(words):
        return shlex.join(["twin", *args])
    return f"twin {' '.join(words)} (invoked programmatically)"


def parse_pairs(pairs: list[str], flag: str, example: str) -> dict[str, str]:
    """``KEY=VALUE`` flag values as a dict; a ``TwinError`` naming the flag on a malformed one."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise TwinError(f"{flag} {pair!r}: expected KEY=VALUE, e.g. {flag} {example}")
        parsed[key.strip()] = value.strip()
    return parsed


def policy_options(pairs: list[str], policies: list[str]) -> dict[str, Any]:
    """``--policy-option KEY=VALUE`` values as keyword options (dashes read as underscores),
    typed and checked for ``policies`` before any work (``twin.cli.checks.policy_options``)."""
    from twin.cli import checks

    options = parse_pairs(pairs, "--policy-option", "alpha=1.0")
    return checks.policy_options(
        policies, {key.replace("-", "_"): value for key, value in options.items()}
    )


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout (plain print: no markup, pipeable)."""
    print(json.dumps(data, indent=2))


# Seconds between plain progress lines when stderr is not a terminal (CI logs, pipes).
PLAIN_PROGRESS_EVERY_S = 15.0
# Fractional progress (a sweep's points advance in parts) adds up in floating point:
# six points may sum to 5.999999999. Counts and percentages are read this close up.
_PROGRESS_SLACK = 1e-6


def progress_counts(done: float, total: float) -> tuple[int, int]:
    """The whole units done and the whole percent done, both rounded down (with a
    float sum's slack), so they agree: never ``5/6 (100%)``, and ``6/6`` only at 100%."""
    count = min(int(total), math.floor(done + _PROGRESS_SLACK))
    pct = min(100, math.floor(100 * done / total + _PROGRESS_SLACK)) if total > 0 else 0
    return max(0, count), max(0, pct)


class _CountColumn(ProgressColumn):
    """``5/6  83%`` from :func:`progress_counts` (rich rounds the percentage half up
    while it cuts the count down, which showed ``5/6 100%`` at 5.97 of 6)."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text(f"{math.floor(task.completed + _PROGRESS_SLACK):,}")
        count, pct = progress_counts(task.completed, task.total)
        return Text(f"{count:,}/{task.total:,.0f} {pct:>3d}%")


class _PlainProgress:
    """Progress as an occasional plain line (``points: 3/12 (25%), 41 s``) for logs.

    A rich bar redraws in place, which only a terminal can show; piped or CI
    runs would otherwise print nothing for minutes.
    """

    def __init__(self, description: str, total: float | None, unit: str) -> None:
        self.description, self.total, self.unit = description, total, unit
        self.done = 0.0
        self.start = self.last = time.monotonic()

    def advance(self, amount: float = 1) -> None:
        self.done += amount
        now = time.monotonic()
        if now - self.last >= PLAIN_PROGRESS_EVERY_S:
            self.last = now
            self.line(now)

    def line(self, now: float) -> None:
        if self.unit == "bytes":
            count = f"{self.done / 1e6:,.1f} MB"
            if self.total:
                count += f" of {self.total / 1e6:,.1f} MB"
        elif self.total:
            count = f"{progress_counts(self.done, self.total)[0]:,}/{self.total:,.0f}"
        else:
            count = f"{math.floor(self.done + _PROGRESS_SLACK):,}"
        pct = f" ({progress_counts(self.done, self.total)[1]}%)" if self.total else ""
        err_console.print(
            f"{self.description}: {count}{pct}, {now - self.start:,.0f} s elapsed",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )


@contextlib.contextmanager
def progress_bar(description: str, total: float | None, unit: str = "") -> Iterator[Advance]:
    """Show progress on stderr; yield ``advance(amount)``.

    A rich bar on a terminal; elsewhere a plain line every
    ``PLAIN_PROGRESS_EVERY_S`` seconds (none for work quicker than that).
    """
    if not err_console.is_terminal:
        plain = _PlainProgress(description, total, unit)
        yield plain.advance
        return
    count = _CountColumn() if unit != "bytes" else TextColumn("{task.percentage:>3.0f}%")
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        count,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task(description, total=total)

        def advance(amount: float = 1) -> None:
            progress.advance(task, amount)

        yield advance


def model_file(value: Any) -> Any:
    """``--model`` / ``--config`` callback: a config file nested past ``MAX_JSON_DEPTH`` is
    refused before it is decoded (json's decoder recursed to a RecursionError, issue 32)."""
    if value is not None and str(value).endswith(".json") and Path(value).is_file():
        try:
            text = Path(value).read_bytes()
        except OSError:
            return value  # the reader reports it, naming the file
        check_json_depth(text, str(value))
    return value


# Options shared by the commands that take a model (simulate, report capacity, plan, cost, ...).
ModelOption = Annotated[
    str,
    typer.Option(
        "--model",
        "-m",
        help="Preset model name (see `twin models list`) or a config.json.",
        callback=model_file,
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
EngineModeOption = Annotated[
    str | None,
    typer.Option(
        "--engine",
        help="Engine mode (twin.engine.modes): vllm, sglang (their caching, preemption, "
        "flags and kernels), trtllm (its kernels); default: the Marconi paper's world "
        "priced with vLLM's kernels.",
    ),
]
SetOption = Annotated[
    list[str],
    typer.Option(
        "--set",
        help="An engine flag by the engine's own name, NAME=VALUE, repeatable "
        "(e.g. --engine sglang --set mamba_radix_cache_strategy=extra_buffer).",
    ),
]
CacheGbOption = Annotated[
    str,
    typer.Option(
        "--cache-gb",
        help="auto: one KV pool per replica shared by running requests and the prefix "
        "cache (the engines); G: a dedicated cache of G GB (1e9 bytes) beside the "
        "running requests' memory (the Marconi paper).",
    ),
]


def engine_sets(pairs: list[str]) -> dict[str, str]:
    """``--set NAME=VALUE`` values as a dict (the engine mode checks the names)."""
    return parse_pairs(pairs, "--set", "max_num_seqs=128")


PrecisionOption = Annotated[
    str | None,
    typer.Option(
        "--precision",
        help="Weights and activations of the linear layers: bf16 (default), fp8, fp8-block, "
        "nvfp4, mxfp4 or int4 (MoE experts follow it; twin.precision). Changes the weight bytes "
        "and the GEMM fits; a profile without that precision's fit refuses it.",
    ),
]
KvDtypeOption = Annotated[
    str | None,
    typer.Option(
        "--kv-dtype",
        help="The KV cache: bf16 (default) or fp8 (half the bytes per token, the profile's "
        "fp8-KV attention fits where it has them). Recurrent states keep their width.",
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
EpOption = Annotated[
    int,
    typer.Option(
        "--ep",
        min=1,
        help="Expert-parallel ranks among the --tp GPUs (MoE models): the routed experts "
        "dealt out N ways, each split tp/N ways.",
    ),
]
DpAttentionOption = Annotated[
    int,
    typer.Option(
        "--dp-attention",
        min=1,
        help="Attention data-parallel ranks among the --tp GPUs (SGLang --dp D "
        "--enable-dp-attention, TensorRT-LLM enable_attention_dp): each rank its own "
        "batch and KV, attention over tp/D GPUs, the FFN/MoE over all tp on every rank's "
        "tokens, the ranks in lockstep.",
    ),
]
PpOption = Annotated[
    int,
    typer.Option(
        "--pp",
        min=1,
        help="Pipeline-parallel stages per replica, each on its own --tp GPUs (vLLM "
        "--pipeline-parallel-size, SGLang --pp-size): the layers split over them, "
        "micro-batches in flight through them.",
    ),
]
# Options of the commands that run many points (report capacity, reproduce).
JobsOption = Annotated[
    int,
    typer.Option(
        "--jobs",
        "-j",
        min=1,
        max=MAX_JOBS,
        help="Worker processes (1: in-process, deterministic order).",
    ),
]
ExecutorOption = Annotated[
    str,
    typer.Option(
        "--executor",
        help="Where points run: local (processes) or ray (tasks; needs pip install 'twin\\[ray]').",
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address", help="Ray cluster to join (default: $RAY_ADDRESS, else a local ray)."
    ),
]


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
