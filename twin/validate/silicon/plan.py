"""A row turned into the twin's run (:class:`RowPlan`) or a counted reason it cannot be."""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from twin import precision as px
from twin.costmodel import precision_kernels as pk
from twin.costmodel.collective_families import allreduce_kernel
from twin.costmodel.profile import Profile
from twin.costmodel.profile_store import load_profile
from twin.engine import RunArgs, typed_settings
from twin.engine.modes import get_mode
from twin.errors import TwinError
from twin.model import ModelSpec
from twin.parallel import Layout, check_layout
from twin.validate.silicon.configs import find_config, load_model, read_config, system_gpus
from twin.validate.silicon.deployment import (
    ENGINE_OF_BACKEND,
    deployment,
    trtllm_overlap_scheduler,
)
from twin.validate.silicon.eager_prefill import (
    eager_prefill_s,
    vllm_eager_decode_s,
    vllm_eager_overlaps,
    vllm_graph_tokens,
)
from twin.validate.silicon.harness import (
    REASON_BROKEN_ATTENTION_DP,
    REASON_GAP_ANALYSIS_TPOT,
    attention_dp_broken,
    gap_analysis_tpot_unpaced,
    harness_of,
    inferencemax_row,
)
from twin.validate.silicon.inferencemax import (
    INFERENCEMAX_DISAGG_SYSTEMS,
    REASON_INFERENCEMAX_DISAGG,
)
from twin.validate.silicon.inferencemax_sglang import (
    inferencemax_cold_prefix_stall_s,
    inferencemax_prompt_scale,
    inferencemax_sglang_default_kv,
    inferencemax_sglang_rounds,
)
from twin.validate.silicon.inferencemax_trtllm import (
    inferencemax_speculation,
    inferencemax_trtllm_moe_backend,
)
from twin.validate.silicon.inferencemax_vllm import (
    REASON_INFERENCEMAX_CLIENT_CAP,
    inferencemax_client_capped,
    inferencemax_served_checkpoint,
    inferencemax_vllm_default_kv,
    inferencemax_vllm_float32_precision,
    vllm_async_scheduling,
    vllm_moe_backend,
)
from twin.validate.silicon.precision import (
    RowPrecision,
    _unpriced_columns,
    checkpoint_attention_unquantised,
    engine_default_kv,
    hf_quant_config,
    row_precision,
    runs_weight_only,
    served_fp8_checkpoint,
    trtllm_block_experts,
)
from twin.validate.silicon.rows import (
    REASON_DISAGG,
    REASON_EP,
    REASON_NO_CONCURRENCY,
    REASON_NO_LENGTHS,
    REASON_NO_MEASUREMENT,
    REASON_PP,
    SiliconRow,
    default_configs,
)


@dataclass(frozen=True)
class RowPlan:
    """What the twin runs for one expressible row."""

    row: SiliconRow
    model_fields: dict[str, Any]  # ModelSpec.to_dict(derived=False): plain data, pickles
    model_id: str  # the Hugging Face id whose config was used (may differ from model_path)
    gpu: str  # the twin's GPU name (its shipped <gpu>-<engine> profile prices the steps)
    engine: str  # the twin's engine mode
    tp: int
    concurrency: int  # clients on the one worker the twin runs (:func:`agg_workers`)
    precision: str  # what is priced, and why
    priced: str  # what is priced, as the summary groups it: "fp8, fp8 KV"
    warmup: int  # requests sent first and left out of the means
    requests: int  # all requests, warm-up included
    # build_run keywords for the server's limits (:func:`deployment`), through the builder
    deployment: RunArgs = dataclasses.field(default_factory=lambda: RunArgs())
    ep: int = 1  # expert-parallel ranks within the tp GPUs (the row's moe_ep_size)
    workers: int = 1  # aggregated workers the measured clients were spread over
    range_ratio: float = 1.0  # the harness's length spread (:class:`Harness`)
    # the harness's per-request dispatch delay, U(0, this) seconds (:class:`Harness`)
    dispatch_spread_s: float = 0.0
    # server prompt tokens per token the row names (``inferencemax_prompt_scale``)
    prompt_scale: float = 1.0
    dp: int = 1  # attention data-parallel ranks among the tp GPUs (attention_dp_size)
    # The precision was read from the checkpoint (``RowPrecision.native``), not the columns.
    native_quant: bool = False

    @property
    def model(self) -> ModelSpec:
        return ModelSpec.from_dict(self.model_fields)

    @property
    def seed(self) -> int:
        """The workload's seed (from the row id: reruns are identical)."""
        return int(hashlib.sha256(self.row.id.encode("utf-8")).hexdigest()[:8], 16)


