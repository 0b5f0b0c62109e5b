"""``twin cost``: predicted prefill and decode latency of a model on a GPU profile."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from twin import precision as px
from twin.cli.common import (
    DpAttentionOption,
    EngineOption,
    EpOption,
    KvDtypeOption,
    ModelOption,
    ModelSetOption,
    PpOption,
    PrecisionOption,
    comma_list,
    console,
    print_json,
)
from twin.costmodel.breakdown import KINDS, LABEL, MIXER_LABELS, StepCost
from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.costmodel.profile_store import available_profiles, resolve_profile, shipped_name
from twin.costmodel.provenance import family_label
from twin.errors import TwinError
from twin.limits import MAX_BATCH, MAX_LIST_ITEMS, MAX_SEQUENCE_TOKENS
from twin.model import ModelSpec
from twin.precision import with_precision
from twin.presets import resolve_model

if TYPE_CHECKING:
    from twin.costmodel import CostModel

# The cost model itself (numpy) is imported in the command's body: ``twin cost --help``
# imports none of it (issue 33).


def _ints(text: str, flag: str, high: int) -> list[int]:
    """Comma-separated whole numbers from 1 to ``high``, at most ``MAX_LIST_ITEMS``."""
    items = text.split(",")
    if len(items) > MAX_LIST_ITEMS:
        raise TwinError(f"{flag}: {len(items):,} values; at most {MAX_LIST_ITEMS:,}")
    items = comma_list(flag, text, "1024,4096")
    try:
        values = [int(v) for v in items]
    except ValueError:
        raise TwinError(
            f"{flag} {text!r}: expected comma-separated integers, e.g. 1024,4096"
        ) from None
    if min(values) < 1 or max(values) > high:
        raise TwinError(f"{flag} {text!r}: each must be from 1 to {high:,}")
    return values


def _kinds(model: ModelSpec) -> list[str]:
    """The breakdown labels this model has (one per mixer kind, ``ssm`` for Mamba2),
    then the FFN kinds and the head."""
    mixers = model.mixer_counts
    counts = {
        **{LABEL[k]: n for k, n in mixers.items()},
        "mlp": model.n_mlp_layers,
        "moe": model.n_moe_layers,
        "head": 1,
    }
    return [k for k in (*KINDS, *MIXER_LABELS) if counts.get(k)]


def _prefill_rows(
    lengths: list[int], cached_frac: float, parts: Callable[[int, int], dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each prompt length uncached, then ``cached_frac`` of it cached: ``parts(n, cached)``."""
    cached = [(n, c) for n in lengths for c in sorted({0, int(n * cached_frac)})]
    return [{"prompt": n, "cached": c, **parts(n, c)} for n, c in cached]


def _print_table(title: str, columns: Iterable[str], rows: Iterable[Iterable[str]]) -> None:
    """One of ``twin cost``'s tables: ``columns`` right-justified, a row of cells a row."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    for cells in rows:
        table.add_row(*cells)
    console.print(table)


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.2f}"


def predictions(
    cm: CostModel, lengths: list[int], cached_frac: float, batches: list[int], context: int
) -> dict[str, Any]:
    """The numbers ``twin cost`` shows, as data."""

    def parts(n: int, c: int) -> dict[str, Any]:
        cost = cm.prefill(n - c, c, breakdown=True)
        assert isinstance(cost, StepCost)
        return {"total_s": cost.total_s, "by_kind": cost.by_kind}

    prefill = _prefill_rows(lengths, cached_frac, parts)
    decode = []
    for b in batches:
        cost = cm.decode([context] * b, breakdown=True)
        assert isinstance(cost, StepCost)
        decode.append(
            {
                "batch": b,
                "context": context,
                "total_s": cost.total_s,
                "tokens_per_s": b / cost.total_s,
                "by_kind": cost.by_kind,
            }
        )
    return {"prefill": prefill, "decode": decode}


def dp_predictions(
    pricer: Any, lengths: list[int], cached_frac: float, batches: list[int], context: int
) -> dict[str, Any]:
    """``twin cost --dp-attention``'s numbers: synchronised steps with every rank
    prefilling one prompt, or decoding ``batch`` sequences, split into the slowest
    attention side, the FFN/MoE on all ranks' tokens and the gather/scatter."""
    d = pricer.dp

    def parts(step: Any, tokens: int, extend: bool) -> dict[str, float]:
        return {
            "total_s": pricer.sync_time([step] * d),
            "attention_s": pricer.attention_time(step),
            "ffn_s": pricer.ffn_time(tokens * d),
            "gather_scatter_s": pricer.comm_time([tokens] * d, extend),
        }

    prefill = _prefill_rows(
        lengths, cached_frac, lambda n, c: parts(([(n - c, c)], 0, 0), n - c, True)
    )
    decode = []
    for b in batches:
        row = {"batch_per_rank": b, "context": context, **parts(((), b, b * context), b, False)}
        row["tokens_per_s"] = b * d / row["total_s"]
        decode.append(row)
    return {"prefill": prefill, "decode": decode}


