"""The server each row ran: its engine mode, and its limits under a deployment kind
(``DEPLOYMENTS``), from its collection's rules (``aiconfigurator_limits``, the
``inferencemax_*`` scripts); TensorRT-LLM's overlap scheduler, on whatever the
deployment."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twin.errors import expect_one_of
from twin.validate.silicon.aiconfigurator_limits import (
    aiconfigurator_deployment,
    deployed,
)
from twin.validate.silicon.harness import inferencemax_row, model_named
from twin.validate.silicon.inferencemax import inferencemax_deepseek
from twin.validate.silicon.inferencemax_sglang import (
    inferencemax_sglang,
    inferencemax_sglang_build,
)
from twin.validate.silicon.inferencemax_trtllm import (
    INFERENCEMAX_TRTLLM_BLOCK,
    INFERENCEMAX_TRTLLM_FLOOR,
    INFERENCEMAX_TRTLLM_TOKENS,
    inferencemax_adp_balance,
    inferencemax_batch_wait,
    inferencemax_deepseek_batch_wait,
    inferencemax_kv_fraction,
    inferencemax_mtp_batch,
    inferencemax_mtp_drafts,
    inferencemax_trtllm_fp4_moe_backend,
    inferencemax_trtllm_token_floor,
)
from twin.validate.silicon.inferencemax_vllm import inferencemax_vllm, inferencemax_vllm_build

if TYPE_CHECKING:
    from twin.validate.silicon.rows import SiliconRow


# The CSV's backend -> the twin's engine mode (twin.engine.modes). ``trtllm`` is the
# twin's TensorRT-LLM mode: TensorRT-LLM's kernels in the paper's world (the twin's
# default scheduler and preemption, not TensorRT-LLM's own).
ENGINE_OF_BACKEND = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}

# How each row's server was configured (docs/decisions.md, "TTFT against silicon (issue
# 31)"). "benchmark" (the default): each collection's own deployment: for the
# aiconfigurator collection the limits aiconfigurator's generator writes into a benchmark
# deployment (package ``aiconfigurator`` 0.12.0,
# ``generator/rule_plugin/benchmark/<backend>.rule``) for the rows whose fit rows say
# they ran with them (``aiconfigurator_limits.deployed``), for the InferenceMAX
# collection its server scripts' limits (:func:`inferencemax_deployment`);
# "aiconfigurator": the generator's limits on the rows ``deployed`` names;
# "aiconfigurator-all": for every engine the rule sizes (an exploration: TensorRT-LLM's
# fit rows score worse with it); "defaults": the engines' own defaults everywhere.
DEPLOYMENTS = ("benchmark", "aiconfigurator", "aiconfigurator-all", "defaults")


def inferencemax_deployment(row: SiliconRow, engine: str) -> dict[str, Any]:
    """``build_run`` keywords for the InferenceMAX scripts' server limits of ``row``."""
    if engine == "vllm":
        return {"sets": inferencemax_vllm(row)}
    if engine == "sglang":
        sglang = inferencemax_sglang(row)
        return {"sets": sglang} if sglang else {}
    if engine != "trtllm":
        return {}
    named = model_named(row, INFERENCEMAX_TRTLLM_TOKENS)
    if named is not None:
        sets = {**inferencemax_batch_wait(row), **inferencemax_adp_balance(row)}
        tokens = INFERENCEMAX_TRTLLM_TOKENS[named]
        fraction = inferencemax_kv_fraction(row)  # gpt-oss's 0.85; Llama's none
        memory = {} if fraction is None else {"memory_utilization": fraction}
        return {"max_batched_tokens": tokens, **memory, **({"sets": sets} if sets else {})}
    if not inferencemax_deepseek(row) or not row.isl:
        return {}
    block, conc = INFERENCEMAX_TRTLLM_BLOCK, row.concurrency or 0
    backend = inferencemax_trtllm_fp4_moe_backend(row)  # the fp4 experts' moe_config
    balance = {**inferencemax_adp_balance(row), **({"moe_backend": backend} if backend else {})}
    fraction = inferencemax_kv_fraction(row)
    memory = {} if fraction is None else {"memory_utilization": fraction}
    drafts = inferencemax_mtp_drafts(row)
    if drafts is not None:
        batch = inferencemax_mtp_batch(row)
        tokens = (drafts + 1) * batch + row.isl + 64
        limits = {"max_batched_tokens": -(-tokens // block) * block, "max_running": batch}
        return {**limits, **memory, **({"sets": balance} if balance else {})}
    tokens = -(-(conc + row.isl + 64) // block) * block
    if inferencemax_trtllm_token_floor(row):
        tokens = max(tokens, INFERENCEMAX_TRTLLM_FLOOR)
    sets = {**inferencemax_deepseek_batch_wait(row), **balance}
    return {"max_batched_tokens": tokens, **memory, **({"sets": sets} if sets else {})}


# TensorRT-LLM's overlap scheduler (``twin.engine.trtllm_batching``): on in every release
# read unless ``disable_overlap_scheduler`` is given (``TorchLlmArgs``, default false, 1.0);
# aiconfigurator's generated aggregated deployments keep it on (``generator/rule_plugin/
# benchmark/trtllm.rule``: ``agg disable_overlap_scheduler = false``, its context-only
# workers off), and InferenceMAX's TensorRT-LLM scripts were not read to set it, so they
# keep the default. The twin models its admission lag on an aggregated replica without
# attention DP or pipeline stages (not on a rank, a pipeline or a disaggregated pool; the
# plan leaves the pools out; a pipeline refuses it: ``EngineConfig._check_pipeline``).
TRTLLM_OVERLAP_SETS = {"overlap_scheduler": "true"}


def trtllm_overlap_scheduler(row: SiliconRow) -> dict[str, str]:
    """The ``--set`` flags of TensorRT-LLM's overlap scheduler for ``row`` (above); empty
    where it is not modelled (another engine, attention DP, pipeline stages)."""
    if row.backend != "trtllm" or (row.attention_dp or 1) > 1 or (row.pp or 1) > 1:
        return {}
    return dict(TRTLLM_OVERLAP_SETS)


def engine_build(row: SiliconRow) -> str:
    """The engine build ``row`` ran (``build_run``'s ``engine_build``, whose kernel layout
    the engine mode's rule reads: ``twin.engine.kernel_layouts``): its ``backend_version``,
    or the image an InferenceMAX SGLang row that names only ``nightly-dev`` ran
    (:func:`inferencemax_sglang_build`) or an InferenceMAX vLLM row that names none
    (``inferencemax_vllm.inferencemax_vllm_build``)."""
    return inferencemax_sglang_build(row) or inferencemax_vllm_build(row) or row.backend_version


def deployment(row: SiliconRow, engine: str, kind: str = "benchmark") -> dict[str, Any]:
    """The server limits ``row`` runs with under the deployment ``kind`` (``DEPLOYMENTS``)."""
    expect_one_of(kind, DEPLOYMENTS, "deployment")
    if kind == "benchmark" and inferencemax_row(row):
        return inferencemax_deployment(row, engine)
    if kind == "defaults" or (kind != "aiconfigurator-all" and not deployed(row, engine)):
        return {}
    return aiconfigurator_deployment(row, engine)
