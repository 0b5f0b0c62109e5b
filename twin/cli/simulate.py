"""``twin simulate``: run a workload through a simulated serving cluster."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from twin.cli import checks
from twin.cli.common import (
    CacheGbOption,
    DpAttentionOption,
    EngineModeOption,
    EpOption,
    GpuOption,
    KvDtypeOption,
    ModelOption,
    ModelSetOption,
    PolicyOptionOption,
    PpOption,
    PrecisionOption,
    ProfileOption,
    ReplicasOption,
    SetOption,
    TpOption,
    alpha_label,
    console,
    engine_sets,
    err_console,
    format_ms,
    parse_pairs,
    policy_options,
    progress_bar,
)
from twin.engine.router import DEFAULT_ROUTER, ROUTERS
from twin.hardware import GB
from twin.limits import MAX_SECONDS, MAX_SESSION_RATE
from twin.policies import POLICIES
from twin.precision import with_precision
from twin.presets import DEFAULT_MODEL
from twin.workloads.examples import DEFAULT_EXAMPLE as EXAMPLE

if TYPE_CHECKING:
    from twin.summary import RunSummary

# The run's own modules (the engine, numpy, pyarrow) are imported in the command's body:
# ``twin simulate --help`` shows only what the names above hold (issue 33).


def simulate_epilog() -> str:
    """The engine modes' flags (``--set``) of their newest releases, with defaults and
    sources, for ``twin simulate --help`` (``--engine NAME==VERSION`` picks another)."""
    from twin.engine.modes import ENGINE_MODES

    lines = ["Engine flags (--set NAME=VALUE) of each engine's newest modelled release:"]
    for mode in ENGINE_MODES.values():
        lines.extend(mode.flag_lines())
    return "\n\n".join(lines)


def simulate(
    workload: Path | None = typer.Argument(
        None,
        metavar="[WORKLOAD]",
        help=f"Workload parquet file (default: the bundled {EXAMPLE!r} example).",
    ),
    model: ModelOption = DEFAULT_MODEL,
    model_set: ModelSetOption = [],  # noqa: B006 (typer reads the default)
    precision: PrecisionOption = None,
    kv_dtype: KvDtypeOption = None,
    gpu: GpuOption = None,
    engine: EngineModeOption = None,
    engine_set: SetOption = [],  # noqa: B006 (typer reads the default)
    profile: ProfileOption = None,
    replicas: ReplicasOption = 1,
    tp: TpOption = 1,
    ep: EpOption = 1,
    pp: PpOption = 1,
    dp_attention: DpAttentionOption = 1,
    cache_gb: CacheGbOption = "auto",
    policy: str | None = typer.Option(
        None,
        "--policy",
        "-p",
        help=f"Cache policy: {', '.join(POLICIES)} (default: the engine mode's; marconi).",
    ),
    policy_option: PolicyOptionOption = [],  # noqa: B006 (typer reads the default)
    router: str = typer.Option(DEFAULT_ROUTER, "--router", help=f"Router: {', '.join(ROUTERS)}."),
    session_rate: float | None = typer.Option(
        None,
        "--session-rate",
        help="Poisson session arrivals per second, replacing the "
        "file's session start times (required if they are missing).",
    ),
    burstiness: float | None = typer.Option(
        None,
        "--burstiness",
        help="Shape of the gaps between --session-rate starts: 1 is Poisson, below 1 "
        "burstier, above 1 more regular (gamma gaps, as vllm bench serve --burstiness). "
        "[default: 1]",
    ),
    request_rate: float | None = typer.Option(
        None,
        "--request-rate",
        help="Scale the file's open-loop arrival times to this many requests per second.",
    ),
    seed: int = typer.Option(0, "--seed", min=0, help="Seed of the session arrivals."),
    max_batched_tokens: int | None = typer.Option(
        None,
        "--max-batched-tokens",
        min=1,
        help="Token budget per step (chunked prefill). [default: 8192; the engine modes' "
        "own by GPU: see the engine flags below]",
    ),
    max_running: int | None = typer.Option(
        None,
        "--max-running",
        min=1,
        help="Most sequences in a replica's running batch; an engine flag for it "
        "(max_num_seqs, max_running_requests) must agree. [default: 256; vllm 1024 "
        "(256 below 70 GiB or on an A100), sglang 2048, trtllm 2048]",
    ),
    gpu_mem_util: float | None = typer.Option(
        None,
        "--gpu-mem-util",
        help="Fraction of GPU memory for weights, cache and requests. [default: 0.9]",
    ),
    kv_allocator: str | None = typer.Option(
        None,
        "--kv-allocator",
        help="How the shared pool pages running requests' KV: bytes (exact), paged "
        "(PagedAttention's one-size pages), jenga (per-kind small pages). "
        "[default: jenga with -p jenga, else bytes]",
    ),
    warmup_s: float | None = typer.Option(
        None,
        "--warmup-s",
        min=0.0,
        help="Leave requests arriving before this out of the summary (the cache starts cold). "
        "[default: 20% of --duration, else 0]",
    ),
    until_s: float | None = typer.Option(
        None, "--until-s", help="No request arrives after this simulated time."
    ),
    duration: float | None = typer.Option(
        None,
        "--duration",
        help="Seconds of load: sessions start in [0, DURATION) (with --session-rate, a "
        "generated workload with too few sessions is regenerated longer); the first 20% is "
        "warm-up unless --warmup-s says otherwise.",
    ),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        help="Closed-loop clients, as vllm bench serve --max-concurrency: each sends the "
        "file's sessions one after another, every request when its previous one completes.",
    ),
    prefill_workers: int | None = typer.Option(
        None,
        "--prefill-workers",
        help="Disaggregated serving: this many prefill workers (each --tp GPUs of --gpu, "
        "holding the prefix cache); requires --decode-workers.",
    ),
    decode_workers: int | None = typer.Option(
        None,
        "--decode-workers",
        help="Disaggregated serving: this many decode workers (each --tp GPUs of the same "
        "--gpu); the KV of each prompt is sent to one of them over --kv-link.",
    ),
    kv_link: str | None = typer.Option(
        None,
        "--kv-link",
        help="Disaggregated serving: the link from prefill to decode, ib (a 400 Gb/s NIC "
        "per GPU) or nvlink (both pools in one node). [default: ib]",
    ),
    prefill_gpu: str | None = typer.Option(
        None,
        "--prefill-gpu",
        help="Disaggregated serving: the prefill pool's GPU. [default: --gpu]",
    ),
    decode_gpu: str | None = typer.Option(
        None, "--decode-gpu", help="Disaggregated serving: the decode pool's GPU. [default: --gpu]"
    ),
    prefill_tp: int | None = typer.Option(
        None, "--prefill-tp", min=1, help="GPUs per prefill worker. [default: --tp]"
    ),
    decode_tp: int | None = typer.Option(
        None,
        "--decode-tp",
        min=1,
        help="GPUs per decode worker; the KV moves between ranks as SGLang maps them "
        "(one TP must divide the other). [default: --tp]",
    ),
    prefill_ep: int | None = typer.Option(
        None,
        "--prefill-ep",
        min=1,
        help="Expert-parallel ranks per prefill worker. [default: --ep]",
    ),
    decode_ep: int | None = typer.Option(
        None, "--decode-ep", min=1, help="Expert-parallel ranks per decode worker. [default: --ep]"
    ),
    prefill_dp_attention: int | None = typer.Option(
        None,
        "--prefill-dp-attention",
        min=1,
        help="Attention data-parallel ranks per prefill worker. [default: --dp-attention]",
    ),
    decode_dp_attention: int | None = typer.Option(
        None,
        "--decode-dp-attention",
        min=1,
        help="Attention data-parallel ranks per decode worker. [default: --dp-attention]",
    ),
    prefill_set: list[str] = typer.Option(
        [],
        "--prefill-set",
        help="Disaggregated serving: an engine flag of the prefill servers only, NAME=VALUE "
        "as --set, repeatable (e.g. --engine sglang --prefill-set chunked_prefill_size=16384).",
    ),
    decode_set: list[str] = typer.Option(
        [],
        "--decode-set",
        help="Disaggregated serving: an engine flag of the decode servers only, NAME=VALUE "
        "as --set, repeatable (e.g. --engine vllm --decode-set max_num_seqs=64); a flag "
        "in --set is both pools'.",
    ),
    decode_prefix_cache: bool = typer.Option(
        False,
        "--decode-prefix-cache",
        help="Each decode worker keeps a prefix cache; a request's transfer sends only the "
        "prompt tokens it does not hold (SGLang's --disaggregation-decode-enable-radix-cache, "
        "vLLM's decode instance with prefix caching).",
    ),
    shared_kv_tier: float | None = typer.Option(
        None,
        "--shared-kv-tier",
        min=0.0,
        help="GB of a KV store every prefill worker shares (Mooncake's store under SGLang's "
        "HiCache): a prefix missing on a worker's GPU is loaded from it over the GPUs' NICs; "
        "the summary's pools.shared_tier gives its hit rate.",
    ),
    slo: list[str] = typer.Option(
        [],
        "--slo",
        help="A latency target, repeatable: pNN_ttft|pNN_tpot|pNN_itl|pNN_e2e<=VALUE(ms|s), "
        "e.g. --slo p95_ttft<=500ms --slo p95_tpot<=50ms. Adds each target's value, whether "
        "all are met (only at steady state) and the goodput.",
    ),
    out: Path = typer.Option(
        Path("twin-simulate"),
        "--out",
        "-o",
        help="Output folder for requests.parquet and summary.json.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    force: bool = typer.Option(
        False, "--force", help="Replace the outputs of an earlier run in --out."
    ),
) -> None:
    """Simulate a serving cluster on a workload: TTFT, TPOT, hit rates, throughput.

    Sessions arrive at the workload's times (or as a Poisson process with
    --session-rate); each replica batches continuously with chunked prefill and
    its own prefix cache; each step costs what the calibrated cost model says.
    Writes OUT/requests.parquet (one row per request) and OUT/summary.json.

    Examples:

      twin simulate --out sim

      twin simulate chat.parquet -m marconi-hybrid-7b --gpu h100 -r 8 --cache-gb 40 -p marconi \\
        --router session-affinity --session-rate 4 --out sim-8

      twin simulate trace.parquet --profile my-a100.json -r 2 --tp 2 -p sglang+ --json

      twin simulate --model-set n_ssm_layers=32 -p marconi --policy-option alpha=1.0 --out sim-32

      twin simulate --engine vllm --set max_num_seqs=128 --out sim-vllm

      twin simulate --engine sglang==0.5.23 --set mamba_radix_cache_strategy=extra_buffer_lazy \
        --out sim-sglang

      twin simulate --engine sglang==0.5.10.post1 --set mamba_scheduler_strategy=extra_buffer \
        --out sim-sglang-0510

      twin simulate -m gemma-3-4b --gpu h100 -p jenga --kv-allocator paged --out sim-paged

      twin simulate -m llama-3.1-8b --engine vllm \\
        --set speculative_config='{"method":"eagle3","num_speculative_tokens":3}' --out sim-eagle3

      twin simulate -m qwen3.5-9b --engine sglang --set speculative_algorithm=EAGLE3 \\
        --set speculative_num_steps=3 --set speculative_eagle_topk=1 \\
        --set speculative_acceptance=0.8,0.6,0.4 --out sim-sglang-eagle3

      twin simulate -m deepseek-v3 --gpu h200 --tp 8 --ep 8 --engine trtllm \\
        --set speculative_config='{"decoding_type":"MTP","num_nextn_predict_layers":1}' \\
        --out sim-trtllm-mtp

      twin simulate -m qwen3.5-9b --engine vllm --session-rate 2 --duration 300 \
        --slo p95_ttft<=500ms --slo p95_tpot<=50ms --out sim-steady

      twin simulate -m qwen3.5-9b --engine vllm --concurrency 8 --duration 120 --out sim-c8

      twin simulate -m llama-3-8b --gpu h200 --engine vllm --precision fp8 --kv-dtype fp8 \
        --concurrency 16 --out sim-fp8

      twin simulate -m deepseek-v3 --gpu h200 --tp 8 --ep 8 --dp-attention 8 --engine sglang \
        --concurrency 64 --duration 20 --out sim-dp8

      twin simulate -m llama-3.1-70b --gpu h100 --tp 4 --pp 2 --engine vllm \
        --concurrency 16 --duration 30 --out sim-pp2

      twin simulate -m qwen3.5-9b --gpu h200 --engine sglang --prefill-workers 2 \
        --decode-workers 4 --session-rate 2 --duration 120 --out sim-2p4d

      twin simulate -m llama-3-8b --engine sglang --prefill-workers 1 --decode-workers 1 \
        --prefill-gpu h200 --decode-gpu h100 --prefill-tp 2 --decode-tp 4 --session-rate 2 \
        --duration 120 --out sim-mixed

      twin simulate -m llama-3-8b --engine sglang --prefill-workers 2 --decode-workers 2 \
        --shared-kv-tier 100 --session-rate 2 --duration 60 --out sim-store

      twin simulate -m llama-3-8b --engine vllm --prefill-workers 1 --decode-workers 2 \
        --prefill-set max_num_batched_tokens=16384 --decode-set max_num_seqs=64 \
        --session-rate 2 --duration 60 --out sim-pool-flags

    --cache-gb auto (the default) is the engines' one KV pool; --cache-gb 20 is
    the Marconi paper's dedicated 20 GB cache. Speculative decoding (vLLM's and
    TensorRT-LLM's speculative_config, SGLang's speculative_* flags) prices each step
    as a draft plus a verification over the expected acceptance length (--set
    speculative_acceptance=RATE, or one rate per drafted token; a workload's
    spec_acceptance column gives a request its own).
    """
    from twin.engine.modes import get_mode
    from twin.engine.run import REQUESTS_FILE, SUMMARY_FILE, RunArgs, build_run
    from twin.engine.settings import typed_settings
    from twin.metrics import to_json
    from twin.presets import resolve_model
    from twin.slo import parse_slos
    from twin.workloads.examples import example_path

    cache = checks.cache_gb("--cache-gb", cache_gb)
    checks.number("--gpu-mem-util", gpu_mem_util, low=0, high=1, low_open=True)
    for flag, rate in (("--session-rate", session_rate), ("--request-rate", request_rate)):
        checks.number(flag, rate, low=0, low_open=True, high=MAX_SESSION_RATE)
    checks.number("--warmup-s", warmup_s, low=0, high=MAX_SECONDS)
    checks.number("--until-s", until_s, low=0, low_open=True, high=MAX_SECONDS)
    checks.number("--duration", duration, low=0, low_open=True, high=MAX_SECONDS)
    checks.number("--concurrency", concurrency, low=0, low_open=True)
    checks.number("--burstiness", burstiness, low=0, low_open=True)
    slos = parse_slos(slo)
    if workload is not None:
        checks.in_file("WORKLOAD", workload, "workload file")
    checks.out_dir("--out", out)
    checks.claim_out("--out", out)  # held from the check below to the commit
    checks.no_other_run("--out", out, [REQUESTS_FILE, SUMMARY_FILE], force)
    bundled = workload is None
    if workload is None:
        workload = example_path(EXAMPLE)
    mode = get_mode(engine)
    given = [
        (name, value)
        for name, value in (
            ("policy", policy),
            ("max_batched_tokens", max_batched_tokens),
            ("max_running", max_running),
            ("memory_utilization", gpu_mem_util),
            ("kv_allocator", kv_allocator),
            ("burstiness", burstiness),
            ("warmup_s", warmup_s),
            ("prefill_workers", prefill_workers),
            ("decode_workers", decode_workers),
            ("kv_link", kv_link),
            ("prefill_gpu", prefill_gpu),
            ("decode_gpu", decode_gpu),
            ("prefill_tp", prefill_tp),
            ("decode_tp", decode_tp),
            ("prefill_ep", prefill_ep),
            ("decode_ep", decode_ep),
            ("prefill_dp_attention", prefill_dp_attention),
            ("decode_dp_attention", decode_dp_attention),
            ("decode_prefix_cache", decode_prefix_cache or None),
            (
                "prefill_engine_flags",
                parse_pairs(prefill_set, "--prefill-set", "max_num_seqs=8") or None,
            ),
            (
                "decode_engine_flags",
                parse_pairs(decode_set, "--decode-set", "max_num_seqs=64") or None,
            ),
            (
                "shared_kv_tier_bytes",
                int(shared_kv_tier * GB) if shared_kv_tier is not None else None,
            ),
        )
        if value is not None
    ]
    if policy is not None or policy_option:
        given.append(("policy_options", policy_options(policy_option, [policy or mode.policy])))
    args: RunArgs = {
        "model": with_precision(resolve_model(model, model_set), precision, kv_dtype),
        "gpu": gpu,
        "engine": engine,
        "profile": profile,
        "cache_gb": cache,
        "sets": engine_sets(engine_set),
        "replicas": replicas,
        "tp": tp,
        "ep": ep,
        "pp": pp,
        "dp_attention": dp_attention,
        "router": router,
        "session_rate": session_rate,
        "request_rate": request_rate,
        "seed": seed,
        "until_s": until_s,
        "duration_s": duration,
        "concurrency": concurrency,
    }
    args.update(typed_settings(RunArgs, given))  # the options given, each checked above
    run = build_run(workload, **args)
    if bundled:  # said once every flag has passed its checks (an error stays one line)
        err_console.print(
            f"no workload given: simulating the bundled {EXAMPLE!r} example ({workload})"
        )
    # Completed requests, not simulated seconds: the run goes on draining well
    # past the last arrival, so a time bar sat at 100% for half the run.
    # With --until-s some rows never arrive, and the total is unknown.
    total = run.workload.num_rows if run.config.arrivals.until_s is None else None
    with progress_bar("requests completed", total) as advance:
        summary = run.simulate(out, on_record=lambda _: advance(1), force=force, slos=slos)
    if as_json:
        print(to_json(summary.to_dict()), end="")  # the same text as summary.json
        return
    _print_table(summary, out)


def _precision(s: RunSummary) -> str:
    """`` (fp8 weights, fp8 KV)`` when the run was priced at another precision than bf16."""
    prof = s.provenance.profile
    if "precision" not in prof:
        return ""
    experts = f", {prof['moe_precision']} experts" if prof.get("moe_precision") else ""
    return f" ({prof['precision']} weights{experts}, {prof['kv_dtype']} KV)"


def _alphas(s: RunSummary) -> str:
    """Each replica's Marconi alpha and where it came from (tuned, fixed, 0 untuned)."""
    stats = [r.get("policy", {}) for r in s.cluster.replicas]
    if not any("alpha" in p for p in stats):
        return "-"
    return ", ".join(alpha_label(p.get("alpha"), p.get("alpha_source", "")) for p in stats)


