"""``twin validate``: measure the twin against a real PyTorch executor on the same requests."""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from calibration.profile import Profile
from policies import get_policy
from twin.cli.common import ModelOption, console, format_bytes, progress_bar
from twin.errors import TwinError
from twin.metrics import to_json
from twin.model import ModelSpec
from twin.presets import resolve_model
from twin.validate.arrivals import fix_arrivals
from twin.validate.run import CacheChoice, default_cache
from twin.validate.run import validate as run_validation
from workloads.examples import Example
from workloads.generators import GENERATORS, get_generator
from workloads.reader import Workload

GB = 1e9  # decimal, as the other commands quote cache sizes
DEVICES = ("cpu", "cuda")
WORKLOAD_FILE = "workload.parquet"  # the fixed-arrival copy both sides run


def _executor() -> tuple[Any, Callable[..., Any], type]:
    """``torch``, ``run_reference`` and ``ExecutorConfig``, or a one-line install hint."""
    try:
        import torch
    except ImportError:
        raise TwinError(
            "twin validate runs the model with PyTorch, which is not installed: "
            "pip install 'twin[torch]' (torch==2.13.0)"
        ) from None
    from twin.reference.executor import ExecutorConfig, run_reference

    return torch, run_reference, ExecutorConfig


def _check_policy(name: str) -> None:
    if get_policy(name).hindsight:
        raise TwinError(
            f"--policy {name}: a hindsight bound (one replay per alpha) cannot serve "
            "requests online; validate marconi, sglang+ or vanilla"
        )


PROFILE_FILE = "profile.json"


def _calibrated_profile(device: str, spec: ModelSpec, out: Path) -> Profile:
    """Step 1 of a validation: time this device's kernels at the model's own shapes, and the
    host overhead of its layers, into ``out/profile.json`` (a quick, per-model profile)."""
    from calibration.harness import calibrate

    gpu = "cpu" if device == "cpu" else "auto"
    with contextlib.ExitStack() as stack:

        def progress(total: int) -> Any:
            return stack.enter_context(progress_bar("calibrating", total))

        result = calibrate(
            gpu,
            "quick",
            out / PROFILE_FILE,
            model=spec,
            progress=progress,
            overhead=True,
            model_only=True,
        )
    return result.profile


def _generate(
    kind: str, sessions: int, session_rate: float | None, seed: int, path: Path
) -> Workload:
    """A fresh ``kind`` workload at ``path`` (the generator's defaults; rate 1/s if none given)."""
    Example(kind, sessions, 1.0 if session_rate is None else session_rate, seed).build(path)
    return Workload.open(path)