@cache
def _profile(gpu: str, engine: str) -> Profile | None:
    """``gpu``'s shipped profile for engine mode ``engine``; None if none."""
    try:
        return load_profile(gpu, get_mode(engine).kernels)
    except (TwinError, KeyError):
        return None


def _unpriceable(profile: Profile, precision: RowPrecision, model: ModelSpec) -> str | None:
    """Why ``profile`` cannot price ``model`` at ``precision`` (None if it can): "precision
    nvfp4 not priced by profile h100-trtllm (it prices bf16, fp8, fp8-block; H100 SXM5 has
    no FP4 tensor cores)"."""
    spec = precision_model(model, precision)
    try:
        pk.priced_precision(spec, profile)
    except TwinError:
        fmt = px.weight_format(spec.precision)
        if fmt.kernel in profile.kernels:  # the experts' format is the missing one
            fmt = px.moe_format(spec)
        why = pk.no_fp4(profile, fmt)
        has = ", ".join(profile.precisions())
        return (
            f"precision {fmt.name} not priced by profile {pk.profile_name(profile)} "
            f"(it prices {has}{'; ' + why if why else ''})"
        )
    return None


def precision_model(model: ModelSpec, precision: RowPrecision) -> ModelSpec:
    """``model`` at the row's precision (``twin.precision``)."""
    out = px.with_precision(model, precision.weights, precision.kv)
    if precision.moe is not None and model.n_moe_layers:
        out = dataclasses.replace(out, moe_precision=precision.moe)
    return out