def _print_table(s: RunSummary, out: Path) -> None:
    from twin.engine.run import REQUESTS_FILE, SUMMARY_FILE
    from twin.summary import STAT_COLUMNS

    cfg, req, cluster = s.config, s.requests, s.cluster
    memory = (
        f"shared KV pool {cluster.memory_budget_bytes / GB:.1f} GB"
        if cfg.get("shared_pool")
        else f"{cfg['cache_bytes'] / GB:g} GB cache"
    )
    stages = f", pp {cfg['pp']}" if cfg.get("pp", 1) > 1 else ""
    title = (
        f"{s.provenance.workload.path}: {req.measured:,} requests measured "
        f"({req.warmup_excluded:,} in warm-up, {req.rejected:,} rejected); "
        f"{s.provenance.model}{_precision(s)} x{cfg['replicas']} (tp {cfg['tp']}{stages}), "
        f"engine {cfg.get('engine', 'paper')}, "
        f"{cfg['policy']}, {memory}, {cfg['router']}"
    )
    table = Table(title=title, title_justify="left")
    table.add_column("latency (ms)")
    for col in STAT_COLUMNS:
        table.add_column(col, justify="right")
    lat = s.latency
    for stats, label in (
        (lat.ttft_s, "TTFT"),
        (lat.tpot_s, "TPOT"),
        (lat.itl_s, "ITL"),
        (lat.e2e_s, "end-to-end"),
        (lat.queue_s, "queue wait"),
        (lat.prefill_s, "prefill"),
    ):
        table.add_row(label, *(format_ms(stats.get(c)) for c in STAT_COLUMNS))
    console.print(table)
    hit, thr, util, flops, pre = s.hit, s.throughput, cluster.utilisation, s.flops, s.preemption
    facts = Table(show_header=False)
    facts.add_column()
    facts.add_column(justify="right")
    rate = thr.requests_per_s
    saved = f"{flops.saved_fraction:.1%}"
    if flops.saving_kept is not None:
        # prompt-cache on a model with recurrent layers (twin/cache/module_cache.py).
        saved += (
            f" ({flops.saving_kept:.0%} of the modules' attention-reuse saving survives "
            "the recurrent layers' recompute)"
        )
    for label, value in (
        ("token hit rate", f"{hit.token_hit_rate:.1%}"),
        ("request hit rate", f"{hit.request_hit_rate:.1%}"),
        ("prefill FLOPs saved", saved),
        (
            "throughput",
            "-"
            if rate is None
            else f"{rate:,.2f} req/s, {thr.output_tokens_per_s:,.0f} output tok/s",
        ),
        (
            "replica utilisation",
            f"{util.mean:.1%} (min {util.min:.1%}, max {util.max:.1%})",
        ),
        ("simulated time", f"{cluster.sim_end_s:,.1f} s"),
        *(
            [
                (
                    "preemptions",
                    f"{pre.preemptions:,} ({pre.preempted_requests:,} requests, "
                    f"{pre.recomputed_tokens:,} tokens recomputed)",
                )
            ]
            if pre is not None
            else []
        ),
        ("alpha per replica", _alphas(s)),
        (
            "cost model",
            f"{s.provenance.profile['gpu']}: {s.provenance.profile['provenance']}",
        ),
        ("outputs", f"{out / REQUESTS_FILE}, {out / SUMMARY_FILE}"),
    ):
        facts.add_row(label, value)
    console.print(facts)
    _print_verdict(s)
    if req.rejected:
        err_console.print(
            f"[yellow]warning:[/] {req.rejected:,} request(s) could never fit "
            "a replica's memory for running requests and were rejected"
        )