def validate(
    model: ModelOption = "tiny-hybrid",
    device: str = typer.Option("cpu", "--device", help="Where the executor runs: cpu or cuda."),
    workload: Path | None = typer.Option(
        None, "--workload", "-w", help="Workload parquet file (or --generate)."
    ),
    generate: str | None = typer.Option(
        None, "--generate", "-g", help=f"Generate a workload instead: {', '.join(GENERATORS)}."
    ),
    sessions: int | None = typer.Option(
        None, "--sessions", "-n", min=1, help="--generate: sessions (default: --requests)."
    ),
    requests: int = typer.Option(
        100, "--requests", min=1, help="Keep the first N requests in arrival order."
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
    seed: int = typer.Option(0, "--seed", help="Seed of arrivals, generated requests, weights."),
    repeats: int = typer.Option(
        3, "--repeats", min=1, help="Time each prefill this many times; keep the median."
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

      twin validate --device cuda --profile h100-measured.json -m marconi-hybrid-7b --generate
      chat --requests 50 --out val-gpu
    """
    spec = resolve_model(model)
    if device not in DEVICES:
        raise TwinError(f"--device {device!r}: expected cpu or cuda")
    if (workload is None) == (generate is None):
        raise TwinError("give one of --workload W.parquet or --generate KIND")
    if generate is not None:
        get_generator(generate)
    _check_policy(policy)
    if cache_gb is not None and not (math.isfinite(cache_gb) and cache_gb >= 0):
        raise TwinError(f"--cache-gb must be a number >= 0 (got {cache_gb})")
    if session_rate is not None and not (math.isfinite(session_rate) and session_rate > 0):
        raise TwinError(f"--session-rate must be a positive number (got {session_rate})")
    torch, run_reference, config_cls = _executor()
    if device == "cuda" and not torch.cuda.is_available():
        raise TwinError("--device cuda: PyTorch sees no CUDA GPU on this machine")
    prof = Profile.load(profile) if profile is not None else _calibrated_profile(device, spec, out)
    with tempfile.TemporaryDirectory() as tmp:
        if generate is not None:
            src = _generate(
                generate, sessions or requests, session_rate, seed, Path(tmp) / "generated.parquet"
            )
        else:
            assert workload is not None
            src = Workload.open(workload)
        fixed = fix_arrivals(
            src,
            out / WORKLOAD_FILE,
            seed=seed,
            max_requests=requests,
            session_rate=None if generate is not None else session_rate,
        )
    cache = (
        default_cache(fixed, spec, policy)
        if cache_gb is None
        else CacheChoice(int(cache_gb * GB), "--cache-gb")
    )
    config = config_cls(
        device=device, policy=policy, cache_bytes=cache.bytes, seed=seed, repeats=repeats
    )
    with progress_bar("prefills measured", fixed.num_rows) as advance:
        report = run_validation(
            fixed,
            spec,
            prof,
            run_reference=run_reference,
            executor_config=config,
            cache=cache,
            out_dir=out,
            progress=_fraction(advance, fixed.num_rows),
        )
    if as_json:
        print(to_json(report), end="")  # the same text as validation.json
        return
    _print_report(report)


def _fraction(advance: Callable[[float], None], total: int) -> Callable[[float], None]:
    """Adapt the executor's progress (fraction of requests served) to a bar's advances."""
    done = 0.0

    def report(fraction: float) -> None:
        nonlocal done
        advance(fraction * total - done)
        done = fraction * total

    return report


def _ms(x: float | None) -> str:
    return "-" if x is None or x != x else f"{1e3 * x:,.2f}"


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x:.1%}"


def _print_report(r: dict[str, Any]) -> None:
    m, targets = r["metrics"], r["targets"]
    title = (
        f"{r['workload']['path']}: {m['requests']:,} requests in {m['sessions']:,} sessions; "
        f"{r['model']} on {r['device_name']} ({r['dtype']}), {r['policy']}, "
        f"{format_bytes(r['cache']['bytes'])} cache ({r['cache']['source']})"
    )
    table = Table(title=title, title_justify="left")
    for col, justify in (
        ("", "left"),
        ("measured (ms)", "right"),
        ("predicted (ms)", "right"),
        ("error", "right"),
        ("target", "right"),
    ):
        table.add_column(col, justify=justify)

    def verdict(key: str) -> str:
        t = targets[key]
        mark = "[green]pass[/]" if t["pass"] else "[red]FAIL[/]"
        return f"< {t['max']:.0%} {mark}"

    s = m["service"]
    meas, pred = s["measured_median_s"], s["predicted_median_s"]
    table.add_row(
        "service time, median",
        _ms(meas),
        _ms(pred),
        _pct(abs(pred - meas) / meas if meas else None),
        "",
    )
    table.add_row(
        "per-request service error, median",
        "",
        "",
        _pct(s["median_abs_rel_err"]),
        verdict("service_median_rel_err"),
    )
    table.add_row("per-request service error, P90", "", "", _pct(s["p90_abs_rel_err"]), "")
    table.add_row(
        "per-request bias (signed median)", "", "", f"{s['median_signed_rel_err']:+.1%}", ""
    )
    for q in ("p5", "p50", "p95"):
        t = m["ttft"][q]
        key = f"ttft_{q}_rel_err"
        table.add_row(
            f"TTFT {q.upper()}",
            _ms(t["measured_s"]),
            _ms(t["predicted_s"]),
            _pct(t["rel_err"]),
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
            f"{_pct(hit['measured']['token_hit_rate'])} / "
            f"{_pct(hit['predicted']['token_hit_rate'])}",
        ),
        (
            "request hit rate (measured / predicted)",
            f"{_pct(hit['measured']['request_hit_rate'])} / "
            f"{_pct(hit['predicted']['request_hit_rate'])}",
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
