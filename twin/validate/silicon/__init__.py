"""Scoring the twin against measured serving runs (issue 31): "predict real silicon".

NVIDIA's ``aiconfigurator-core`` ships ``systems/silicon_sample.csv``: end-to-end
benchmarks of vLLM, SGLang and TensorRT-LLM serving instances on real GPUs, one row
per (model, system, engine, parallelism, ISL, OSL, concurrency) with the measured
TTFT and TPOT. An aggregated row is a closed-loop benchmark: ``c`` clients (the
``silicon_concurrency=N`` entry of ``silicon_data_source``) each sending a
random-token request of ``isl`` input and exactly ``osl`` output tokens as soon as
its previous one completes, to one instance of ``tp_size`` GPUs.

This package turns each row into the twin's run or a counted reason it cannot
(:func:`plan_row`), runs it through the one builder of a simulation
(:func:`twin.engine.run.build_run`, closed-loop clients ``concurrency=c``, the
engines' shared KV pool ``cache_gb="auto"``, the server limits of the row's deployment:
:func:`deployment`) at the row's precision (weights from its
``gemm_quant_mode``/``precision``/``moe_quant_mode`` or its checkpoint, the KV cache from
the checkpoint or aiconfigurator's pairing: :func:`row_precision`, ``twin.precision``), and
scores the mean TTFT and TPOT against the measurement (:func:`summarize`: MAPE and
MdAPE, per group, per backend and precision and overall, on the issue's fixed split).
The CSV is read from the installed package at run time (never copied here);
``benchmarks/bench_silicon.py`` runs it in parallel. Decisions (request count, mean vs
median, how clients start, the deployment) are in ``docs/decisions.md``, "Scoring against
silicon (issue 31)", "Precision (issue 31)" and "TTFT against silicon (issue 31)".
"""

from __future__ import annotations

from twin.validate.silicon.aiconfigurator import (
    AIC_NOT_INSTALLED,
    aiconfigurator_available,
    cli_estimate_args,
    layout_args,
    run_cli_estimate,
)
from twin.validate.silicon.aiconfigurator_limits import (
    aiconfigurator_deployment,
)
from twin.validate.silicon.configs import (
    config_candidates,
    config_file,
    find_config,
    system_gpus,
)
from twin.validate.silicon.deployment import (
    DEPLOYMENTS,
    ENGINE_OF_BACKEND,
    deployment,
    trtllm_overlap_scheduler,
)
from twin.validate.silicon.eager_prefill import (
    SGLANG_EAGER_LAUNCH_S,
    SGLANG_EAGER_LAUNCHES,
    TRTLLM_EAGER_LAUNCH_S,
    VLLM_ALL_REDUCES,
    VLLM_EAGER_LAUNCH_S,
    VLLM_EAGER_LAUNCHES,
    VLLM_EXPERT_LAUNCHES,
    VLLM_OVERLAP_LAUNCH_S,
    VLLM_QK_NORM_ALL_REDUCE,
    eager_launches,
    eager_prefill_s,
    launch_s,
    vllm_eager_launches,
    vllm_eager_overlaps,
    vllm_graph_tokens,
    vllm_part_launches,
    vllm_prefills_eagerly,
)
from twin.validate.silicon.harness import (
    AIPERF,
    INFERENCEMAX,
    MEASURED_ROUNDS,
    REASON_BROKEN_ATTENTION_DP,
    REASON_GAP_ANALYSIS_TPOT,
    WARMUP_ROUNDS,
    Harness,
    attention_dp_broken,
    gap_analysis_tpot_unpaced,
    harness_of,
    measured_on,
)
from twin.validate.silicon.inferencemax import (
    INFERENCEMAX_MTP_ACCEPTANCE,
    REASON_INFERENCEMAX_DISAGG,
    inferencemax_layout,
    inferencemax_mtp_acceptance,
)
from twin.validate.silicon.inferencemax_sglang import (
    inferencemax_no_piecewise,
    inferencemax_prompt_scale,
    inferencemax_sglang_default_kv,
    inferencemax_sglang_unnamed,
)
from twin.validate.silicon.inferencemax_trtllm import (
    inferencemax_adp_balance,
    inferencemax_deepseek_batch_wait,
    inferencemax_kv_fraction,
    inferencemax_mtp_batch,
    inferencemax_mtp_drafts,
    inferencemax_speculation,
    inferencemax_trtllm_fp4_moe_backend,
    inferencemax_trtllm_moe_backend,
    inferencemax_trtllm_piecewise,
    inferencemax_trtllm_script_layout,
)
from twin.validate.silicon.inferencemax_vllm import (
    INFERENCEMAX_VLLM,
    REASON_INFERENCEMAX_CLIENT_CAP,
    inferencemax_client_capped,
    inferencemax_minimax_flags,
    inferencemax_prompt_budget_flags,
    inferencemax_served_checkpoint,
    inferencemax_vllm,
    inferencemax_vllm_float32_precision,
    vllm_async_scheduling,
    vllm_moe_backend,
)
from twin.validate.silicon.plan import (
    RowPlan,
    agg_workers,
    plan_row,
    plan_rows,
    split_plans,
)
from twin.validate.silicon.precision import (
    RowPrecision,
    attention_unquantised,
    checkpoint_attention_unquantised,
    engine_default_kv,
    row_precision,
    weight_only_checkpoint,
)
from twin.validate.silicon.predict import (
    plan_run,
    predict,
    write_workload,
)
from twin.validate.silicon.rows import (
    FIT,
    HELD_OUT,
    REASON_ATTN_DP,
    REASON_DISAGG,
    REASON_EP,
    REASON_NO_CONCURRENCY,
    REASON_NO_MEASUREMENT,
    REASON_PP,
    SPLITS,
    SiliconRow,
    default_configs,
    default_csv,
    mark_configurations,
    mark_copies,
    read_rows,
    select,
    split_of,
)
from twin.validate.silicon.score import (
    ape,
    mape,
    mdape,
    score_row,
    side_by_side,
    summarize,
    write_outputs,
)