def _kernel_layout(
    spec: ModelSpec, engine: str | None, tp: int, dp: int, ep: int, gpu: str
) -> KernelLayout:
    """How ``engine``'s current build (``EngineMode.build``: ``--engine NAME==VERSION``'s,
    else the newest) lays out ``spec``'s kernels on ``tp`` GPUs (``gpu``) with ``dp``
    attention-DP ranks and ``ep`` expert-parallel ones (the engine mode's rule, as
    ``twin simulate --engine`` prices it:
    ``twin.engine.kernel_layouts``); the default without ``--engine``."""
    if engine is None:
        return DEFAULT_LAYOUT
    from twin.engine.modes import get_mode  # late: the CLI imports the engine only to run

    mode = get_mode(engine)
    return mode.layout_for(spec, mode.build, tp, dp, ep, gpu)


def _dp_cost(
    spec: Any,
    prof: Any,
    tp: int,
    ep: int,
    dp: int,
    lengths: list[int],
    cached_frac: float,
    batches: list[int],
    context: int,
    as_json: bool,
    moe_a2a: str = "",
    layout: KernelLayout = DEFAULT_LAYOUT,
) -> None:
    """``twin cost --dp-attention``: the synchronised steps' tables (or JSON)."""
    from twin.engine.dp_pricing import dp_pricer

    pricer = dp_pricer(spec, prof, tp, ep, dp, 0.0, 0.0, moe_a2a, kernel_layout=layout)
    data = dp_predictions(pricer, lengths, cached_frac, batches, context)
    head = {"model": spec.name, "gpu": prof.gpu, "tp": tp, "ep": ep, "dp_attention": dp}
    if moe_a2a:
        head["moe_a2a"] = moe_a2a
    if as_json:
        print_json({**head, "provenance_label": pricer.provenance, **data})
        return
    console.print(
        f"[bold]{spec.name}[/] on [bold]{prof.gpu}[/], tp={tp}, ep={ep}, dp-attention={dp} "
        f"(attention over {tp // dp} GPU(s) a rank): {pricer.provenance}",
        highlight=False,
    )
    cols = ("total", "attention", "ffn/moe", "a2a + gather" if moe_a2a else "gather/scatter")
    keys = ("total_s", "attention_s", "ffn_s", "gather_scatter_s")
    _print_table(
        f"Prefill step latency (ms), one prompt on each of {dp} ranks",
        ("prompt", "cached", *cols),
        ((f"{r['prompt']:,}", f"{r['cached']:,}", *(_ms(r[k]) for k in keys))
         for r in data["prefill"]),
    )  # fmt: skip
    _print_table(
        f"Decode step latency (ms) at context {context:,}, every rank a batch",
        ("batch/rank", *cols, "tokens/s"),
        ((str(r["batch_per_rank"]), *(_ms(r[k]) for k in keys), f"{r['tokens_per_s']:,.0f}")
         for r in data["decode"]),
    )  # fmt: skip


