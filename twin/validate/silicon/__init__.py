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
    aiconfigurator_estimate,
    cli_estimate_args,
    layout_args,
    run_cli_estimate,
)
from twin.validate.silicon.configs import (
    QUANTISED_NAME_SUFFIX,
    config_candidates,
    config_file,
    find_config,
    load_model,
    read_config,
    system_gpus,
)
from twin.validate.silicon.harness import (
    AIPERF,
    DEPLOYED_ENGINES,
    DEPLOYMENT_EXTRA_TOKENS,
    DEPLOYMENTS,
    ENGINE_OF_BACKEND,
    INFERENCEMAX,
    INFERENCEMAX_DEEPSEEK,
    INFERENCEMAX_DISAGG_SYSTEMS,
    INFERENCEMAX_DUMP,
    INFERENCEMAX_MTP,
    INFERENCEMAX_SGLANG_VERSION,
    INFERENCEMAX_SOURCES,
    INFERENCEMAX_TRTLLM_BLOCK,
    INFERENCEMAX_TRTLLM_FLOOR,
    INFERENCEMAX_TRTLLM_TOKENS,
    INFERENCEMAX_VLLM,
    MEASURED_ROUNDS,
    REASON_INFERENCEMAX_DISAGG,
    SGLANG_EAGER_MOE_LAYER_S,
    SGLANG_PIECEWISE_DEFAULT,
    TOKEN_RANGE,
    TRTLLM_TEMPLATE_FREE_FRACTION,
    TRTLLM_TOKENS_PER_BLOCK,
    WARMUP_ROUNDS,
    Harness,
    aiconfigurator_deployment,
    deployment,
    eager_prefill_s,
    harness_of,
    inferencemax_deepseek,
    inferencemax_deployment,
    inferencemax_layout,
    inferencemax_mtp_drafts,
    inferencemax_sglang,
    inferencemax_speculation,
)
from twin.validate.silicon.plan import (
    RowPlan,
    agg_workers,
    plan_row,
    plan_rows,
    precision_model,
)
from twin.validate.silicon.precision import (
    ENGINE_DEFAULT_KV,
    RowPrecision,
    engine_default_kv,
    hf_quant_config,
    row_precision,
    runs_weight_only,
    weight_only_checkpoint,
)
from twin.validate.silicon.predict import (
    kernel_tables,
    predict,
    write_workload,
)
from twin.validate.silicon.rows import (
    COLUMNS,
    CONFIGS_IN_PACKAGE,
    CSV_IN_PACKAGE,
    FIT,
    HELD_OUT,
    REASON_ATTN_DP,
    REASON_DISAGG,
    REASON_EP,
    REASON_NO_CONCURRENCY,
    REASON_NO_LENGTHS,
    REASON_NO_MEASUREMENT,
    REASON_PP,
    SPLITS,
    SiliconRow,
    default_configs,
    default_csv,
    mark_copies,
    package_dir,
    read_rows,
    select,
    split_of,
)
from twin.validate.silicon.score import (
    RESULT_COLUMNS,
    ape,
    mape,
    mdape,
    metrics,
    precision_key,
    score_row,
    side_by_side,
    summarize,
    write_outputs,
)

__all__ = [
    "AIC_NOT_INSTALLED",
    "AIPERF",
    "COLUMNS",
    "CONFIGS_IN_PACKAGE",
    "CSV_IN_PACKAGE",
    "DEPLOYED_ENGINES",
    "DEPLOYMENTS",
    "DEPLOYMENT_EXTRA_TOKENS",
    "ENGINE_DEFAULT_KV",
    "ENGINE_OF_BACKEND",
    "FIT",
    "HELD_OUT",
    "INFERENCEMAX",
    "INFERENCEMAX_DEEPSEEK",
    "INFERENCEMAX_DISAGG_SYSTEMS",
    "INFERENCEMAX_DUMP",
    "INFERENCEMAX_MTP",
    "INFERENCEMAX_SGLANG_VERSION",
    "INFERENCEMAX_SOURCES",
    "INFERENCEMAX_TRTLLM_BLOCK",
    "INFERENCEMAX_TRTLLM_FLOOR",
    "INFERENCEMAX_TRTLLM_TOKENS",
    "INFERENCEMAX_VLLM",
    "MEASURED_ROUNDS",
    "QUANTISED_NAME_SUFFIX",
    "REASON_ATTN_DP",
    "REASON_DISAGG",
    "REASON_EP",
    "REASON_INFERENCEMAX_DISAGG",
    "REASON_NO_CONCURRENCY",
    "REASON_NO_LENGTHS",
    "REASON_NO_MEASUREMENT",
    "REASON_PP",
    "RESULT_COLUMNS",
    "SGLANG_EAGER_MOE_LAYER_S",
    "SGLANG_PIECEWISE_DEFAULT",
    "SPLITS",
    "TOKEN_RANGE",
    "TRTLLM_TEMPLATE_FREE_FRACTION",
    "TRTLLM_TOKENS_PER_BLOCK",
    "WARMUP_ROUNDS",
    "Harness",
    "RowPlan",
    "RowPrecision",
    "SiliconRow",
    "agg_workers",
    "aiconfigurator_available",
    "aiconfigurator_deployment",
    "aiconfigurator_estimate",
    "ape",
    "cli_estimate_args",
    "config_candidates",
    "config_file",
    "default_configs",
    "default_csv",
    "deployment",
    "eager_prefill_s",
    "engine_default_kv",
    "find_config",
    "harness_of",
    "hf_quant_config",
    "inferencemax_deepseek",
    "inferencemax_deployment",
    "inferencemax_layout",
    "inferencemax_mtp_drafts",
    "inferencemax_sglang",
    "inferencemax_speculation",
    "kernel_tables",
    "layout_args",
    "load_model",
    "mape",
    "mark_copies",
    "mdape",
    "metrics",
    "package_dir",
    "plan_row",
    "plan_rows",
    "precision_key",
    "precision_model",
    "predict",
    "read_config",
    "read_rows",
    "row_precision",
    "run_cli_estimate",
    "runs_weight_only",
    "score_row",
    "select",
    "side_by_side",
    "split_of",
    "summarize",
    "system_gpus",
    "weight_only_checkpoint",
    "write_outputs",
    "write_workload",
]