__all__ = [
    "AIC_NOT_INSTALLED",
    "AIPERF",
    "DEPLOYMENTS",
    "ENGINE_OF_BACKEND",
    "FIT",
    "HELD_OUT",
    "INFERENCEMAX",
    "INFERENCEMAX_MTP_ACCEPTANCE",
    "INFERENCEMAX_VLLM",
    "MEASURED_ROUNDS",
    "REASON_ATTN_DP",
    "REASON_BROKEN_ATTENTION_DP",
    "REASON_DISAGG",
    "REASON_EP",
    "REASON_GAP_ANALYSIS_TPOT",
    "REASON_INFERENCEMAX_CLIENT_CAP",
    "REASON_INFERENCEMAX_DISAGG",
    "REASON_NO_CONCURRENCY",
    "REASON_NO_MEASUREMENT",
    "REASON_PP",
    "SGLANG_EAGER_LAUNCHES",
    "SGLANG_EAGER_LAUNCH_S",
    "SPLITS",
    "TRTLLM_EAGER_LAUNCH_S",
    "VLLM_ALL_REDUCES",
    "VLLM_EAGER_LAUNCHES",
    "VLLM_EAGER_LAUNCH_S",
    "VLLM_EXPERT_LAUNCHES",
    "VLLM_OVERLAP_LAUNCH_S",
    "VLLM_QK_NORM_ALL_REDUCE",
    "WARMUP_ROUNDS",
    "Harness",
    "RowPlan",
    "RowPrecision",
    "SiliconRow",
    "agg_workers",
    "aiconfigurator_available",
    "aiconfigurator_deployment",
    "ape",
    "attention_dp_broken",
    "attention_unquantised",
    "checkpoint_attention_unquantised",
    "cli_estimate_args",
    "config_candidates",
    "config_file",
    "default_configs",
    "default_csv",
    "deployment",
    "eager_launches",
    "eager_prefill_s",
    "engine_default_kv",
    "find_config",
    "gap_analysis_tpot_unpaced",
    "harness_of",
    "inferencemax_adp_balance",
    "inferencemax_client_capped",
    "inferencemax_deepseek_batch_wait",
    "inferencemax_kv_fraction",
    "inferencemax_layout",
    "inferencemax_minimax_flags",
    "inferencemax_mtp_acceptance",
    "inferencemax_mtp_batch",
    "inferencemax_mtp_drafts",
    "inferencemax_no_piecewise",
    "inferencemax_prompt_budget_flags",
    "inferencemax_prompt_scale",
    "inferencemax_served_checkpoint",
    "inferencemax_sglang_default_kv",
    "inferencemax_sglang_unnamed",
    "inferencemax_speculation",
    "inferencemax_trtllm_fp4_moe_backend",
    "inferencemax_trtllm_moe_backend",
    "inferencemax_trtllm_piecewise",
    "inferencemax_trtllm_script_layout",
    "inferencemax_vllm",
    "inferencemax_vllm_float32_precision",
    "launch_s",
    "layout_args",
    "mape",
    "mark_configurations",
    "mark_copies",
    "mdape",
    "measured_on",
    "plan_row",
    "plan_rows",
    "plan_run",
    "predict",
    "read_rows",
    "row_precision",
    "run_cli_estimate",
    "score_row",
    "select",
    "side_by_side",
    "split_of",
    "split_plans",
    "summarize",
    "system_gpus",
    "trtllm_overlap_scheduler",
    "vllm_async_scheduling",
    "vllm_eager_launches",
    "vllm_eager_overlaps",
    "vllm_graph_tokens",
    "vllm_moe_backend",
    "vllm_part_launches",
    "vllm_prefills_eagerly",
    "weight_only_checkpoint",
    "write_outputs",
    "write_workload",
]
