"""``twin validate``: measure the twin against a real PyTorch executor on the same requests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from twin.cli import checks
from twin.cli.common import (
    ModelOption,
    ModelSetOption,
    console,
    format_bytes,
    format_ms,
    format_pct,
    progress_bar,
)
from twin.limits import MAX_REPEATS, MAX_SESSIONS
from twin.presets import resolve_model
from twin.validate.request import CacheSetup, Measurement, RequestSource, ValidationRequest
from twin.workloads.generators import GENERATORS

# The validation's run (the engine, numpy) is imported in the command's body: ``twin
# validate --help`` imports none of it (issue 33).


def _executor() -> tuple[Any, Callable[..., Any], type]:
    """The real executor (tests replace this with a fake)."""
    from twin.validate.entry import load_executor

    return load_executor()


def validate(
    model: ModelOption = "tiny-hybrid",
    model_set: ModelSetOption = [],  # noqa: B006 (typer reads the default)
    device: str = typer.Option("cpu", "--device", help="Where the executor runs: cpu or cuda."),
    workload: Path | None = typer.Option(
        None, "--workload", "-w", help="Workload parquet file (or --generate)."
    ),
    generate: str | None = typer.Option(
        None, "--generate", "-g", help=f"Generate a workload instead: {', '.join(GENERATORS)}."
    ),
    sessions: int | None = typer.Option(
        None,
        "--sessions",
        "-n",
        min=1,
        max=MAX_SESSIONS,
        help="--generate: sessions (default: --requests).",
    ),
    requests: int = typer.Option(
        100,
        "--requests",
        min=1,
        max=MAX_SESSIONS,
        help="Keep the first N requests in arrival order.",
    ),
    session_rate: float | None = typer.Option(
        None,
        "--session-rate",
        help="Poisson session starts per second (with --generate: the "
        "generator's rate, default 1; with --workload: replaces the file's session starts).",
    ),
    policy: str = typer.Option(
        "marconi",
        "--policy",
        "-p",
        help="Cache policy the executor runs: vanilla, sglang+ or marconi.",
    ),
    cache_gb: float | None = typer.Option(
        None,
        "--cache-gb",
        help="Prefix cache, GB (1e9 bytes); default: 30% of what the "
        "requests would cache with no bound.",
    ),
    profile: Path | None = typer.Option(
        None,
        "--profile",
        help="A profile file from `twin calibrate` (default: calibrate this "
        "device now at the model's shapes, with its layers' host overhead, into "
        "OUT/profile.json: about 20 s on a CPU for tiny-hybrid).",
    ),
    seed: int = typer.Option(
        0, "--seed", min=0, help="Seed of arrivals, generated requests, weights."
    ),
    repeats: int = typer.Option(
        3,
        "--repeats",
        min=1,
        max=MAX_REPEATS,
        help="Time each prefill this many times; keep the median.",
    ),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder."),
    as_json: bool = typer.Option(False, "--json", help="Print validation.json."),
) -> None:
    """Measure the twin's predictions against a real PyTorch executor on the same requests.

    First the device is calibrated for the model (unless --profile is
    given). Both sides serve the same open-loop requests (arrival times fixed first,
    written to OUT/workload.parquet) on one device, one at a time, FCFS,
    prefill only, with the same cache capacity and policy code. The executor
    times each prefill; the twin predicts it from the calibrated profile.
    Reports the service-time error per request, P5/P50/P95 TTFT measured vs
    predicted, and whether hits match token for token, against targets (CPU
    15%, CUDA 5%). Writes OUT/validation.json, OUT/requests.parquet and
    OUT/predicted_vs_measured.png. Needs PyTorch (the package's torch extra).

    Examples:

      twin validate --generate chat --requests 100 --out val

      twin validate --workload chat.parquet --policy sglang+ --cache-gb 0.001 --out val --json

      twin validate --device cuda --profile h100-measured.json -m marconi-hybrid-7b \\
        --generate chat --requests 50 --out val-gpu
    """
    from twin.metrics import to_json
    from twin.validate.entry import validate_model

    checks.out_dir("--out", out)
    checks.claim_out("--out", out)
    request = ValidationRequest(
        resolve_model(model, model_set),
        RequestSource(
            workload=workload,
            generate=generate,
            sessions=sessions,
            requests=requests,
            session_rate=session_rate,
            seed=seed,
        ),
        CacheSetup(policy=policy, cache_gb=cache_gb),
        Measurement(device=device, repeats=repeats, profile=profile),
    )
    report = validate_model(request, out, executor=_executor, bar=progress_bar)
    if as_json:
        print(to_json(report), end="")  # the same text as validation.json
        return
    _print_report(report)


def _print_report(r: dict[str, Any]) -> None:
    m, targets = r["metrics"], r["targets"]
    title = (
        f"{r['workload']['path']}: {m['requests']:,} requests in {m['sessions']:,} sessions; "
        f"{r['model']} on {r['device_name']} ({r['dtype']}), {r['policy']}, "
        f"{format_bytes(r['cache']['bytes'])} cache ({r['cache']['source']})"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("", justify="left")
    for col in ("measured (ms)", "predicted (ms)", "error", "target"):
        table.add_column(col, justify="right")

    def verdict(key: str) -> str:
        t = targets[key]
        mark = "[green]pass[/]" if t["pass"] else "[red]FAIL[/]"
        return f"< {t['max']:.0%} {mark}"

    s = m["service"]
    meas, pred = s["measured_median_s"], s["predicted_median_s"]
    table.add_row(
        "service time, median",
        format_ms(meas, 2),
        format_ms(pred, 2),
        format_pct(abs(pred - meas) / meas if meas else None),
        "",
    )
    table.add_row(
        "per-request service error, median",
        "",
        "",
        format_pct(s["median_abs_rel_err"]),
        verdict("service_median_rel_err"),
    )
    table.add_row("per-request service error, P90", "", "", format_pct(s["p90_abs_rel_err"]), "")
    table.add_row(
        "per-request bias (signed median)", "", "", f"{s['median_signed_rel_err']:+.1%}", ""
    )
    for q in ("p5", "p50", "p95"):
        t = m["ttft"][q]
        key = f"ttft_{q}_rel_err"
        table.add_row(
            f"TTFT {q.upper()}",
            format_ms(t["measured_s"], 2),
            format_ms(t["predicted_s"], 2),
            format_pct(t["rel_err"]),
            verdict(key) if key in targets else "",
        )
    console.print(table)
    hit = m["hit"]
    facts = Table(show_header=False)
    facts.add_column()
    facts.add_column(justify="right")
    same = targets["hit_tokens_identical"]["pass"]
    rows = [
        (
            "token hit rate (measured / predicted)",
            f"{format_pct(hit['measured']['token_hit_rate'])} / "
            f"{format_pct(hit['predicted']['token_hit_rate'])}",
        ),
        (
            "request hit rate (measured / predicted)",
            f"{format_pct(hit['measured']['request_hit_rate'])} / "
            f"{format_pct(hit['predicted']['request_hit_rate'])}",
        ),
        (
            "hit tokens identical on every row",
            "[green]yes[/]"
            if same
            else f"[red]no[/]: {hit['rows_differing']} rows differ, "
            f"first row {hit['first_differing_row']}",
        ),
        ("cost model", f"{r['profile']['gpu']}: {r['profile']['provenance']}"),
        ("verdict", "[green]all targets met[/]" if r["pass"] else "[red]targets missed[/]"),
    ]
    for label, value in rows:
        facts.add_row(label, value)
    console.print(facts)
    written = ", ".join([r["workload"]["path"], *r["outputs"].values()])
    console.print(f"wrote {written}", soft_wrap=True, highlight=False)