def plan_row(
    row: SiliconRow, configs: Path | None = None, deploy: str = "benchmark", pool: bool = False
) -> RowPlan | str:
    """The twin's run for ``row``, or the reason it cannot express it.

    ``configs`` is the folder of cached Hugging Face configs (the package's
    ``model_configs`` by default). Reasons are checked in a fixed order and the first
    that applies is returned, so each row is counted once. ``pool``: ``row`` is one pool
    of a disaggregated row (``twin.validate.silicon_disagg``), so an InferenceMAX
    GB200/GB300 run is what it says it is.
    """
    if row.ttft_ms is None or row.tpot_ms is None:
        return REASON_NO_MEASUREMENT
    if row.mode != "agg":
        return REASON_DISAGG if row.mode == "disagg" else f"mode {row.mode or 'empty'}"
    if not pool and row.system in INFERENCEMAX_DISAGG_SYSTEMS and inferencemax_row(row):
        return REASON_INFERENCEMAX_DISAGG
    if inferencemax_client_capped(row):
        return REASON_INFERENCEMAX_CLIENT_CAP
    if gap_analysis_tpot_unpaced(row):
        return REASON_GAP_ANALYSIS_TPOT
    if attention_dp_broken(row):
        return REASON_BROKEN_ATTENTION_DP
    if (row.pp or 1) > 1:
        return REASON_PP
    unpriced = _unpriced_columns(row)
    if unpriced is not None and not runs_weight_only(row, system_gpus().get(row.system)):
        return unpriced
    if row.concurrency is None:
        return REASON_NO_CONCURRENCY
    if not row.isl or not row.osl:
        return REASON_NO_LENGTHS
    gpu = system_gpus().get(row.system)
    if gpu is None:
        return f"no twin profile for system {row.system or 'empty'}"
    engine = ENGINE_OF_BACKEND.get(row.backend)
    if engine is None:
        return f"no engine mode for backend {row.backend or 'empty'}"
    profile = _profile(gpu, engine)
    if profile is None:
        return f"no {engine} profile for {gpu}"
    tp = row.tp or 1
    # Attention data parallelism (twin.engine.dp_attention): the replica's GPUs are
    # tp_size x attention_dp_size, attention over tp_size of them a rank, and the
    # FFN/MoE layers (and their gather/scatter) over all of them.
    dp = row.attention_dp or 1
    gpus = tp * dp
    if gpus > 1 and allreduce_kernel(gpus) not in profile.kernels:
        at = f"tp_size {tp}" + (f" x attention_dp_size {dp}" if dp > 1 else "")
        return f"{at}: no measured all-reduce at {gpus} GPUs in the {gpu} profile"
    folder = configs if configs is not None else default_configs()
    found = find_config(folder, row.model_path)
    if found is None:
        return "no cached model config (<org>--<name>_config.json)"
    hf_id, path = found
    try:
        config = read_config(str(path))
    except (OSError, ValueError):
        return "model config not readable"
    model_type = str(config.get("model_type", ""))
    own = hf_id == row.model_path
    served_fp8 = served_fp8_checkpoint(row, folder) if own else None
    hf = hf_quant_config(folder, row.model_path)
    precision = row_precision(row, config, own, hf, gpu, served_fp8)
    if isinstance(precision, str):
        return precision
    if own and engine == "trtllm":  # the script's MoE backend on a block-scaled checkpoint
        backend_of_moe = inferencemax_trtllm_moe_backend(row)
        precision = trtllm_block_experts(precision, config, backend_of_moe, gpu)
    try:
        base = load_model(str(path), hf_id)
    except TwinError as err:
        if "unsupported model_type" in str(err):
            return f"model_type {model_type} not supported by twin.hf_config"
        return f"model config not importable (model_type {model_type})"
    if base.n_heads and base.n_heads % tp:
        # vLLM, SGLang and TensorRT-LLM shard attention heads evenly across TP ranks.
        return f"tp_size {tp} does not divide the {base.n_heads} attention heads"
    ep = row.moe_ep or 1
    if ep > 1 or dp > 1:  # expert (and attention-data) parallelism (twin.parallel.Layout)
        if ep > 1 and (not base.n_moe_layers or (row.moe_tp or 1) * ep != gpus):
            return REASON_EP

        try:
            check_layout(base, Layout(gpus, ep, dp))
        except TwinError as err:
            return str(err)
    limits = deployment(row, engine, deploy)
    if engine == "vllm" and vllm_async_scheduling(row, deploy):
        limits = {**limits, "sets": {**limits.get("sets", {}), "async_scheduling": "true"}}
    backend = vllm_moe_backend(row, deploy) if engine == "vllm" else None
    if backend is not None:
        limits = {**limits, "sets": {**limits.get("sets", {}), "moe_backend": backend}}
    f32 = inferencemax_vllm_float32_precision(row, deploy) if engine == "vllm" else None
    if f32 is not None:
        limits = {**limits, "sets": {**limits.get("sets", {}), "float32_matmul_precision": f32}}
    overlap = trtllm_overlap_scheduler(row) if engine == "trtllm" and not pool else {}
    if overlap:  # the engine's own default, whatever the deployment
        limits = {**limits, "sets": {**limits.get("sets", {}), **overlap}}
    # InferenceMAX's scripts name their KV cache (the pairing) but for the ones read here
    # that name none (``inferencemax_sglang_default_kv``, ``inferencemax_vllm_default_kv``);
    # the other collections' vLLM rows keep the pairing
    if inferencemax_row(row):
        auto_kv = inferencemax_sglang_default_kv(row) or inferencemax_vllm_default_kv(row)
    else:
        auto_kv = engine != "vllm"
    if auto_kv:
        precision = engine_default_kv(precision, engine, limits, config, base, gpu)
    unpriceable = _unpriceable(profile, precision, base)
    if unpriceable is not None:
        return unpriceable
    model = precision_model(base, precision)
    workers = agg_workers(row)
    c = row.concurrency // workers
    harness = harness_of(row)
    spec = inferencemax_speculation(row, model) if deploy == "benchmark" else None
    if spec is not None:
        limits = {**limits, "speculative": spec}
    # the engine's own time, whatever the deployment (a config with a vision_config is
    # multimodal to SGLang: eager_prefill.sglang_prefills_eagerly)
    # the attention projections a checkpoint leaves in bf16 are one launch each to vLLM
    served = inferencemax_served_checkpoint(row) or (hf_id if own else None)
    bf16_attention = served is not None and checkpoint_attention_unquantised(folder, served)
    eager = eager_prefill_s(
        row,
        model,
        gpu,
        multimodal="vision_config" in config,
        bf16_attention=bf16_attention,
        kind=deploy,
    )
    # a server no warm-up reached: its one stall (the harness's, whatever the deployment)
    cold = inferencemax_cold_prefix_stall_s(row)
    if cold:
        limits = {**limits, "cold_prefix_stall_s": cold}
    if eager:
        limits = {**limits, "eager_prefill_s": eager}
        if engine == "vllm":  # only steps above vLLM's largest captured graph
            limits["eager_graph_tokens"] = vllm_graph_tokens(row, limits, deploy)
            if vllm_eager_overlaps(row, deploy):  # its host time under the kernels
                limits["eager_overlap"] = True
            mixed = vllm_eager_decode_s(row, model, gpu, deploy)
            if mixed:  # an MLA model's mixed eager step also runs its decode path
                limits["eager_decode_s"] = mixed
    return RowPlan(
        row=row,
        model_fields=model.to_dict(derived=False),
        model_id=hf_id,
        gpu=gpu,
        engine=engine,
        tp=gpus,
        concurrency=c,
        precision=precision.text,
        priced=precision.label,
        # Both harnesses run their warm-up as a phase of its own that drains before the
        # measured phase (aiperf ``timing/credit_issuing_strategy.py`` ``_execute_phases``;
        # ``benchmark_serving.py`` gathers its ``--num-warmups`` tasks before the
        # benchmark's), so the measured phase starts from an idle server with all ``c``
        # clients at once. The twin runs that phase alone: random prompts leave nothing
        # in the cache a measured request could hit, so the warm-up changes nothing else.
        warmup=0,
        requests=(inferencemax_sglang_rounds(row) or harness.measured_rounds) * c,
        deployment=typed_settings(RunArgs, limits.items()),
        ep=ep,
        workers=workers,
        range_ratio=harness.range_ratio,
        dispatch_spread_s=harness.dispatch_spread_s,
        prompt_scale=inferencemax_prompt_scale(row),
        dp=dp,
        native_quant=precision.native,
    )


