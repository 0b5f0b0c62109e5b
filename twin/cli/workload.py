"""``twin workload``: generate, import, export and describe workloads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from twin.cli import checks
from twin.cli.common import console, parse_pairs, print_json, progress_bar
from twin.errors import TwinError
from twin.limits import DEFAULT_MAX_CONTEXT, MAX_SESSIONS
from twin.workloads.generators import GENERATORS, get_generator
from twin.workloads.importers import IMPORTERS, get_importer

# What reads and writes workloads (numpy, pyarrow) is imported in each command's body: a
# help lists the kinds and formats only (issue 33).

app = typer.Typer(help="Generate, import, export and describe workloads.", no_args_is_help=True)


# ``twin workload generate`` flags that set the ``fixed`` kind's knobs (``--set`` works too).
_FIXED_FLAGS = {
    "isl": "--isl",
    "osl": "--osl",
    "isl_dist": "--isl-dist",
    "osl_dist": "--osl-dist",
    "isl_spread": "--isl-spread",
    "osl_spread": "--osl-spread",
    "prefix_len": "--prefix-len",
    "prefix_share": "--prefix-share",
}


@app.command()
def generate(
    kind: str = typer.Argument(..., help=f"Workload kind: {', '.join(GENERATORS)}."),
    out: Path = typer.Option(..., "--out", "-o", help="Output parquet file."),
    sessions: int | None = typer.Option(
        None,
        "--sessions",
        "-n",
        min=1,
        max=MAX_SESSIONS,
        help="Number of sessions (default 100; or --duration).",
    ),
    duration: float | None = typer.Option(
        None,
        "--duration",
        help="Instead of --sessions: every session whose start is before this many seconds.",
    ),
    session_rate: float = typer.Option(
        1.0, "--session-rate", min=1e-9, help="Poisson session arrival rate, sessions/s."
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Random seed: same seed, same file."),
    max_context: int = typer.Option(
        DEFAULT_MAX_CONTEXT,
        "--max-context",
        min=16,
        help="Longest prompt + output of any turn, in tokens.",
    ),
    knobs: list[str] = typer.Option(
        [], "--set", help="Override a per-kind knob, KEY=VALUE (see `twin workload kinds`)."
    ),
    isl: int | None = typer.Option(
        None, "--isl", help="fixed: input tokens per request, shared prefix included (1024)."
    ),
    osl: int | None = typer.Option(
        None, "--osl", help="fixed: output tokens per request, exactly (128)."
    ),
    isl_dist: str | None = typer.Option(
        None, "--isl-dist", help="fixed: input lengths fixed, uniform or lognormal (fixed)."
    ),
    osl_dist: str | None = typer.Option(
        None, "--osl-dist", help="fixed: output lengths fixed, uniform or lognormal (fixed)."
    ),
    isl_spread: float | None = typer.Option(
        None,
        "--isl-spread",
        help="fixed: uniform: lengths in isl x [1-s, 1+s] (s < 1); lognormal: sigma.",
    ),
    osl_spread: float | None = typer.Option(
        None, "--osl-spread", help="fixed: as --isl-spread, for output lengths."
    ),
    prefix_len: int | None = typer.Option(
        None, "--prefix-len", help="fixed: tokens of one prefix shared across requests (0)."
    ),
    prefix_share: float | None = typer.Option(
        None, "--prefix-share", help="fixed: fraction of requests with the prefix (1.0)."
    ),
) -> None:
    """Generate a synthetic workload with Poisson session arrivals.

    --sessions N writes N sessions (100 when neither is given); --duration D
    writes every session that starts in the first D seconds (the same first
    sessions as -n with the same seed). The fixed kind is benchmark load, as
    vllm bench serve --dataset-name random sends: one request per session, of
    --isl input and exactly --osl output tokens.

    Examples:

      twin workload generate chat --sessions 200 --session-rate 0.5 --seed 1 -o chat.parquet

      twin workload generate swebench -n 50 --set keep_observations=3 -o swe.parquet

      twin workload generate doc-qa -n 100 --set docs_max=2 -o docqa.parquet

      twin workload generate fixed --isl 1024 --osl 128 --session-rate 4 --duration 60 \\
          -o fixed.parquet

      twin workload generate fixed --isl 2048 --osl 256 --isl-dist uniform --isl-spread 0.2 \\
          --prefix-len 512 --prefix-share 0.5 -n 200 -o fixed-prefix.parquet
    """
    from twin.workloads.generators.base import KnobError
    from twin.workloads.writer import WorkloadWriter

    if sessions is not None and duration is not None:
        raise TwinError("--sessions and --duration are mutually exclusive: give one")
    checks.number("--duration", duration, low=0, low_open=True)
    checks.number("--session-rate", session_rate, low=0, low_open=True)
    if duration is not None and duration * session_rate > MAX_SESSIONS:
        raise TwinError(
            f"--duration {duration:g} at --session-rate {session_rate:g}: about "
            f"{duration * session_rate:,.0f} sessions; at most {MAX_SESSIONS:,} in one workload"
        )
    checks.out_file("--out", out)
    gen_cls = get_generator(kind)
    overrides = parse_pairs(knobs, "--set", "mean_turns=6")
    flagged = {
        name: value
        for name, value in (
            ("isl", isl),
            ("osl", osl),
            ("isl_dist", isl_dist),
            ("osl_dist", osl_dist),
            ("isl_spread", isl_spread),
            ("osl_spread", osl_spread),
            ("prefix_len", prefix_len),
            ("prefix_share", prefix_share),
        )
        if value is not None
    }
    try:
        params = gen_cls.parse_params(_with_flags(kind, overrides, flagged))
    except KnobError as err:
        if err.name not in flagged:
            raise
        # Named as the user gave it: --isl 0, not --set isl=0.
        raise TwinError(f"{_FIXED_FLAGS[err.name]} {err.value}: {err.why}") from None
    gen = gen_cls(params)
    n_sessions = sessions if sessions is not None or duration is not None else 100
    metadata = gen.metadata(n_sessions, session_rate, seed, max_context, duration)
    written = 0
    with (
        progress_bar(f"generating {kind}", metadata["sessions"]) as advance,
        WorkloadWriter(out, metadata) as writer,
    ):
        for row in gen.rows(n_sessions, session_rate, seed, max_context, duration):
            writer.write(row)
            if row.turn == 0:
                written += 1
                advance(1)
    console.print(
        f"wrote {writer.rows_written:,} requests in {written:,} sessions "
        f"({writer.input_tokens_written:,} stored input tokens) to {out}"
    )


def _with_flags(
    kind: str, overrides: dict[str, str], flagged: Mapping[str, object]
) -> dict[str, str]:
    """``--set`` knobs plus the fixed kind's own flags; a flag for another kind, or a
    knob given both ways, is refused naming the flag."""
    for name in flagged:
        flag = _FIXED_FLAGS[name]
        if kind != "fixed":
            raise TwinError(f"{flag}: only the 'fixed' kind takes it, not {kind!r}")
        if name in overrides:
            raise TwinError(f"{flag} and --set {name}=... both given: give one")
    return {**overrides, **{name: str(value) for name, value in flagged.items()}}


@app.command()
def kinds() -> None:
    """List the workload kinds with their knobs, defaults and sources.

    Example:

      twin workload kinds
    """
    for name, gen_cls in GENERATORS.items():
        table = Table(title=f"{name}: {gen_cls.description}", title_justify="left")
        for col in ("knob", "default", "meaning", "source"):
            table.add_column(col)
        defaults = gen_cls.Params()
        for f in fields(gen_cls.Params):
            table.add_row(
                f.name,
                str(getattr(defaults, f.name)),
                escape(f.metadata.get("help", "")),  # "[min, max]" is not markup
                escape(f.metadata.get("source", "")),
            )
        console.print(table)


@app.command("import")
def import_(
    fmt: str = typer.Argument(..., metavar="FORMAT", help=f"Trace format: {', '.join(IMPORTERS)}."),
    src: Path = typer.Argument(..., metavar="IN", help="Trace file to import."),
    out: Path = typer.Option(..., "--out", "-o", help="Output parquet file."),
) -> None:
    """Import a public trace into the workload format.

    The Mooncake traces are not shipped: download one from
    https://github.com/kvcache-ai/Mooncake/tree/main/FAST25-release/traces
    (the example is synthetic_trace.jsonl saved as mooncake_synthetic_trace.jsonl).

    Example:

      twin workload import mooncake mooncake_synthetic_trace.jsonl -o mooncake.parquet
    """
    from twin.workloads.writer import WorkloadWriter

    importer = get_importer(fmt)()
    checks.in_file("IN", src, "trace file")
    checks.out_file("--out", out)
    checks.not_an_input("--out", out, src)
    with (
        progress_bar(f"importing {fmt}", src.stat().st_size, unit="bytes") as advance,
        WorkloadWriter(out, importer.metadata(src)) as writer,
    ):
        for row in importer.rows(src, on_progress=advance):
            writer.write(row)
    console.print(
        f"imported {writer.rows_written:,} requests ({writer.input_tokens_written:,} stored "
        f"input tokens) to {out}"
    )


@app.command()
def export(
    fmt: str = typer.Argument(..., metavar="FORMAT", help="Target format: marconi."),
    src: Path = typer.Argument(..., metavar="IN", help="Workload parquet file."),
    out: Path = typer.Option(..., "--out", "-o", help="Output JSONL file."),
) -> None:
    """Export a workload for another tool (the Marconi artifact's JSONL trace).

    Example:

      twin workload export marconi chat.parquet -o chat.jsonl
    """
    from twin.workloads.exporters import export_marconi
    from twin.workloads.reader import Workload

    if fmt != "marconi":
        raise TwinError(f"export format {fmt!r} is unknown; the only one is 'marconi'")
    checks.out_file("--out", out)
    checks.not_an_input("--out", out, src)
    workload = Workload.open(src)
    with progress_bar("exporting", workload.num_rows) as advance:
        rows = export_marconi(workload, out, on_progress=advance)
    console.print(f"exported {rows:,} requests to {out}")


@app.command()
def info(
    src: Path = typer.Argument(..., metavar="WORKLOAD", help="Workload parquet file."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """Describe a workload: sizes, lengths, turns, arrivals and the hit-rate ceiling.

    The ceiling is the token hit rate of an unbounded prefix cache replaying
    the requests in order: no policy at any capacity can exceed it.

    Example:

      twin workload info chat.parquet --json
    """
    from twin.workload_stats import summarize
    from twin.workloads.reader import Workload

    workload = Workload.open(src)
    with progress_bar("reading", workload.num_rows) as advance:
        summary = summarize(workload, on_request=advance)
    if as_json:
        print_json(summary)
        return
    _print_summary(summary)


def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def _print_summary(s: dict) -> None:
    head = Table(title=f"workload {s['file']}", title_justify="left", show_header=False)
    head.add_column(style="bold")
    head.add_column()
    producer = s["producer"].get("generator") or s["producer"].get("importer") or "unknown"
    arr = s["arrivals"]
    cache = s["infinite_cache"]
    rows = [
        ("producer", producer),
        ("sessions", _fmt(s["sessions"])),
        ("requests", f"{_fmt(s['requests'])} ({_fmt(s['closed_loop_requests'])} closed-loop)"),
        (
            "prompt tokens",
            f"{_fmt(s['tokens']['prompt_total'])} "
            f"(stored {_fmt(s['tokens']['stored_input_total'])})",
        ),
        ("output tokens", _fmt(s["tokens"]["output_total"])),
        ("arrival span", f"{_fmt(arr['span_s'], 1)} s"),
        ("session rate", f"{_fmt(arr['session_rate_per_s'], 3)} /s"),
        (
            "request rate",
            "set by the server (closed loop)"
            if arr["request_rate_per_s"] is None
            else f"{_fmt(arr['request_rate_per_s'], 3)} /s",
        ),
        ("infinite-cache token hit rate", f"{cache['token_hit_rate']:.1%}"),
        ("infinite-cache request hit rate", f"{cache['request_hit_rate']:.1%}"),
    ]
    for k, v in rows:
        head.add_row(k, v)
    console.print(head)
    dist = Table(title="distributions", title_justify="left")
    for col in ("", "mean", "p5", "p50", "p95", "p99", "max"):
        dist.add_column(col, justify="right")
    for label, key in (
        ("prompt tokens", "prompt_tokens"),
        ("output tokens", "output_tokens"),
        ("turns / session", "turns_per_session"),
        ("think time (s)", "think_s"),
    ):
        d = s[key]
        digits = 1 if key == "think_s" else 0
        dist.add_row(
            label, *(_fmt(d[c], digits) for c in ("mean", "p5", "p50", "p95", "p99", "max"))
        )
    console.print(dist)
