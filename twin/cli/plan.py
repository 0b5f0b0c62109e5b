"""``twin plan``: the cheapest deployment meeting every SLO for a workload at a load."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from twin.cli import checks
from twin.cli.common import (
    PLAIN_PROGRESS_EVERY_S,
    ExecutorOption,
    JobsOption,
    ModelOption,
    ModelSetOption,
    RayAddressOption,
    comma_list,
    command_line,
    console,
    err_console,
)
from twin.engine.modes import ENGINE_MODES
from twin.engine.router import ROUTERS
from twin.errors import TwinError
from twin.hardware import GPUS
from twin.policies import POLICIES
from twin.presets import DEFAULT_MODEL
from twin.reports.layouts import parse_layouts
from twin.reports.parallel_axes import parse_degrees
from twin.reports.plan_inputs import (
    DEFAULT_CACHE,
    DEFAULT_DP_ATTENTION,
    DEFAULT_ENGINES,
    DEFAULT_EP,
    DEFAULT_GPUS,
    DEFAULT_LAYOUTS,
    DEFAULT_PP,
    DEFAULT_SEEDS,
    DEFAULT_TP,
    cache_choices,
    check_executor,
    parse_load,
)
from twin.reports.plan_routers import MIN_REUSE_SHARE, resolve_routers
from twin.reports.plan_screen import SCREEN_FRACTION, SCREEN_MIN_S
from twin.reports.plan_search import DEFAULT_SEARCH, SEARCHES
from twin.workloads.examples import DEFAULT_EXAMPLE as EXAMPLE
from twin.workloads.examples import example_path

if TYPE_CHECKING:
    from twin.reports.plan_result import PlanResult
    from twin.reports.plan_runner import PlanProgress

# The plan's runs and report (the engine, numpy, pyarrow) are imported in the command's
# body: ``twin plan --help`` shows only the defaults and names above (issue 33).

SEARCH_HELP = (
    "How each candidate's fewest replicas is found: "
    + "; ".join(f"{name}: {cls.description}" for name, cls in SEARCHES.items())
    + "."
)


def _ints(flag: str, text: str) -> list[int]:
    out = []
    for t in comma_list(flag, text):
        try:
            out.append(int(t))
        except ValueError:
            raise TwinError(f"{flag}: {t!r} is not a whole number") from None
    return out


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Callable[[PlanProgress], None]]:
    """Candidates settled (evaluated or pruned) as a rich bar on a terminal; elsewhere a
    plain line at most every ``PLAIN_PROGRESS_EVERY_S`` seconds."""

    def detail(s: PlanProgress) -> str:
        return f"{s.evaluated} evaluated, {s.pruned} pruned, {s.points} point(s)"

    if not err_console.is_terminal:
        start = last = time.monotonic()

        def plain(s: PlanProgress) -> None:
            nonlocal last
            now = time.monotonic()
            if now - last >= PLAIN_PROGRESS_EVERY_S:
                last = now
                err_console.print(
                    f"candidates: {s.settled}/{s.total} ({detail(s)}), "
                    f"{now - start:,.0f} s elapsed",
                    highlight=False,
                    markup=False,
                    soft_wrap=True,
                )

        yield plain
        return
    with Progress(
        TextColumn("[bold]candidates"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f}"),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task("candidates", total=total, detail="")

        def update(s: PlanProgress) -> None:
            # The plan counts its candidates (the layouts the model can take) first.
            bar.update(task, total=s.total or total, completed=s.settled, detail=detail(s))

        yield update


# The load planned for when neither a workload nor a load is given (the bundled example):
# its own arrivals are a few minutes of sessions, too short to judge a steady state, and a
# chat session runs for minutes, so the request rate climbs for about 800 s before it
# settles (the steady-state ramp check); the help's first example uses the same load.
EXAMPLE_SESSION_RATE = 0.5
EXAMPLE_DURATION_S = 2400.0
EXAMPLE_WARMUP_S = 800.0


def plan_cmd(
    workload: Path | None = typer.Argument(
        None, help=f"Workload parquet file (default: the bundled {EXAMPLE!r} example)."
    ),
    model: ModelOption = DEFAULT_MODEL,
    model_set: ModelSetOption = [],  # noqa: B006 (typer reads the default)
    slo: list[str] = typer.Option(
        [],
        "--slo",
        help="Latency target, repeatable (at least one): pNN_METRIC<=VALUE(ms|s), METRIC "
        "ttft, tpot, itl or e2e at p50, p90, p95 or p99 (ttft also p5). A deployment meets "
        "the SLOs when every target is met and its steady state is stable.",
    ),
    session_rate: float | None = typer.Option(
        None,
        "--session-rate",
        help="Poisson session arrivals per second (default: the workload's own times).",
    ),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        help="Closed-loop clients instead of a rate (vllm bench serve --max-concurrency).",
    ),
    rate: float | None = typer.Option(
        None,
        "--rate",
        help="Open-loop requests per second: the workload's own arrival times scaled to "
        "this rate (twin simulate --request-rate; Poisson when the file's are, as "
        "twin workload generate writes them).",
    ),
    duration: float | None = typer.Option(
        None,
        "--duration",
        help="Simulated seconds of load per point (sessions start in [0, D); the first 20% "
        "is warm-up; at --session-rate the workload is stretched to enough sessions).",
    ),
    warmup_s: float | None = typer.Option(
        None,
        "--warmup-s",
        help="Leave requests arriving before this out of every point's numbers (cold "
        "caches, sessions still accumulating). [default: a fifth of --duration, else 0]",
    ),
    gpus: str = typer.Option(
        ",".join(DEFAULT_GPUS),
        "--gpus",
        help=f"GPU types to consider, comma-separated ({', '.join(GPUS)}).",
    ),
    engines: str = typer.Option(
        ",".join(DEFAULT_ENGINES),
        "--engines",
        help=f"Engine modes to consider, comma-separated ({', '.join(ENGINE_MODES)}); "
        "NAME==VERSION picks a modelled release (vllm==0.19).",
    ),
    tp: str = typer.Option(
        ",".join(map(str, DEFAULT_TP)),
        "--tp",
        help="Tensor-parallel degrees (GPUs per replica) to consider, comma-separated.",
    ),
    ep: str = typer.Option(
        ",".join(map(str, DEFAULT_EP)),
        "--ep",
        help="Expert-parallel degrees to consider with each --tp, comma-separated (each "
        "dividing it and the model's routed experts; above 1 for MoE models only), or auto: "
        "1 and tp for a MoE model, 1 otherwise. Adds no GPU: the experts are dealt out "
        "among the replica's tp GPUs.",
    ),
    dp_attention: str = typer.Option(
        ",".join(map(str, DEFAULT_DP_ATTENTION)),
        "--dp-attention",
        help="Attention data-parallel degrees to consider with each --tp, comma-separated "
        "(each dividing it, the heads dividing by tp / it; aggregated layouts only), or "
        "auto: 1 and tp for a MoE model, 1 otherwise. Adds no GPU.",
    ),
    pp: str = typer.Option(
        ",".join(map(str, DEFAULT_PP)),
        "--pp",
        help="Pipeline-parallel stages to consider with each layout, comma-separated, or "
        "auto: 1 and 2. A replica is pp stages of tp GPUs (tp x pp GPUs, and their cost); "
        "aggregated layouts without attention DP, speculative decoding or a host cache tier "
        "only (others are skipped, counted in a note).",
    ),
    cache_gb: str = typer.Option(
        ",".join(DEFAULT_CACHE),
        "--cache-gb",
        help="Cache settings to consider, comma-separated: auto (the engine's shared KV "
        "pool) or GB of a dedicated cache per replica.",
    ),
    policies: str | None = typer.Option(
        None,
        "--policies",
        help=f"Prefix-cache policies to consider for each dedicated --cache-gb size, "
        f"comma-separated ({', '.join(POLICIES)}). The shared pool (auto) always runs the "
        "engine mode's own. [default: each engine mode's own]",
    ),
    layouts: str = typer.Option(
        ",".join(DEFAULT_LAYOUTS),
        "--layouts",
        help="Serving layouts to consider, comma-separated: agg (prefill and decode on "
        "the same GPUs) or xPyD (x prefill and y decode workers a copy, each tp GPUs; the "
        "replicas are copies of it), e.g. agg,1p1d,1p2d.",
    ),
    prices: Path | None = typer.Option(
        None,
        "--prices",
        help="A TOML price table replacing the shipped one (twin/reports/prices.toml): "
        "\\[gpus.h100] usd_per_gpu_hour = 3.2, source = '...', date = '...'.",
    ),
    budget_gpus: int | None = typer.Option(
        None,
        "--budget-gpus",
        min=1,
        help="Most GPUs (replicas x tp, x the workers of an xPyD layout) of any deployment.",
    ),
    routers: str | None = typer.Option(
        None,
        "--routers",
        help=f"Routers across replicas to consider, comma-separated ({', '.join(ROUTERS)}), "
        "or auto: round-robin, plus the routers placing requests by prefix or session when "
        "an unbounded prefix cache would hit at least "
        f"{MIN_REUSE_SHARE:.0%} of the workload's prompt tokens. [default: round-robin]",
    ),
    router: str | None = typer.Option(
        None, "--router", help="One router (the same as --routers with one name)."
    ),
    search: str = typer.Option(
        DEFAULT_SEARCH,
        "--search",
        help=SEARCH_HELP,
    ),
    jobs: JobsOption = 1,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    screen: bool = typer.Option(
        True,
        "--screen/--no-screen",
        help="Run each replica count for a quarter of --duration first and in full only "
        "when that short run does not rule it out (overloaded, or a target missed by half "
        f"again); needs --duration of at least {SCREEN_MIN_S / SCREEN_FRACTION:g} s.",
    ),
    seeds: int = typer.Option(
        DEFAULT_SEEDS,
        "--seeds",
        help="Seeds a deciding replica count must meet the SLOs under (every probe runs "
        "seed 0; a candidate's fewest count that could win reruns with seeds 1 .. N-1 and "
        "counts only if it meets under all; the answer shows each target's min-max across "
        "them). 1: seed 0 alone. The seed draws the --session-rate arrivals.",
    ),
    out: Path = typer.Option(
        Path("plan"), "--out", "-o", help="Output folder (reruns resume in it)."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print plan.json on stdout instead of the tables."
    ),
) -> None:
    """Find the cheapest deployment (GPU type x engine x tp/ep/attention DP/pp x cache x layout x
    router x replicas)
    meeting every SLO at a stable steady state; write OUT/plan.json, OUT/report.md, OUT/report.html
    (self-contained) and OUT/results.parquet.

    Each candidate's fewest replicas is searched from an analytic lower bound;
    candidates whose bound already costs more than the best found are pruned, and
    each replica count runs a quarter of --duration first (a full run only if that
    does not rule it out). The count that decides the answer must also meet the SLOs
    under seeds 1 .. --seeds - 1 (the answer gives each target's min-max across them).
    Cost is GPUs (replicas x tp x pp) x the GPU's on-demand price (--prices to use your
    own). With no workload it plans the bundled chat example at 0.5 sessions/s for 2400 s.

    Examples:

      twin plan --slo "p95_ttft<=500ms" --out plan-chat

      twin plan chat.parquet -m qwen3.5-9b --slo "p95_ttft<=500ms" --slo "p95_tpot<=50ms" \\
        --session-rate 0.5 --duration 2400 --warmup-s 800 --gpus h100,h200 --engines vllm \\
        --tp 1 --out plan

      twin plan chat.parquet -m qwen3.5-9b --slo "p95_ttft<=300ms" --session-rate 0.5 \\
        --duration 2400 --warmup-s 800 --gpus h100,b200 --engines vllm,sglang --tp 1,2 \\
        --budget-gpus 2 --json --out plan-2gpu

      twin plan chat.parquet -m llama-3-8b --slo "p95_tpot<=20ms" --session-rate 0.5 \\
        --duration 2400 --warmup-s 800 --gpus h200 --engines vllm --tp 1 \\
        --layouts agg,1p1d --out plan-pd

      twin plan chat.parquet -m gpt-oss-20b --slo "p95_tpot<=15ms" --session-rate 0.5 \\
        --duration 2400 --warmup-s 800 --gpus h200 --engines sglang --tp 2 --ep 2 \\
        --dp-attention 1,2 --seeds 1 --out plan-moe

      twin plan chat.parquet -m llama-3-8b --slo "p95_ttft<=500ms" --session-rate 0.5 \\
        --duration 2400 --warmup-s 800 --gpus h200 --engines vllm --tp 1 --routers auto \\
        --seeds 1 --out plan-routers

      twin plan chat.parquet -m llama-3-8b --slo "p95_ttft<=500ms" --session-rate 0.5 \\
        --duration 2400 --warmup-s 800 --gpus h100 --engines vllm --tp 1 --pp 1,2 \\
        --seeds 1 --out plan-pp
    """
    from twin.metrics import to_json
    from twin.reports.plan import plan
    from twin.reports.plan_render import seeds_text
    from twin.reports.plan_result import PLAN_FILE
    from twin.reports.render import HTML_FILE, MD_FILE
    from twin.reports.sweep import RESULTS_FILE

    if workload is not None:
        checks.in_file("WORKLOAD", workload, "workload file")
    checks.out_dir("--out", out)
    checks.claim_out("--out", out)
    if prices is not None:
        checks.in_file("--prices", prices, "price file")
    checks.number("--session-rate", session_rate, low=0, low_open=True)
    checks.number("--duration", duration, low=0, low_open=True)
    checks.number("--concurrency", concurrency, low=0, low_open=True)
    checks.number("--rate", rate, low=0, low_open=True)
    parse_load(session_rate, concurrency, duration, warmup_s, rate)  # one load kind
    check_executor(executor, ray_address)
    checks.number("--warmup-s", warmup_s, low=0)
    gpu_list, engine_list = comma_list("--gpus", gpus), comma_list("--engines", engines)
    tp_list, cache_list = _ints("--tp", tp), comma_list("--cache-gb", cache_gb)
    layout_list = [layout.name for layout in parse_layouts(comma_list("--layouts", layouts))]
    ep_list, dp_list = comma_list("--ep", ep), comma_list("--dp-attention", dp_attention)
    parse_degrees(ep_list, "--ep")  # a bad degree fails here, before the workload
    parse_degrees(dp_list, "--dp-attention")
    pp_list = comma_list("--pp", pp)
    parse_degrees(pp_list, "--pp")
    router_list = None if routers is None else comma_list("--routers", routers)
    named = resolve_routers(router_list, router)  # a bad name fails here; None: auto
    policy_list = [] if policies is None else comma_list("--policies", policies)
    choices = len(cache_choices(cache_list, policy_list))  # a bad policy fails here
    total = len(gpu_list) * len(engine_list) * len(tp_list) * choices * len(layout_list)
    total *= len(named) if named else 1
    if workload is None:
        workload = example_path(EXAMPLE)
        said = f"no workload given: planning for the bundled {EXAMPLE!r} example ({workload})"
        if session_rate is None and concurrency is None and rate is None and duration is None:
            # Its own arrivals are a few minutes of sessions, too short to judge a steady
            # state: a load long enough to judge one, said and overridable.
            session_rate, duration = EXAMPLE_SESSION_RATE, EXAMPLE_DURATION_S
            warmup_s = EXAMPLE_WARMUP_S if warmup_s is None else warmup_s
            said += (
                f" at {session_rate:g} sessions/s for {duration:g} s, the first "
                f"{warmup_s:g} s warm-up (--session-rate, --concurrency, --duration, "
                "--warmup-s to change)"
            )
        err_console.print(said, highlight=False, markup=False, soft_wrap=True)
    with _progress(total) as advance:
        found = plan(
            workload,
            out,
            model=model,
            model_set=tuple(model_set),
            slos=slo,
            session_rate=session_rate,
            concurrency=concurrency,
            rate=rate,
            duration_s=duration,
            warmup_s=warmup_s,
            gpus=gpu_list,
            engines=engine_list,
            tp=tp_list,
            cache=cache_list,
            layouts=layout_list,
            ep=ep_list,
            dp_attention=dp_list,
            pp=pp_list,
            prices=prices,
            budget_gpus=budget_gpus,
            router=router,
            routers=router_list,
            policies=policy_list,
            search=search,
            jobs=jobs,
            screen=screen,
            seeds=seeds,
            executor=executor,
            ray_address=ray_address,
            command=command_line("plan"),
            progress=advance,
        )
    n = found.counts
    err_console.print(
        f"{n['candidates']} candidate(s): {n['simulated']} simulated, {n['pruned']} pruned "
        f"before simulation; {n['points_run']} point(s) simulated, {n['points_found']} found "
        f"in {out / RESULTS_FILE}"
        + (
            f"; {n['screen_points_run'] + n['screen_points_found']} short screening run(s) "
            f"ruled out {n['screened_out']} replica count(s) without a full run"
            if n["screen_points_run"] + n["screen_points_found"]
            else ""
        )
        + (
            f"; {n['confirm_points_run'] + n['confirm_points_found']} confirmation run(s) "
            f"of the deciding count(s) under {seeds_text(found.seeds[1:])}"
            if len(found.seeds) > 1
            else ""
        ),
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    if found.nodes:  # which ray nodes did the work (node ids cut to 8 hex digits)
        shares = ", ".join(f"{node[:8]} {n}" for node, n in sorted(found.nodes.items()))
        err_console.print(f"ray: points per node: {shares}", highlight=False, markup=False)
    for line in found.notes:
        err_console.print(f"note: {line}", highlight=False, markup=False, soft_wrap=True)
    wrote = f"wrote {out / PLAN_FILE}, {out / MD_FILE}, {out / HTML_FILE}"
    if as_json:
        print(to_json(found.to_dict()), end="")
        err_console.print(wrote, highlight=False, markup=False, soft_wrap=True)
        return
    _print(found)
    console.print(wrote, highlight=False, markup=False)


def _print(p: PlanResult) -> None:
    """The candidates, cheapest outcome first, and the winner's sentence and command."""
    from twin.reports.plan_render import seed_span, seeds_text, winner_sentence
    from twin.reports.plan_result import OUTCOMES

    table = Table(title=f"candidates ({p.prices.label})", title_justify="left")
    several = len(p.seeds) > 1
    cols = ["candidate", "outcome", "replicas", "GPUs", "$/hour"]
    cols += [f"over {seeds_text(p.seeds)} (ms)"] * several + ["why"]
    for col in cols:
        table.add_column(col)
    order = {o: i for i, o in enumerate(OUTCOMES)}
    for c in sorted(
        p.candidates,
        key=lambda c: (order.get(c.outcome, 9), c.usd_per_hour or float("inf"), c.candidate.label),
    ):
        t = c.trial(c.replicas)
        spans = [(s, seed_span(t, s)) for s in p.slos]
        table.add_row(
            c.candidate.label,
            c.outcome,
            "-" if c.replicas is None else str(c.replicas),
            "-" if c.gpus is None else str(c.gpus),
            "-" if c.usd_per_hour is None else f"${c.usd_per_hour:,.2f}",
            *[", ".join(f"{s.text} {x}" for s, x in spans if x) or "-"] * several,
            c.reason or "-",
        )
    console.print(table)
    console.print(winner_sentence(p), highlight=False, markup=False)
    if p.winner is not None:
        console.print(f"reproduce: {p.simulate_command(p.winner)}", highlight=False, markup=False)