def agg_workers(row: SiliconRow) -> int:
    """How many aggregated workers served the row's clients.

    aiconfigurator's benchmark rule sizes the client count of an aggregated deployment
    as ``agg_workers x max_batch_size`` (package ``aiconfigurator`` 0.12.0,
    ``generator/rule_plugin/benchmark/trtllm.rule``, ``BenchConfig.estimated_concurrency``),
    where ``batch_size`` is per attention-DP rank (the CSV's attention-DP rows have
    ``silicon_concurrency = attention_dp_size x batch_size``). Where the concurrency is a
    multiple ``k > 1`` of ``attention_dp_size x batch_size`` (e.g. 416 clients over batch
    13 on a Dynamo deployment: 29 rows of the CSV), the clients were spread over ``k``
    workers; the twin runs one of them with ``concurrency / k`` clients, the share the
    Dynamo frontend's round-robin gives each worker on average. Otherwise one worker.
    """
    c, batch = row.concurrency or 0, (row.batch_size or 0) * (row.attention_dp or 1)
    if batch and c > batch and c % batch == 0:
        return c // batch
    return 1


def split_plans(planned: Iterable[RowPlan | str]) -> tuple[list[RowPlan], Counter[str]]:
    """The plans among a planner's answers, and how many rows each reason left out."""
    answers = list(planned)
    reasons = Counter(a for a in answers if isinstance(a, str))
    return [a for a in answers if not isinstance(a, str)], reasons


def plan_rows(
    rows: Iterable[SiliconRow], configs: Path | None = None, deploy: str = "benchmark"
) -> tuple[list[RowPlan], Counter[str]]:
    """The expressible rows' plans, and how many rows each reason left out."""
    return split_plans(plan_row(row, configs, deploy) for row in rows)
