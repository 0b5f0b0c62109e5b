"""``twin report capacity``: sweep cache size x policy x load, recommend, write the report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from twin.cli import checks
from twin.cli.common import (
    ExecutorOption,
    GpuOption,
    JobsOption,
    KvDtypeOption,
    ModelOption,
    ModelSetOption,
    PpOption,
    PrecisionOption,
    ProfileOption,
    RayAddressOption,
    TpOption,
    comma_list,
    command_line,
    console,
    err_console,
    progress_bar,
)
from twin.engine.modes import ENGINE_MODES, get_mode
from twin.engine.router import DEFAULT_ROUTER
from twin.errors import TwinError
from twin.limits import MAX_CACHE_GB, MAX_POINTS
from twin.policies import POLICIES
from twin.precision import model_sets
from twin.presets import DEFAULT_MODEL
from twin.reports.capacity_request import (
    DEFAULT_POLICIES,
    CapacityRequest,
    Deployment,
    Execution,
    SweepAxes,
    Targets,
    default_policies,
)
from twin.reports.layouts import parse_layouts

if TYPE_CHECKING:
    from twin.reports.capacity import CapacityReport

# The sweep, its analysis and its report (the engine, numpy, pyarrow) are imported where a
# command runs them: ``twin report capacity --help`` shows only the names above (issue 33).

app = typer.Typer(
    help="Capacity-planning reports: sweeps of the simulator rendered as HTML and Markdown.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _numbers(flag: str, text: str, positive: bool) -> list[float]:
    out = []
    for t in comma_list(flag, text, "20,40,60"):
        try:
            v = float(t)
        except ValueError:
            raise TwinError(f"{flag}: {t!r} is not a number") from None
        if not (v > 0 if positive else v >= 0) or v != v or v == float("inf"):
            raise TwinError(f"{flag}: {t!r} must be {'> 0' if positive else '>= 0'}")
        out.append(v)
    return list(dict.fromkeys(out))  # a repeated value would only duplicate points


def _policy_list(text: str) -> list[str]:
    """Policies and engine modes (``sglang[flag=value;...]``), split on commas outside [...]."""
    from twin.reports.sweep import engine_variant

    names = comma_list("--policies", text, "vllm+,sglang+,marconi", r",(?![^\[]*\])")
    unknown = []
    for name in names:
        variant = engine_variant(name)
        if variant is not None:
            mode, sets = variant
            bad = sorted(set(sets) - set(get_mode(mode).flags))
            if bad:
                raise TwinError(
                    f"--policies {name!r}: engine {mode!r} has no flag {bad[0]!r} "
                    f"(its flags: {', '.join(get_mode(mode).flags)})"
                )
        elif name not in POLICIES:
            unknown.append(name)
    if unknown:
        raise TwinError(
            f"--policies: unknown policy {', '.join(map(repr, unknown))}; "
            f"choose from {', '.join(POLICIES)} or an engine mode ({', '.join(ENGINE_MODES)})"
        )
    return list(dict.fromkeys(names))


def _check_precision(
    model: str, sets: tuple[str, ...], gpu: str | None, profile: Path | None, engine: str | None
) -> None:
    """Refuse a --precision the sweep's profile has no fit for before any point runs."""
    from twin.costmodel.precision_kernels import priced_precision
    from twin.costmodel.profile_store import resolve_profile
    from twin.presets import resolve_model

    kernels = get_mode(engine).kernels if engine is not None else None
    priced_precision(resolve_model(model, sets), resolve_profile(gpu, profile, kernels))


def _replica_counts(text: str) -> list[int]:
    """``--replicas 1,2,4``: whole numbers >= 1, each once, in order."""
    counts = []
    for v in _numbers("--replicas", text, positive=True):
        if v != int(v):
            raise TwinError(f"--replicas: {v:g} is not a whole number")
        counts.append(int(v))
    return counts


