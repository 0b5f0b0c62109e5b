"""``twin replay``: replay a workload through prefix-cache policies and compare them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from twin import precision as px
from twin.cli import checks
from twin.cli.common import (
    KvDtypeOption,
    ModelOption,
    ModelSetOption,
    PolicyOptionOption,
    PrecisionOption,
    alpha_label,
    console,
    policy_options,
    print_json,
    progress_bar,
)
from twin.errors import TwinError
from twin.hardware import GB
from twin.policies import POLICIES
from twin.precision import with_precision

if TYPE_CHECKING:
    from twin.replay import ReplayResult

# The replay's own modules (numpy, pyarrow, the policies) are imported in the command's
# body: ``twin replay --help`` shows only the policies' names (issue 33).


def _policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise TwinError(f"--policy: no policy named; valid policies: {', '.join(POLICIES)}")
    return names


def replay(
    workload: Path = typer.Argument(..., metavar="WORKLOAD", help="Workload parquet file."),
    model: ModelOption = ...,  # type: ignore[assignment]  # required: typer reads ... so
    model_set: ModelSetOption = [],  # noqa: B006 (typer reads the default)
    precision: PrecisionOption = None,
    kv_dtype: KvDtypeOption = None,
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
        help="marconi, marconi-twin: bootstrap window = this x the requests "
        "up to the first eviction (the paper's runs: 5; 15 for LMSys).",
    ),
    alpha_metric: str = typer.Option(
        "hit-rate",
        "--alpha-metric",
        help="marconi-twin/oracle: pick alpha by 'hit-rate' or 'flops' "
        "(marconi always uses the reference code's FLOPs).",
    ),
    policy_option: PolicyOptionOption = [],  # noqa: B006 (typer reads the default)
    jobs: int = typer.Option(
        1, "--jobs", "-j", min=1, help="Processes for the alpha grid search (marconi, oracle)."
    ),
    requests_out: Path | None = typer.Option(
        None,
        "--requests",
        help="Write one row per policy and request (input and hit tokens, the node hit) "
        "to this parquet file.",
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

      twin replay chat.parquet -m marconi-hybrid-7b --cache-gb 20 -p marconi,marconi-twin \\
        --policy-option alpha=0 --model-set n_ssm_layers=32 --requests hits.parquet

      twin replay chat.parquet -m llama-3-8b --cache-gb 20 -p sglang+ --kv-dtype fp8
    """
    from twin.policies import get_policy
    from twin.presets import resolve_model
    from twin.replay import Trace, replay_work
    from twin.replay import replay as run_replay
    from twin.workloads.reader import Workload

    checks.number("--cache-gb", cache_gb, low=0)
    checks.number("--bootstrap-multiplier", bootstrap_multiplier, low=0, low_open=True)
    if requests_out is not None:
        checks.out_file("--requests", requests_out)
        checks.not_an_input("--requests", requests_out, workload)
    spec = with_precision(resolve_model(model, model_set), precision, kv_dtype)
    names = _policies(policy)
    extra = policy_options(policy_option, names)
    options: dict[str, Any] = {
        "block_size": block_size,
        "bootstrap_multiplier": bootstrap_multiplier,
        "alpha_metric": alpha_metric,
        "jobs": jobs,
        **extra,
    }
    per_policy = {name: _options_for(name, options, extra, names) for name in names}
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
                run_replay(
                    trace,
                    spec,
                    capacity,
                    name,
                    per_policy[name],
                    on_request=advance,
                    per_request=requests_out is not None,
                )
            )
    if requests_out is not None:
        _write_requests(requests_out, results)
    if as_json:
        print_json(
            {
                "workload": str(workload),
                "model": spec.name,
                **px.info(spec),
                "capacity_bytes": capacity,
                "cache_gb": cache_gb,
                "requests": trace.num_requests,
                "prompt_tokens": trace.prompt_tokens,
                "options": options,
                "results": [r.to_dict() for r in results],
            }
        )
        return
    at = "" if px.is_default(spec) else f" ({px.describe(spec)})"
    _print_table(results, str(workload), spec.name + at, cache_gb)


def _options_for(
    name: str, options: dict[str, Any], extra: dict[str, Any], names: list[str]
) -> dict[str, Any]:
    """The options policy ``name`` declares; a --policy-option no named policy takes is an error."""
    for key in extra:
        if not any(key in POLICIES[n].OPTIONS for n in names if n in POLICIES):
            takes = sorted({o for n in names if n in POLICIES for o in POLICIES[n].OPTIONS})
            raise TwinError(
                f"--policy-option {key}: no policy of --policy {','.join(names)} takes it; "
                f"valid: {', '.join(takes) or '(none)'}"
            )
    cls = POLICIES.get(name)
    if cls is None:
        return {}
    return {k: v for k, v in options.items() if k in cls.OPTIONS}


def _write_requests(path: Path, results: list[ReplayResult]) -> None:
    """One row per policy and request, in replay order (``--requests``)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from twin.atomic import atomic_path

    cols: dict[str, list[Any]] = {
        "policy": [],
        "request": [],
        "input_tokens": [],
        "hit_tokens": [],
        "hit_node": [],
    }
    for r in results:
        rows = r.per_request or {}
        n = len(rows.get("hit_tokens", ()))
        cols["policy"].extend([r.policy] * n)
        cols["request"].append(np.arange(n, dtype=np.int64))
        for key in ("input_tokens", "hit_tokens", "hit_node"):
            cols[key].append(rows.get(key, np.zeros(0, np.int64)))
    table = pa.table(
        {
            "policy": pa.array(cols["policy"], pa.string()),
            **{
                k: pa.array(np.concatenate(cols[k]) if cols[k] else [], pa.int64())
                for k in ("request", "input_tokens", "hit_tokens", "hit_node")
            },
        }
    )
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def _alpha(r: ReplayResult) -> str:
    return alpha_label(r.alpha, r.details.get("alpha_source", ""))


def _grid_line(r: ReplayResult) -> str | None:
    """A tuned policy's alpha grid as scores relative to the best (the table's caption)."""
    grid = r.details.get("grid") or r.details.get("bootstrap", {}).get("grid")
    if not grid:
        return None
    best = max(grid.values())
    cells = " ".join(f"{float(a):.1f}:{(s / best if best else 0):.3f}" for a, s in grid.items())
    return f"{r.policy} alpha grid (score / best): {cells}"


def _module_line(r: ReplayResult) -> str | None:
    """prompt-cache: reused modules, and on a hybrid how much saving the recompute leaves."""
    d = r.details
    if "module_hits" not in d:
        return None
    line = (
        f"{r.policy} ({d['storage']} memory): {d['module_hits']:,} module hits, "
        f"{d['reused_tokens']:,} tokens reused"
    )
    if d.get("host_copied_tokens"):
        line += f", {d['host_copied_tokens']:,} copied from host"
    if "saving_kept" in d:
        line += (
            f"; recurrent layers recompute {d['recompute_tokens']:,} of them out of prefix "
            f"position: {d['saving_kept']:.0%} of the attention-reuse FLOPs saving survives"
        )
    return line


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
    notes = [line for r in results if (line := _grid_line(r))]
    notes += [line for r in results if (line := _module_line(r))]
    if any("untuned" in _alpha(r) for r in results):
        notes.append("untuned: the bootstrap window did not end within the trace, alpha stayed 0")
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
    console.print(table)