def pp_predictions(
    pricer: Any, lengths: list[int], cached_frac: float, batches: list[int], context: int
) -> dict[str, Any]:
    """``twin cost --pp``'s numbers: each stage's seconds of one prompt's prefill or one
    micro-batch's decode step, the sends between stages, the latency through the empty
    pipeline, and (decode) the tokens a second with ``pp`` such micro-batches in flight:
    each cycles in ``max(latency, pp x the slowest stage)``."""
    pp = pricer.pp

    def parts(prefills: Any, batch: int, ctx: int, tokens: int) -> dict[str, Any]:
        stages = pricer.stage_times(prefills, batch, ctx)
        send = pricer.send_time(tokens)
        return {"stages_s": stages, "send_s": send, "total_s": sum(stages) + (pp - 1) * send}

    prefill = _prefill_rows(lengths, cached_frac, lambda n, c: parts([(n - c, c)], 0, 0, n - c))
    decode = []
    for b in batches:
        row = {"batch": b, "context": context, **parts((), b, b * context, b)}
        cycle = max(row["total_s"], pp * max(row["stages_s"]))
        row["tokens_per_s"] = pp * b / cycle
        decode.append(row)
    return {"prefill": prefill, "decode": decode}


def _pp_cost(
    spec: Any,
    prof: Any,
    engine: str | None,
    tp: int,
    ep: int,
    pp: int,
    lengths: list[int],
    cached_frac: float,
    batches: list[int],
    context: int,
    as_json: bool,
    layout: KernelLayout = DEFAULT_LAYOUT,
) -> None:
    """``twin cost --pp``: each stage's share of the steps (or JSON)."""
    from twin.engine.pipeline import pipeline_pricer
    from twin.parallel import PP_SPLIT_OF_ENGINE, stage_models

    pricer = pipeline_pricer(spec, prof, tp, ep, pp, engine=engine or "", kernel_layout=layout)
    data = pp_predictions(pricer, lengths, cached_frac, batches, context)
    split = PP_SPLIT_OF_ENGINE.get(engine or "", "vllm")
    layers = [len(m.layers or ()) for m in stage_models(spec, pp, split)]
    head = {"model": spec.name, "gpu": prof.gpu, "tp": tp, "ep": ep, "pp": pp}
    if as_json:
        print_json({**head, "stage_layers": layers, "provenance_label": pricer.provenance, **data})
        return
    console.print(
        f"[bold]{spec.name}[/] on [bold]{prof.gpu}[/], tp={tp}, ep={ep}, pp={pp} (layers "
        f"{'/'.join(map(str, layers))}; {pricer.link_bw / 1e9:g} GB/s a GPU between stages): "
        f"{pricer.provenance}",
        highlight=False,
    )
    stages = [f"stage {j}" for j in range(pp)]
    _print_table(
        "Prefill latency (ms) through the empty pipeline, by stage",
        ("prompt", "cached", "total", *stages, "send"),
        (
            (f"{r['prompt']:,}", f"{r['cached']:,}", _ms(r["total_s"]), *map(_ms, r["stages_s"]),
             f"{1e3 * r['send_s']:.3f}")
            for r in data["prefill"]
        ),
    )  # fmt: skip
    _print_table(
        f"Decode step latency (ms) at context {context:,}, one micro-batch; tokens/s "
        f"with {pp} in flight",
        ("batch", "total", "tokens/s", *stages, "send"),
        (
            (str(r["batch"]), _ms(r["total_s"]), f"{r['tokens_per_s']:,.0f}",
             *map(_ms, r["stages_s"]), f"{1e3 * r['send_s']:.3f}")
            for r in data["decode"]
        ),
    )  # fmt: skip


