"""``twin replay``: replay a workload through prefix-cache policies and compare them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from policies import POLICIES, get_policy, options_for
from twin.cli.common import console, print_json, progress_bar
from twin.errors import TwinError
from twin.hardware import GB
from twin.presets import resolve_model
from twin.replay import ReplayResult, Trace, replay_work
from twin.replay import replay as run_replay
from workloads.reader import Workload


def _policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise TwinError(f"--policy: no policy named; valid policies: {', '.join(POLICIES)}")
    return names


def replay(
    workload: Path = typer.Argument(..., metavar="WORKLOAD", help="Workload parquet file."),
    model: str = typer.Option(
        ..., "--model", "-m", help="Preset model name (see `twin models list`) or a config.json."
    ),
    cache_gb: float = typer.Option(
        ..., "--cache-gb", min=0.0, help="Cache capacity in GB (1e9 bytes): KV + SSM states."
    ),
    policy: str = typer.Option(
        "vanilla,vllm+,sglang+,marconi",
        "--policy",
        "-p",
        help=f"Comma-separated policies: {', '.join(POLICIES)}.",
    ),
    block_size: int = typer.Option(32, "--block-size", min=1, help="vllm+: tokens per block."),
    bootstrap_multiplier: float = typer.Option(
        5.0,
        "--bootstrap-multiplier",
        min=0.001,
        help="marconi: bootstrap window = this x the requests before the first eviction.",
    ),
    alpha_metric: str = typer.Option(
        "hit-rate", "--alpha-metric", help="marconi/oracle: pick alpha by 'hit-rate' or 'flops'."
    ),
    jobs: int = typer.Option(
        1, "--jobs", "-j", min=1, help="Processes for the alpha grid search (marconi, oracle)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """Replay a workload through prefix-cache policies and compare hit rates.

    Requests are served in file order: each is looked up, then its input and
    output inserted, as the Marconi artifact does. Per policy: token and
    request hit rates, FLOPs saved, bytes cached (KV vs SSM states),
    checkpoints admitted and hit, evictions and wall time.

    Examples:

      twin replay chat.parquet --model marconi-hybrid-7b --cache-gb 100

      twin replay chat.parquet -m marconi-hybrid-7b --cache-gb 60 -p sglang+,marconi,oracle --json
    """
    spec = resolve_model(model)
    names = _policies(policy)
    options: dict[str, Any] = {
        "block_size": block_size,
        "bootstrap_multiplier": bootstrap_multiplier,
        "alpha_metric": alpha_metric,
        "jobs": jobs,
    }
    # The flags are shared: each policy takes its own (block_size only vllm+, ...).
    per_policy = {name: options_for(name, options) for name in names}
    for name in names:  # refuse bad names and options before reading anything
        get_policy(name, **per_policy[name])
    capacity = int(cache_gb * GB)
    wl = Workload.open(workload)
    with progress_bar("reading", wl.num_rows) as advance:
        trace = Trace.load(wl, on_request=advance)
    results: list[ReplayResult] = []
    for name in names:
        with progress_bar(f"replaying {name}", replay_work(trace, name)) as advance:
            results.append(
                run_replay(trace, spec, capacity, name, per_policy[name], on_request=advance)
            )
    if as_json:
        print_json(
            {
                "workload": str(workload),
                "model": spec.name,
                "capacity_bytes": capacity,
                "cache_gb": cache_gb,
                "requests": trace.num_requests,
                "prompt_tokens": trace.prompt_tokens,
                "options": options,
                "results": [r.to_dict() for r in results],
            }
        )
        return
    _print_table(results, str(workload), spec.name, cache_gb)


def _alpha(r: ReplayResult) -> str:
    if r.alpha is None:
        return "-"
    untuned = r.details.get("alpha_source") in ("warmup", "window")
    return f"{r.alpha:.1f}" + ("*" if untuned else "")


def _gb(n: float) -> str:
    return f"{n / GB:,.2f}"


def _print_table(results: list[ReplayResult], path: str, model: str, cache_gb: float) -> None:
    first = results[0]
    table = Table(
        title=(
            f"{path}: {first.requests:,} requests, {first.prompt_tokens:,} prompt tokens; "
            f"{model}, {cache_gb:g} GB cache"
        ),
        title_justify="left",
    )
    table.add_column("policy", no_wrap=True)
    for col in (
        "token hit",
        "req. hit",
        "FLOPs saved",
        "KV GB",
        "SSM GB",
        "ckpts hit/admitted",
        "evictions",
        "alpha",
        "wall s",
    ):
        table.add_column(col, justify="right")
    for r in results:
        saved = r.flops_saved / r.flops_total if r.flops_total else 0.0
        table.add_row(
            r.policy,
            f"{r.token_hit_rate:.1%}",
            f"{r.request_hit_rate:.1%}",
            f"{saved:.1%}",
            _gb(r.kv_bytes),
            _gb(r.ssm_bytes),
            f"{r.checkpoints_hit:,}/{r.checkpoints_admitted:,}",
            f"{r.evictions:,}",
            _alpha(r),
            f"{r.wall_s:.2f}",
        )
    if any(_alpha(r).endswith("*") for r in results):
        table.caption = "* the bootstrap window did not end within the trace: alpha stayed 0"
    console.print(table)