@app.command("capacity")
def capacity(
    workload: Path = typer.Argument(..., help="Workload parquet file."),
    model: ModelOption = DEFAULT_MODEL,
    model_set: ModelSetOption = [],  # noqa: B006 (typer reads the default)
    precision: PrecisionOption = None,
    kv_dtype: KvDtypeOption = None,
    gpu: GpuOption = None,
    engine: str | None = typer.Option(
        None,
        "--engine",
        help="Engine mode every point runs, as `twin simulate --engine NAME` runs it: "
        f"{', '.join(ENGINE_MODES)} (kernels, preemption, flags' defaults); --policies "
        "entries run in it as its --policy; without --policies the sweep runs the mode "
        "itself (its cache policy in its shared KV pool).",
    ),
    profile: ProfileOption = None,
    replicas: str = typer.Option(
        "1",
        "--replicas",
        "-r",
        help="Model replicas, comma-separated to sweep the GPU count (replicas x tp x pp), "
        "e.g. 1,2,4.",
    ),
    tp: TpOption = 1,
    pp: PpOption = 1,
    layouts: str | None = typer.Option(
        None,
        "--layouts",
        help="Serving layouts to sweep, comma-separated: agg, or xPyD (x prefill and y "
        "decode workers a copy; --replicas then counts copies), e.g. agg,1p1d. A layout's "
        "rows are named after their policy (vllm 1P1D). [default: agg]",
    ),
    cache_gb: str = typer.Option(
        "10,20,40",
        "--cache-gb",
        help="Cache sizes per replica to sweep, GB, comma-separated; auto: the shared KV "
        "pool (the engines' memory), e.g. auto,10,20.",
    ),
    policies: str | None = typer.Option(
        None,
        "--policies",
        help=f"Policies to sweep, comma-separated: {', '.join(POLICIES)}; or engine modes "
        f"with their flags ({', '.join(ENGINE_MODES)}), e.g. "
        "vllm,sglang,sglang[mamba_radix_cache_strategy=extra_buffer]: each runs in its shared "
        f"KV pool (its cache column is the pool's size). [default: {','.join(DEFAULT_POLICIES)}; "
        "with --engine, that mode]",
    ),
    session_rates: str | None = typer.Option(
        None,
        "--session-rates",
        help="Poisson session rates (per second) to sweep, "
        "comma-separated; default: the workload's own arrival times.",
    ),
    slo: list[str] = typer.Option(
        [],
        "--slo",
        help="Latency target, repeatable: pNN_METRIC<=VALUE(ms|s), METRIC ttft, tpot, itl or "
        "e2e at p50, p90, p95 or p99 (ttft also p5), e.g. --slo 'p95_ttft<=500ms' --slo "
        "'p95_tpot<=50ms'. A point meets the SLOs when every target is met and its steady "
        "state is stable.",
    ),
    warmup_s: float | None = typer.Option(
        None,
        "--warmup-s",
        help="Leave requests arriving before this out of every point's numbers (the cache "
        "starts cold; sessions accumulate). [default: 0; with --duration, a fifth of it]",
    ),
    duration: float | None = typer.Option(
        None,
        "--duration",
        help="Simulated seconds every point runs (sessions start in [0, D) at each "
        "--session-rates rate; the workload is stretched to enough sessions).",
    ),
    bisect: float | None = typer.Option(
        None,
        "--bisect",
        help="Narrow each policy's maximum sustainable rate (every --slo met at a stable "
        "steady state) between the swept rates by bisection, to within this fraction, "
        "e.g. 0.05; the points it adds are stored and reported like the others.",
    ),
    seeds: int = typer.Option(1, "--seeds", min=1, help="Seeds per point (2+ gives intervals)."),
    router: str = typer.Option(DEFAULT_ROUTER, "--router", help="Router across replicas."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (reruns resume in it)."),
    jobs: JobsOption = 1,
    cdf_cache_gb: float | None = typer.Option(
        None,
        "--cdf-cache-gb",
        help="Cache size (one of --cache-gb) for the TTFT CDF and "
        "hit-rate-by-input-length figures; default: the largest swept.",
    ),
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    as_json: bool = typer.Option(
        False,
        "--json",
        help="Print one JSON document (recommendations, per-point rows with verdicts, "
        "sustainable rates, infeasible points) instead of the tables.",
    ),
) -> None:
    """Sweep replicas x cache size x policy x session rate x seed; recommend the smallest
    cache meeting the SLOs; write OUT/results.parquet, OUT/report.html (self-contained)
    and OUT/report.md.

    Every finished point is saved at once, so rerunning the same command in the
    same OUT computes only the missing points.

    Example:

      twin report capacity chat.parquet -m marconi-hybrid-7b --gpu h100 -r 2 \\
        --cache-gb 10,20,40 --policies vllm+,sglang+,marconi --session-rates 0.5,1,2 \\
        --slo "p95_ttft<=500ms" --slo "p95_tpot<=50ms" --seeds 2 --out capacity --jobs 4

      twin report capacity chat.parquet --engine vllm --session-rates 1,2,4 \\
        --slo "p95_ttft<=500ms" --json --out capacity-vllm

      twin report capacity chat.parquet -m qwen3.5-9b --engine vllm --session-rates 0.25,1 \\
        --duration 600 --slo "p95_ttft<=500ms" --bisect 0.1 --jobs 2 --out capacity-max

      twin report capacity chat.parquet --replicas 1,2 --tp 2 --cache-gb 10,20 \\
        --policies marconi --session-rates 1,4 --slo "p95_ttft<=500ms" --out capacity-gpus

      twin report capacity chat.parquet -m llama-3-8b --gpu h100 --engine vllm --tp 1 \\
        --pp 2 --replicas 1,2 --session-rates 0.5 --slo "p95_ttft<=500ms" --out capacity-pp

      twin report capacity chat.parquet --model-set n_ssm_layers=32 --model-set ssm_d_state=16 \\
        --cache-gb 20,40 --out capacity-32ssm

      twin report capacity chat.parquet -m llama-3-8b --gpu h200 --engine vllm \\
        --precision fp8 --kv-dtype fp8 --session-rates 1,2 --out capacity-fp8

      twin report capacity chat.parquet -m llama-3-8b --gpu h200 --engine vllm \\
        --replicas 1,2 --layouts agg,1p1d --session-rates 0.5 --duration 2400 \\
        --warmup-s 800 --slo "p95_tpot<=20ms" --out capacity-pd

      twin report capacity chat.parquet --gpu a100-80gb --cache-gb auto \\
        --policies "vllm,sglang,sglang\\[mamba_radix_cache_strategy=extra_buffer]" \\
        --session-rates 2,8 --out capacity-engines
    """
    from twin.metrics import to_json
    from twin.reports.analysis import parse_slos
    from twin.reports.capacity import capacity_report, report_document
    from twin.reports.render import HTML_FILE, MD_FILE
    from twin.reports.sweep import AUTO_GB, RESULTS_FILE, grid

    checks.in_file("WORKLOAD", workload, "workload file")
    checks.out_dir("--out", out)
    checks.claim_out("--out", out)
    auto = [t for t in cache_gb.split(",") if t.strip().lower() == "auto"]
    rest = ",".join(t for t in cache_gb.split(",") if t.strip().lower() != "auto")
    caches = ([AUTO_GB] if auto else []) + (
        _numbers("--cache-gb", rest, positive=False) if rest.strip() or not auto else []
    )
    counts = _replica_counts(replicas)
    if policies is None:
        policies = ",".join(default_policies(engine))
    names = _policy_list(policies)
    rates: list[float | None] = (
        [None]
        if session_rates is None
        else list(_numbers("--session-rates", session_rates, positive=True))
    )
    slos = parse_slos(slo)
    if engine is not None:
        get_mode(engine)  # a bad --engine fails before any work
    checks.number("--duration", duration, low=0, low_open=True)
    checks.number("--warmup-s", warmup_s, low=0)
    serving = parse_layouts(layouts.split(",")) if layouts is not None else None
    n_layouts = len(serving) if serving else 1
    # The points the sweep has (an engine-mode entry runs one cache point: its pool).
    n_points = len(caches) * len(names) * len(rates) * seeds * len(counts) * n_layouts
    if n_points > MAX_POINTS:
        raise TwinError(
            f"the sweep has {n_points:,} points (cache sizes x policies x rates x --seeds x "
            f"replica counts x layouts); at most {MAX_POINTS:,} in one report: split it "
            "into several --out folders"
        )
    if any(c > MAX_CACHE_GB for c in caches):
        raise TwinError(f"--cache-gb: each must be <= {MAX_CACHE_GB:g} GB")
    total = len(grid(caches, names, rates, seeds, counts)) * n_layouts
    # The precision travels with the model (a sweep's points rebuild it from its name and
    # --model-set entries): the points' model column and key say it.
    sets = (*model_set, *model_sets(precision, kv_dtype))
    if precision is not None or kv_dtype is not None:
        _check_precision(model, sets, gpu, profile, engine)
    with progress_bar("points", total) as advance:
        request = CapacityRequest(
            workload,
            Deployment(
                model=model,
                model_set=sets,
                gpu=gpu,
                engine=engine,
                profile=profile,
                settings={
                    "tp": tp,
                    **({"pp": pp} if pp > 1 else {}),
                    "router": router,
                    **({"warmup_s": warmup_s} if warmup_s is not None else {}),
                },
            ),
            SweepAxes(
                cache_gb=caches,
                policies=names,
                session_rates=rates,
                seeds=seeds,
                replicas=counts,
                layouts=None if serving is None else [s.name for s in serving],
                duration_s=duration,
            ),
            Targets(slo=slos, bisect_tol=bisect),
            Execution(jobs=jobs, executor=executor, ray_address=ray_address),
            cdf_cache_gb=cdf_cache_gb,
            command=command_line("report", "capacity"),
        )
        found = capacity_report(request, out, progress=advance)
    err_console.print(
        f"{found.computed} point(s) simulated, {found.skipped} found in {out / RESULTS_FILE}"
    )
    if found.nodes:  # which ray nodes did the work (node ids cut to 8 hex digits)
        shares = ", ".join(f"{node[:8]} {n}" for node, n in sorted(found.nodes.items()))
        err_console.print(f"ray: points per node: {shares}", highlight=False, markup=False)
    for line in found.infeasible:
        err_console.print(f"warning: cannot run {line}", highlight=False, markup=False)
    for line in found.notes:
        err_console.print(
            line if line.startswith("hint:") else f"note: {line}",
            highlight=False,
            markup=False,
            soft_wrap=True,  # one line each
        )
    wrote = f"wrote {out / HTML_FILE}, {out / MD_FILE} and {out / RESULTS_FILE}"
    if as_json:
        print(to_json(report_document(found)), end="")
        err_console.print(wrote, highlight=False, markup=False, soft_wrap=True)
        return
    if found.slos:
        _print_recommendations(found)
    else:
        _print_points(found)
    console.print(wrote, highlight=False)


def _print_recommendations(found: CapacityReport) -> None:
    """The smallest cache meeting the SLOs per policy and rate, and the verdict sentences."""
    from twin.reports.analysis import slo_text, verdict
    from twin.reports.load import load_verdict
    from twin.reports.render import REC_HEAD, rec_cells
    from twin.reports.sweep import AUTO_GB

    table = Table(
        title=f"smallest cache meeting {slo_text(found.slos)} (stable)", title_justify="left"
    )
    for col in REC_HEAD:
        table.add_column(col)
    for r in found.recommendations:
        # escape: an engine mode's [flag=value] is not markup
        table.add_row(*(escape(c) for c in rec_cells(r)))
    console.print(table)
    lines = [
        *verdict(found.recommendations, found.slos),
        *load_verdict(found.sustainable or [], found.slos),
        *(
            f"Bisected: {b.policy} at "
            + ("its shared pool" if b.cache_gb == AUTO_GB else f"{b.cache_gb:g} GB")
            + (f" on {b.replicas} replica(s)" if b.replicas is not None else "")
            + f": sustains {b.label()} ({b.steps} step(s))"
            for b in found.brackets
        ),
    ]
    for line in lines:
        console.print(line, highlight=False, markup=False)


POINT_HEAD = (
    "policy",
    "session rate",
    "cache/replica",
    "GPUs",
    "verdict",
    "P95 TTFT (ms)",
    "P95 TPOT (ms)",
    "token hit",
    "req/s",
)


def _print_points(found: CapacityReport) -> None:
    """Without --slo: one line per point (mean across seeds) and its steady state."""
    from twin.reports.analysis import rate_label

    seeds = max((a["seeds"] for a in found.aggregate), default=1)
    title = "points" + (f" (mean across {seeds} seeds)" if seeds > 1 else "")
    table = Table(title=title, title_justify="left")
    for col in POINT_HEAD:
        table.add_column(col)

    def num(v: float | None, digits: int = 1) -> str:
        return "-" if v is None else f"{v:,.{digits}f}"

    for a in found.aggregate:
        table.add_row(
            escape(a["policy"]),
            rate_label(a["session_rate"]),
            f"{a['cache_gb']:g} GB",
            str(a["gpus"]),
            a["verdict"],
            num(a.get("ttft_p95_ms")),
            num(a.get("tpot_p95_ms"), 2),
            "-" if a.get("token_hit_rate") is None else f"{a['token_hit_rate']:.1%}",
            num(a.get("throughput_rps"), 2),
        )
    console.print(table)