def cost(
    model: ModelOption = ...,  # type: ignore[assignment]  # required: typer reads ... so
    model_set: ModelSetOption = [],  # noqa: B006 (typer reads the default)
    precision: PrecisionOption = None,
    kv_dtype: KvDtypeOption = None,
    gpu: str | None = typer.Option(
        None,
        "--gpu",
        "-g",
        help="Shipped profile by GPU name (h100, b200, l40s, a100, cpu, ...): measured from "
        "NVIDIA's kernel tables where they cover it; NAME-datasheet for the datasheet one.",
    ),
    engine: EngineOption = None,
    profile: Path | None = typer.Option(None, "--profile", help="A profile JSON instead of --gpu."),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel degree (GPUs per replica)."),
    ep: EpOption = 1,
    dp_attention: DpAttentionOption = 1,
    moe_a2a: str = typer.Option(
        "none",
        "--moe-a2a",
        help="With --dp-attention: none (the MoE layers gather and scatter over the links), "
        "deepep (DeepEP's dispatch and combine from the profile's a2a fits, high-throughput "
        "with a prefill, else low-latency: SGLang's --moe-a2a-backend deepep), deepep_ht or "
        "deepep_ll (one mode: vLLM's --all2all-backend deepep_high_throughput / "
        "deepep_low_latency).",
    ),
    pp: PpOption = 1,
    lengths: str = typer.Option(
        "1024,4096,16384,32768",
        "--lengths",
        help="Prompt lengths of the prefill table, comma-separated.",
    ),
    cached_frac: float = typer.Option(
        0.5,
        "--cached-frac",
        min=0.0,
        max=0.999,
        help="Share of each prompt served from a cached prefix in the second row.",
    ),
    batches: str = typer.Option(
        "1,8,32,128", "--batches", help="Batch sizes of the decode table, comma-separated."
    ),
    context: int = typer.Option(
        4096,
        "--context",
        min=0,
        max=MAX_SEQUENCE_TOKENS,
        help="Context of every sequence in the decode table.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Predict prefill and decode step latency, split by layer kind.

    Every number carries its provenance per kernel family (measured from
    NVIDIA's tables, measured on an own GPU, transferred, or datasheet roofline).

    Examples:

      twin cost --model llama-3-8b --gpu h100

      twin cost --model marconi-hybrid-7b --gpu b200 --engine sglang

      twin cost --model llama-3-8b --gpu h100-datasheet

      twin cost -m llama-3-8b -g a100 --tp 2 --lengths 2048,8192 --json

      twin cost -m marconi-hybrid-7b -g h100 --model-set n_ssm_layers=32

      twin cost -m qwen3.5-9b -g h100 --lengths 4096,32768

      twin cost -m llama-3-8b -g h200 --precision fp8 --kv-dtype fp8

      twin cost -m llama-3-8b -g b200 --engine trtllm --precision nvfp4 --kv-dtype fp8

      twin cost -m deepseek-r1 -g h200 --tp 8 --ep 8 --engine sglang

      twin cost -m deepseek-r1 -g h200 --tp 8 --ep 8 --dp-attention 8 --engine sglang

      twin cost -m deepseek-r1 -g h200 --tp 8 --ep 8 --dp-attention 8 --engine sglang \
        --moe-a2a deepep

      twin cost -m llama-3.1-70b -g h100 --tp 4 --pp 2

    With --dp-attention D the tables are of the synchronised step of D attention
    ranks, each prefilling one prompt or decoding a batch of its own: the slowest
    rank's attention side, the FFN/MoE on every rank's tokens, and their gather/scatter.
    With --pp N they are each stage's share of a micro-batch (its layers; the LM head on
    the last), the send of the activations between stages, and the decode tokens a
    second with N micro-batches of that batch in flight.
    """
    from twin.costmodel import CostModel
    from twin.costmodel.a2a import A2APrice

    if (gpu is None) == (profile is None):
        raise TwinError(
            "give either --gpu NAME or --profile PATH (exactly one); shipped: "
            f"{', '.join(available_profiles())}"
        )
    prompts = _ints(lengths, "--lengths", MAX_SEQUENCE_TOKENS)
    sizes = _ints(batches, "--batches", MAX_BATCH)
    if moe_a2a not in ("none", *A2APrice.BACKENDS):
        raise TwinError(f"--moe-a2a {moe_a2a}: expected none, deepep, deepep_ht or deepep_ll")
    if moe_a2a != "none" and dp_attention <= 1:
        raise TwinError(
            f"--moe-a2a {moe_a2a}: priced under --dp-attention only (give --dp-attention D)"
        )
    if pp > 1:  # the pipelined replica's own refusals (e.g. with --dp-attention)
        from twin.engine.config_build import build_config

        build_config(tp=tp, ep=ep, dp_attention=dp_attention, pp=pp)
    spec = with_precision(resolve_model(model, model_set), precision, kv_dtype)
    prof = resolve_profile(gpu, profile, engine)
    if engine is not None:  # the experts as twin simulate --engine prices them
        from twin.engine.modes import get_mode  # late: the CLI imports the engine only to run
        from twin.engine.run_pricing import priced_profile

        prof = priced_profile(spec, prof, get_mode(engine).name)
    layout = _kernel_layout(spec, engine, tp, dp_attention, ep, prof.gpu)
    if pp > 1:
        args = (prompts, cached_frac, sizes, context, as_json)
        _pp_cost(spec, prof, engine, tp, ep, pp, *args, layout)
        return
    if dp_attention > 1:
        a2a = "" if moe_a2a == "none" else moe_a2a
        args = (prompts, cached_frac, sizes, context, as_json)
        _dp_cost(spec, prof, tp, ep, dp_attention, *args, a2a, layout)
        return
    cm = CostModel(spec, prof, tp=tp, ep=ep, kernel_layout=layout)
    data = predictions(cm, prompts, cached_frac, sizes, context)
    header = {
        "model": spec.name,
        "gpu": prof.gpu,
        "device": prof.device,
        "tp": tp,
        "ep": ep,
        "source": prof.source,
        **px.info(spec),
        "provenance_label": cm.provenance,
        "provenance_by_kernel": {k: family_label(prof, f) for k, f in prof.kernels.items()},
        **({"kernels_priced": dict(cm.priced.keys)} if cm.priced.keys else {}),
        **({"datasheet_fallback_kernels": cm.fallback_kernels} if cm.fallback_kernels else {}),
        "profile": str(profile or available_profiles()[shipped_name(gpu or "h100", engine)]),
    }
    if as_json:
        print_json({**header, **data})
        return
    at = "" if px.is_default(spec) else f", {px.describe(spec)}"
    eps = f", ep={ep}" if ep > 1 else ""
    console.print(
        f"[bold]{spec.name}[/] on [bold]{prof.gpu}[/] ({prof.device}), tp={tp}{eps}{at}: "
        f"{cm.provenance}",
        highlight=False,
    )
    if cm.fallback_kernels:
        console.print(
            f"{', '.join(cm.fallback_kernels)}: not in this profile; priced by the datasheet "
            "roofline fallback of twin.costmodel.mixer_kernels (Mamba-1's scan against the "
            "fp32 CUDA-core peak)",
            highlight=False,
            markup=False,
        )
    kinds = _kinds(spec)
    _print_table(
        "Prefill latency (ms), by layer kind",
        ("prompt", "cached", "total", *kinds),
        (
            (f"{r['prompt']:,}", f"{r['cached']:,}", _ms(r["total_s"]),
             *(_ms(r["by_kind"][k]) for k in kinds))
            for r in data["prefill"]
        ),
    )  # fmt: skip
    _print_table(
        f"Decode step latency (ms) at context {context:,}, by layer kind",
        ("batch", "total", "tokens/s", *kinds),
        (
            (str(r["batch"]), _ms(r["total_s"]), f"{r['tokens_per_s']:,.0f}",
             *(_ms(r["by_kind"][k]) for k in kinds))
            for r in data["decode"]
        ),
    )  # fmt: skip