def _print_verdict(s: RunSummary) -> None:
    """The steady-state verdict, the SLO targets, and a warning when nothing can be read."""
    from twin.steady_state import OVERLOADED

    steady = s.steady_state
    if steady is not None:
        t0, t1 = steady.window_s
        line = f"steady state: {steady.verdict} (arrivals {t0:,.1f}-{t1:,.1f} s): {steady.reason}"
        if steady.waiting_share is not None:
            line += f"; a request waited for admission {steady.waiting_share:.0%} of the time"
        if steady.verdict == OVERLOADED:
            err_console.print(
                f"[yellow]warning:[/] overloaded: {escape(steady.reason)}; its latencies "
                "grow with the length of the run and meet no SLO (lower the load or add "
                "replicas)"
            )
        else:
            console.print(line, highlight=False, markup=False)
    slo = s.slo
    if slo is not None:
        for t in slo.targets:
            value = "-" if t.value_ms is None else f"{t.value_ms:,.1f} ms"
            console.print(
                f"SLO {t.label}: {value} ({'met' if t.met else 'missed'})",
                highlight=False,
                markup=False,
            )
        goodput = slo.goodput_rps
        console.print(
            f"SLOs {'met' if slo.met else 'not met'}"
            + ("" if slo.met or not slo.targets_met else " (the run is not at steady state)")
            + f"; goodput {'-' if goodput is None else f'{goodput:,.2f}'} req/s, "
            f"{(slo.attainment or 0):.1%} of requests within every per-request target",
            highlight=False,
            markup=False,
        )
