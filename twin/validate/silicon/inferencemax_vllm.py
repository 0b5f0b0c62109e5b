"""InferenceMAX's vLLM server scripts: their limits (MiniMax-M2.5's by day), the H100
gpt-oss client that ran at 512 clients, asynchronous scheduling and gpt-oss's Marlin
experts on Hopper."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from twin.validate.silicon.harness import (
    INFERENCEMAX_GPTOSS,
    config_id,
    inferencemax_row,
    measured_on,
    model_named,
)

if TYPE_CHECKING:
    from twin.validate.silicon.rows import SiliconRow


# InferenceMAX's vLLM server limits (its ``benchmarks/*.sh`` scripts):
# ``max-num-batched-tokens: 8192`` and ``--max-num-seqs 512`` (``70b_fp4_b200_docker``);
# MiniMax-M2.5's its own (below).
INFERENCEMAX_VLLM = {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}
# ``max-cudagraph-capture-size: 2048`` of InferenceMAX's gpt-oss scripts
# (``twin.validate.silicon.eager_prefill``, "vLLM replays piecewise CUDA graphs").
INFERENCEMAX_VLLM_CAPTURE = {"gpt-oss-120b": 2048}


# InferenceMAX's H100 gpt-oss-120b vLLM script ran its client at ``--max-concurrency 512``
# whatever the configuration's ``CONC``, while the server got ``--max-num-seqs=$CONC`` and
# the client ``--num-prompts $((CONC * 10))`` (SemiAnalysisAI/InferenceX
# ``benchmarks/gptoss_fp4_h100_docker.sh`` from 56c612a91, 2025-11-14, to its fix "fix h100
# docker error" 903a52727, 2025-12-08, which made it ``"$CONC"``). The results, and so the
# CSV, record the client's 512; the ``CONC`` the server ran is not recorded. Checked: the
# twin with 512 clients, ``max_num_seqs`` 8 and 80 requests predicts the TP 4 1k/1k row's
# 19.4 s / 4.63 ms (measured 20.0 s / 4.70 ms), with 64 and 640 requests the TP 4 1k/8k
# row's 304 s / 9.79 ms (measured 303 s / 9.67 ms); each row's ``CONC`` could be read
# only off its own measurement, so these rows are not expressed.
INFERENCEMAX_CLIENT_CAP_DAYS = ("2025-11-14", "2025-12-08")
REASON_INFERENCEMAX_CLIENT_CAP = (
    "InferenceMAX H100 gpt-oss client ran at 512 clients whatever CONC (server's CONC not recorded)"
)


def inferencemax_client_capped(row: SiliconRow) -> bool:
    """Whether ``row`` was measured by InferenceMAX's H100 gpt-oss script while its client
    ran at 512 clients whatever the server's ``CONC`` (above)."""
    if not inferencemax_row(row, "vllm") or row.system != "h100_sxm":
        return False
    if model_named(row, ("gpt-oss",)) is None:
        return False
    day = measured_on(row)
    first, last = INFERENCEMAX_CLIENT_CAP_DAYS
    return day is not None and first <= day <= last


# InferenceMAX's MiniMax-M2.5 vLLM servers set no ``--max-num-seqs`` (SemiAnalysisAI/
# InferenceX ``benchmarks/single_node/minimaxm2.5_fp{4,8}_b{200,300}.sh``, every version
# of February-April 2026), so vLLM's own default holds: 1,024 for its OpenAI server on a
# GPU of at least 70 GiB, no more than ``max_num_batched_tokens`` (0.19.0
# ``engine/arg_utils.py`` ``EngineArgs.get_batch_defaults`` and
# ``_set_default_max_num_seqs_and_batched_tokens_args``; the rows' images are 0.19.0 and
# nightly builds of April 2026), not the 512 of the Llama scripts. Measured: the B300 rows
# at 1,024 clients decode about 1,000 requests at once (Little's law on their TTFT and
# TPOT), which a cap of 512 cannot. From a day per script the servers also pass
# ``--max-num-batched-tokens $((ISL * 2))`` and ``--max-cudagraph-capture-size 2048``
# (``--stream-interval 20`` too, which sends a request's first token at once: 0.19.0
# ``v1/engine/output_processor.py`` ``RequestState.make_request_output``): B200 fp8 from
# d172646bd (2026-04-02), B200 fp4 from a9c199207 (2026-04-07), B300 from the scripts'
# first version b4860089b / b0308eda6 (2026-04-17). Before, the budget is the default
# 8,192 and the capture size the default ``min(2 x max_num_seqs, 512)``. vLLM's defaults
# are the vllm mode's (``twin.engine.modes_vllm.VLLM_BATCH_DEFAULTS``, a large GPU: every
# MiniMax row's), written out so the row's deployment records them.
INFERENCEMAX_MINIMAX = ("minimax-m2.5",)
INFERENCEMAX_MINIMAX_FLAGS_FROM = {
    ("b200_sxm", "fp8"): "2026-04-02",
    ("b200_sxm", "fp4"): "2026-04-07",
    ("b300_sxm", "fp8"): "2026-04-17",
    ("b300_sxm", "fp4"): "2026-04-17",
}
INFERENCEMAX_MINIMAX_CAPTURE = 2048
# The MiniMax-M2.5 fp8 scripts that pass no ``--kv-cache-dtype`` (vLLM's ``auto``: the
# checkpoint's bf16, ``precision.ENGINE_DEFAULT_KV``): ``minimaxm2.5_fp8_b200.sh`` before
# the day above (f342df18e, 64c20b6b5, 0f78cf4eb; ``--kv-cache-dtype fp8`` from
# d172646bd, 2026-04-02, the flags' commit), ``minimaxm2.5_fp8_h200.sh`` and
# ``minimaxm2.5_fp8_h100.sh`` in every version up to the rows' last day (H200 a36346339
# to 626932a11, H100 ac0d2a853 to 626932a11). The B300 scripts pass ``fp8`` from their
# first version.
INFERENCEMAX_MINIMAX_AUTO_KV_SYSTEMS = frozenset({"h100_sxm", "h200_sxm"})
# InferenceMAX's B200 gpt-oss-120b vLLM script passed no ``kv-cache-dtype`` until "Upgrade
# vLLM to v0.11.2" (SemiAnalysisAI/InferenceX 25506e87c, 2025-12-05, "Use FP8 kv-cache for
# GPT-OSS B200": ``kv-cache-dtype: fp8`` added to ``benchmarks/gptoss_fp4_b200_docker.sh``'s
# ``config.yaml``; the version the 2025-11-02 rows ran, 4b860b78e / e06929c70, has none), so
# the rows measured before it ran vLLM's ``auto``: the checkpoint's bf16
# (``openai/gpt-oss-120b`` names no KV quantisation). The Hopper scripts never name one.
INFERENCEMAX_GPTOSS_B200_FP8_KV_FROM = "2025-12-05"


def _gptoss_b200_default_kv(row: SiliconRow) -> bool:
    if row.system != "b200_sxm" or model_named(row, INFERENCEMAX_GPTOSS) is None:
        return False
    day = measured_on(row)
    return day is not None and day < INFERENCEMAX_GPTOSS_B200_FP8_KV_FROM


def inferencemax_vllm_default_kv(row: SiliconRow) -> bool:
    """Whether ``row`` ran an InferenceMAX vLLM script that names no KV cache dtype: a
    MiniMax-M2.5 fp8 one or the B200 gpt-oss-120b one before 2025-12-05 (above)."""
    if not inferencemax_row(row, "vllm"):
        return False
    if _gptoss_b200_default_kv(row):
        return True
    if model_named(row, INFERENCEMAX_MINIMAX) is None or (row.precision or "").lower() != "fp8":
        return False
    if row.system in INFERENCEMAX_MINIMAX_AUTO_KV_SYSTEMS:
        return True
    return (
        row.system == "b200_sxm"
        and measured_on(row) is not None
        and not (inferencemax_minimax_flags(row))
    )


# InferenceMAX's MiniMax-M2.5 fp4 vLLM scripts run a ``dp-attn: true`` configuration as
# vLLM data parallelism, ``--tensor-parallel-size=1 --data-parallel-size=$TP
# --enable-expert-parallel`` (SemiAnalysisAI/InferenceX ``benchmarks/single_node/
# minimaxm2.5_fp4_b200.sh`` from its first version 79bd988e9, ``minimaxm2.5_fp4_b300.sh``
# from 22d0f12f7): ``TP`` engines of one GPU, each with vLLM's default 1,024 sequences
# (above), the experts split over all of them. The fp8 scripts have no such branch
# (``minimaxm2.5_fp8_b300.sh`` at ed6006eb3 passes ``--tensor-parallel-size=$TP`` whatever
# ``DP_ATTENTION``). The CSV writes a vLLM ``{ tp, ep: tp }`` run alike with or without
# dp-attn (``tp_size`` tp, ``attention_dp_size`` tp, ``moe_ep_size`` tp squared:
# ``inferencemax.inferencemax_layout``), so the run's configuration says which: the CI
# database's ``config_id`` of a ``dp-attn: true`` entry of ``.github/configs/
# nvidia-master.yaml`` (from 13962fcfa and 633fd2377, 2026-04-21: fp4 B200 ``{ tp: 2, ep: 2,
# dp-attn: true, conc-start: 256, conc-end: 1024 }`` at 1k/1k, fp4 B300 the same to 2,048
# clients and at 512 clients at 8k/1k). Config 707 holds exactly the first entry's points
# (1k/1k at 256, 512 and 1,024 clients) and 727 the second's (1k/1k at 256-2,048, 8k/1k at
# 512); their EP-only twins 706 and 726 hold the ``{ tp: 2, ep: 2 }`` entries' (1k/1k at
# 128-256, 8k/1k at 128-512). Measured: 727's 2,048 clients decode about 1,940 requests at
# once (Little's law on its 3.73 s TTFT and 66.0 ms TPOT over 1,024 tokens), beyond one
# engine's 1,024. The fp8 B300 dp-attn configuration (827) ran its script's TP 2 server:
# its one row, 1,024 clients, measures its EP twin 735's within 0.4% (TTFT) and 0.7%
# (TPOT).
INFERENCEMAX_VLLM_DP_CONFIGS = frozenset({"707", "727"})


def inferencemax_vllm_data_parallel(row: SiliconRow) -> bool:
    """Whether ``row`` ran an InferenceMAX MiniMax-M2.5 vLLM script's data-parallel server
    (above): one engine a GPU, not one over its TP GPUs."""
    if not inferencemax_row(row, "vllm") or model_named(row, INFERENCEMAX_MINIMAX) is None:
        return False
    return config_id(row) in INFERENCEMAX_VLLM_DP_CONFIGS


# The MiniMax-M2.5 fp8 scripts that turn expert parallelism on at ``EP_SIZE`` 1 (``if [
# "$EP_SIZE" -ge 1 ]; then EP=" --enable-expert-parallel"``; the configurations' search
# spaces name no ``ep``, which the workflow passes as 1: the ids' ``_ep1_``):
# ``minimaxm2.5_fp8_b200.sh`` from its first version (f342df18e, 2026-03-11) to the
# flags' day above (d172646bd made it ``-gt 1``), ``minimaxm2.5_fp8_h200.sh`` from
# 5e2c705d3 (2026-03-13; a36346339 passes no EP flag) in every version up to the rows'
# last day (626932a11). vLLM 0.17.0 / 0.18.0 ``fused_moe/config.py``
# ``FusedMoEParallelConfig.make``: with ``enable_expert_parallel`` and no data
# parallelism the experts split over the TP ranks (``ep_size = tp_size``, MoE TP 1), every
# rank taking every token (``inferencemax.inferencemax_layout``'s vLLM form).
INFERENCEMAX_MINIMAX_EP_DAYS = {
    "b200_sxm": ("2026-03-11", INFERENCEMAX_MINIMAX_FLAGS_FROM[("b200_sxm", "fp8")]),
    "h200_sxm": ("2026-03-13", "9999-12-31"),
}


# InferenceMAX's Kimi-K2.5 fp4 B200 vLLM script never turns expert parallelism on: every
# version of ``benchmarks/single_node/kimik2.5_fp4_b200.sh`` (SemiAnalysisAI/InferenceX,
# from its first, a58dedd5a 2026-03-11, through 64c20b6b5, 79a42e20a, 626932a11 and
# 6c3acebfa) passes ``--tensor-parallel-size=$TP`` and no ``--enable-expert-parallel``,
# whatever the workflow's ``EP_SIZE``; its configuration ``kimik2.5-fp4-b200-vllm`` of
# ``.github/configs/nvidia-master.yaml`` (79a42e20a) names ``{ tp: 4, ep: 4 }``, which the
# CSV writes as experts split over the four ranks. vLLM 0.17.0 ``fused_moe/config.py``
# ``FusedMoEParallelConfig.make``: without ``enable_expert_parallel`` the experts are
# tensor-parallel (MoE TP = TP, EP 1), each rank a quarter of every expert. The B300 rows
# measured 2026-04-03 ran before any B300 Kimi script (``kimik2.5_fp4_b300.sh`` from
# a35e53694, 2026-04-17; no EP flag in any version either): their script was not found,
# so they keep the CSV's layout. Keyed by script, not day: the B200 rows with no day
# (``kimi-k2.5-gap-analysis.csv``) are copies of the dated ones (``tests/
# test_silicon_deployment.py``), so they ran the same script.
INFERENCEMAX_KIMI_TP_EXPERTS = frozenset({("b200_sxm", "fp4")})


def _kimi_tp_experts(row: SiliconRow) -> SiliconRow:
    tp = row.tp or 1
    if tp < 2 or (row.attention_dp or 1, row.moe_tp or 1, row.moe_ep or 1) != (1, 1, tp):
        return row
    if (row.system, (row.precision or "").lower()) not in INFERENCEMAX_KIMI_TP_EXPERTS:
        return row
    # the CSV's columns as written: inferencemax_layout's where it read them already
    columns = row.csv_layout or row.layout_columns
    csv_layout = f"script layout (kimik2.5_fp4_b200.sh: no --enable-expert-parallel): {columns}"
    return dataclasses.replace(row, moe_tp=tp, moe_ep=1, csv_layout=csv_layout)


def inferencemax_vllm_script_layout(row: SiliconRow) -> SiliconRow:
    """``row`` with the experts split over its TP ranks where its InferenceMAX MiniMax-M2.5
    fp8 vLLM script turned expert parallelism on at ``EP_SIZE`` 1, and tensor-parallel
    where its Kimi-K2.5 fp4 B200 script never turned it on (above); unchanged otherwise.
    The CSV's columns stay in ``csv_layout``."""
    if not inferencemax_row(row, "vllm") or row.mode != "agg":
        return row
    if model_named(row, INFERENCEMAX_KIMI) is not None:
        return _kimi_tp_experts(row)
    if model_named(row, INFERENCEMAX_MINIMAX) is None or (row.precision or "").lower() != "fp8":
        return row
    days, day, tp = INFERENCEMAX_MINIMAX_EP_DAYS.get(row.system), measured_on(row), row.tp or 1
    if days is None or day is None or not days[0] <= day < days[1] or tp < 2:
        return row
    if (row.attention_dp or 1, row.moe_ep or 1, row.moe_tp or tp) != (1, 1, tp):
        return row
    csv_layout = (
        f"script layout (--enable-expert-parallel at EP_SIZE 1, measured {day}): tp_size "
        f"{row.tp}, moe_tp_size {row.moe_tp}, moe_ep_size {row.moe_ep}"
    )
    return dataclasses.replace(row, moe_tp=1, moe_ep=tp, csv_layout=csv_layout)


# InferenceMAX's MiniMax-M2.5 vLLM scripts export ``VLLM_FLOAT32_MATMUL_PRECISION=high``
# (TF32 for vLLM's fp32 matmuls: MiniMax-M2's router, ``twin.engine.kernel_layouts_vllm.
# VLLM_FP32_ROUTER_MODELS``) from one commit a script, all merged on 2026-04-21
# (SemiAnalysisAI/InferenceX ``benchmarks/single_node/``): ``minimaxm2.5_fp8_b200.sh``
# 41ed82dc1 ("[NV] update minimaxm2.5-fp8-b200-vllm", #1068, which drops
# ``VLLM_FLASHINFER_ALLREDUCE_BACKEND=mnnvl``), ``minimaxm2.5_fp4_b200.sh`` 13962fcfa
# (#1069), ``minimaxm2.5_fp8_b300.sh`` 0c2467c15 (#1106), ``minimaxm2.5_fp4_b300.sh``
# 633fd2377 (#1107); ``minimaxm2.5_fp8_h200.sh`` only from 8014ee637 (2026-05-26), after
# the rows; ``minimaxm2.5_fp8_h100.sh`` never. A row measured on the commit's day is taken
# to be its pull request's sweep (as Kimi's below); before, vLLM's default "highest".
INFERENCEMAX_MINIMAX_TF32_FROM = {
    ("b200_sxm", "fp8"): "2026-04-21",
    ("b200_sxm", "fp4"): "2026-04-21",
    ("b300_sxm", "fp8"): "2026-04-21",
    ("b300_sxm", "fp4"): "2026-04-21",
    ("h200_sxm", "fp8"): "2026-05-26",
}


def inferencemax_vllm_float32_precision(row: SiliconRow, kind: str = "benchmark") -> str | None:
    """``--set float32_matmul_precision`` for the vLLM server of ``row`` (above): "high"
    where its InferenceMAX MiniMax-M2.5 script exported it; None: vLLM's default."""
    if kind != "benchmark" or not inferencemax_row(row):
        return None
    tf32 = _flags_from(row, INFERENCEMAX_MINIMAX, INFERENCEMAX_MINIMAX_TF32_FROM)
    return "high" if tf32 else None


# InferenceMAX's Kimi-K2.5 NVFP4 B200 vLLM script passes the same two flags from
# 6c3acebfa (2026-04-20, "[NV] Update Kimi K2.5 FP4 B200 vLLM server launch args":
# ``--kv-cache-dtype fp8 --max-cudagraph-capture-size 2048 --max-num-batched-tokens
# "$((ISL * 2 ))" --stream-interval 20``, ``benchmarks/single_node/kimik2.5_fp4_b200.sh``);
# the collection's rows measured that day are that pull request's sweep (workflow run 786,
# image v0.17.0). It keeps its ``--max-num-seqs $CONC``, so the Llama scripts' 512 stands
# (no more than the row's clients either way). The int4 B200 script and the fp4 B300 one
# (f34a83b25, 2026-04-20) pass neither flag in any version the rows ran, so their 1k
# prefill steps stay eager: measured at 1k/1k and 4 clients the fp4 B200 TTFT is 170 ms
# before the flags (2026-03-27) and 82 ms with them (the twin's kernels alone: 72 ms).
# The versions before 6c3acebfa name no ``--kv-cache-dtype``, and vLLM's ``auto`` then ran
# fp8 all the same (so these rows stay out of :func:`inferencemax_vllm_default_kv`):
# 0.17.0 ``engine/arg_utils.py`` ``create_engine_config`` (l. 1496) resolves ``auto``
# with ``utils/torch_utils.py`` ``resolve_kv_cache_dtype_string`` (l. 324), which reads a
# ``modelopt`` quantization_config's ``kv_cache_scheme``
# ``{dynamic: false, num_bits: 8, type: float}`` as ``fp8``
# (``get_kv_cache_quant_algo_string``, l. 262-312) and maps it to ``fp8_e4m3``;
# ``nvidia/Kimi-K2.5-NVFP4``'s ``config.json`` (aiconfigurator's copy,
# ``model_configs/nvidia--Kimi-K2.5-NVFP4_config.json``: ``quant_method: modelopt``,
# ``quant_algo: NVFP4``) says exactly that. The plan's fp8 (the pairing) is what ran.
INFERENCEMAX_KIMI = ("kimi-k2.5",)
INFERENCEMAX_KIMI_FLAGS_FROM = {("b200_sxm", "fp4"): "2026-04-20"}


def _flags_from(row: SiliconRow, names: tuple[str, ...], since: dict[tuple[str, str], str]) -> bool:
    if row.backend != "vllm" or model_named(row, names) is None:
        return False
    first = since.get((row.system, (row.precision or "").lower()))
    day = measured_on(row)
    return first is not None and day is not None and day >= first


def inferencemax_minimax_flags(row: SiliconRow) -> bool:
    """Whether ``row`` is an InferenceMAX MiniMax-M2.5 vLLM run whose script passed the
    prompt-sized budget and the 2,048-token capture size (above)."""
    return _flags_from(row, INFERENCEMAX_MINIMAX, INFERENCEMAX_MINIMAX_FLAGS_FROM)


def inferencemax_prompt_budget_flags(row: SiliconRow) -> bool:
    """Whether ``row``'s InferenceMAX vLLM script passed ``--max-num-batched-tokens
    $((ISL * 2))`` and ``--max-cudagraph-capture-size 2048`` (INFERENCEMAX_MINIMAX_CAPTURE):
    MiniMax-M2.5's (:func:`inferencemax_minimax_flags`) and Kimi-K2.5 fp4 B200's scripts
    from their days (above)."""
    kimi = _flags_from(row, INFERENCEMAX_KIMI, INFERENCEMAX_KIMI_FLAGS_FROM)
    return kimi or inferencemax_minimax_flags(row)


# The checkpoints InferenceMAX's fp4 vLLM configurations serve, where the collection's
# ``model_path`` names the base model (``.github/configs/nvidia-master.yaml`` at 6c3acebfa:
# ``kimik2.5-fp4-b200-vllm`` ``nvidia/Kimi-K2.5-NVFP4``, ``minimaxm2.5-fp4-b200-vllm`` and
# ``-b300-vllm`` ``nvidia/MiniMax-M2.5-NVFP4``). Read for what they leave unquantised
# (``eager_prefill.vllm_part_launches``); the rows' precision columns price the weights.
INFERENCEMAX_VLLM_FP4_CHECKPOINTS = {
    "kimi-k2.5": "nvidia/Kimi-K2.5-NVFP4",
    "minimax-m2.5": "nvidia/MiniMax-M2.5-NVFP4",
}


def inferencemax_served_checkpoint(row: SiliconRow) -> str | None:
    """The checkpoint an InferenceMAX fp4 vLLM row served where its ``model_path`` names
    another (above); None: its own."""
    if not inferencemax_row(row, "vllm"):
        return None
    if (row.precision or "").lower() != "fp4":
        return None
    named = model_named(row, INFERENCEMAX_VLLM_FP4_CHECKPOINTS)
    return INFERENCEMAX_VLLM_FP4_CHECKPOINTS[named] if named else None


def inferencemax_vllm(row: SiliconRow) -> dict[str, str]:
    """The vLLM server limits of InferenceMAX's script for ``row`` (``--set`` values)."""
    if model_named(row, INFERENCEMAX_MINIMAX) is None:
        if inferencemax_prompt_budget_flags(row) and row.isl:  # Kimi-K2.5 fp4 B200 (above)
            budget, seqs = 2 * row.isl, int(INFERENCEMAX_VLLM["max_num_seqs"])
            return {"max_num_batched_tokens": str(budget), "max_num_seqs": str(min(seqs, budget))}
        return dict(INFERENCEMAX_VLLM)
    from twin.engine.modes_vllm import VLLM_BATCH_DEFAULTS  # late: rows are read without it

    budget, seqs = VLLM_BATCH_DEFAULTS[True]
    if inferencemax_minimax_flags(row) and row.isl:
        budget = 2 * row.isl
    seqs = min(seqs, budget)
    return {"max_num_batched_tokens": str(budget), "max_num_seqs": str(seqs)}


# vLLM's asynchronous scheduling (``--async-scheduling``: the host's scheduling and output
# processing overlap the GPU's forward, ``twin.engine.modes_vllm``), per measured run: the
# release's default, on from 0.14.0 (read in the 0.12.0, 0.14.0, 0.15.1 and 0.18.0 wheels:
# ``vllm/config/scheduler.py`` and ``vllm/config/vllm.py``), and on in InferenceMAX's vLLM
# scripts for gpt-oss-120b and Llama-3.1-70B, whose ``config.yaml`` says
# ``async-scheduling: true`` in every version read (SemiAnalysisAI/InferenceX
# ``benchmarks/gptoss_fp4_h100.sh`` at c6b96dd and 1fc5d73, ``gptoss_fp4_h100_docker.sh``
# at 145e88f, ``gptoss_fp4_h200.sh`` at 16cd955, ``70b_fp8_h100_slurm.sh`` at 2a205bb):
# their rows of release 0.11.2 or none ran it too. aiconfigurator's generated vLLM
# deployments pass no such flag (package ``aiconfigurator`` 0.12.0: no ``async`` in it),
# so its rows run their release's default. A release that is no version number (a
# nightly) is not read: off. Only GPUs with a fitted host time (H100) see a difference.
INFERENCEMAX_VLLM_ASYNC_MODELS = ("gpt-oss-120b", "llama-3.1-70b")


def vllm_async_scheduling(row: SiliconRow, kind: str = "benchmark") -> bool:
    """Whether the vLLM server of ``row`` scheduled asynchronously (above)."""
    from twin.costmodel.table_release import release_at_least
    from twin.engine.modes_vllm import VLLM_ASYNC_FROM

    imax = kind == "benchmark" and inferencemax_row(row)
    if imax and model_named(row, INFERENCEMAX_VLLM_ASYNC_MODELS) is not None:
        return True
    return release_at_least(row.backend_version, VLLM_ASYNC_FROM)


# InferenceMAX's Hopper gpt-oss scripts export VLLM_MXFP4_USE_MARLIN=1
# (SemiAnalysisAI/InferenceX ``benchmarks/gptoss_fp4_h200.sh`` at 16cd955,
# ``gptoss_fp4_h100.sh`` at c6b96dd and 1fc5d73), which vLLM honours before its Triton
# default (0.15.1-0.18.0 ``quantization/mxfp4.py`` ``get_mxfp4_backend``; 0.19.0
# ``fused_moe/oracle/mxfp4.py`` ``select_mxfp4_moe_backend``; the 0.11.2 image's release
# not read, taken to honour it as its successors do): those rows' experts ran Marlin, the
# twin's ``--set moe_backend=marlin`` (``twin.engine.modes_vllm``). The rows measured
# before that line came (4e52ed4c6, 2026-01-02: the 2025-11-02 ones, no release named, run
# by ``gptoss-tmpl.yml``'s ``vllm/vllm-openai:v0.10.2`` jobs at e06929c70, scripts
# ``gptoss_fp4_h200_slurm.sh`` / ``gptoss_fp4_h100_{docker,slurm}.sh`` exporting no MoE
# variable) ran Marlin too, for another reason: vLLM 0.10.2 (the wheel read)
# ``quantization/mxfp4.py`` ``get_mxfp4_backend`` (lines 54-102) on SM90, with
# ``VLLM_USE_FLASHINFER_MOE_MXFP4_BF16`` unset, returns ``MARLIN`` unless
# ``has_triton_kernels()`` (``utils/__init__.py``: ``triton_kernels`` importable) and torch
# >= 2.8.0 both hold, TRITON otherwise; the wheel neither bundles ``triton_kernels``
# (``vllm/third_party`` holds pynvml only) nor requires it (METADATA; torch==2.8.0), the
# image installs none (vLLM ``docker/Dockerfile``: the wheel, FlashInfer, DeepGEMM, EP
# kernels; vllm-project/vllm#27370 of 2025-10-22 made it a dependency because "users have
# to install triton_kernels manually"), and ``PYTHONNOUSERSITE=1`` in the scripts. 0.10.2
# reads no ``VLLM_MXFP4_USE_MARLIN`` at all (``envs.py`` defines it, no module uses it).
# Experts: ``fused_moe/fused_marlin_moe.py`` ``fused_marlin_moe`` -> ``ops.
# moe_wna16_marlin_gemm`` (``float4_e2m1f``), the kernel the twin's Marlin price times.
# Docs/decisions.md, "Issue 31, step: which MXFP4 experts InferenceMAX's 2025-11-02 Hopper
# gpt-oss vLLM rows ran (helper gptoss42, session 42)". The B200 script does
# not set it; it exports VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1 instead in every version
# read (``benchmarks/gptoss_fp4_b200.sh`` at b0c4ed21b, 028415da4, b30c3398a;
# ``benchmarks/single_node/gptoss_fp4_b200.sh`` 8d81e0bf4 .. 0552ead53;
# ``single_node/fixed_seq_len/gptoss_fp4_b200.sh`` at 1b234994f), which vLLM 0.15.1 and
# 0.19.0 honour on capability family 100 (FlashInfer's TRT-LLM-gen MXFP4 kernel fed mxfp8
# activations): the twin's ``--set moe_backend=flashinfer_trtllm_afp8``. No B300 vLLM
# gpt-oss script exists in the repository.
INFERENCEMAX_VLLM_MOE_BACKENDS = {
    "gpt-oss-120b": {
        "h100_sxm": "marlin",
        "h200_sxm": "marlin",
        "b200_sxm": "flashinfer_trtllm_afp8",
    }
}


def vllm_moe_backend(row: SiliconRow, kind: str = "benchmark") -> str | None:
    """``--set moe_backend`` for the vLLM server of ``row`` (above); None: vLLM's default."""
    if kind != "benchmark" or not inferencemax_row(row):
        return None
    named = model_named(row, INFERENCEMAX_VLLM_MOE_BACKENDS)
    return INFERENCEMAX_VLLM_MOE_BACKENDS[named].get(row.system) if named else None


# The image InferenceMAX's NVIDIA Llama-3.1-70B fp8 vLLM rows ran, which name no release:
# every job of ``.github/workflows/70b-tmpl.yml`` ran ``vllm/vllm-openai:v0.10.2`` with
# ``nvidia/Llama-3.3-70B-Instruct-FP8`` (SemiAnalysisAI/InferenceX, from af4ccd03f,
# 2025-09-23, to the template's removal at 2582bce40; scripts
# ``benchmarks/70b_fp8_h100_slurm.sh``, ``70b_fp8_h200_slurm.sh``, ``70b_fp8_b200_docker.sh``
# at c198b20eb). The build's kernel layout is ``twin.engine.kernel_layouts_vllm``'
# (``VLLM_STATIC_FP8_BUILDS``); the kernel tables stay the planned release's.
INFERENCEMAX_VLLM_BUILDS = {("llama-3.1-70b", "fp8"): "0.10.2"}
INFERENCEMAX_VLLM_BUILD_SYSTEMS = frozenset({"h100_sxm", "h200_sxm", "b200_sxm"})


def inferencemax_vllm_build(row: SiliconRow) -> str | None:
    """The vLLM image an InferenceMAX row that names no release ran (above); None
    elsewhere."""
    if not inferencemax_row(row, "vllm") or row.backend_version:
        return None
    if row.system not in INFERENCEMAX_VLLM_BUILD_SYSTEMS:
        return None
    named = model_named(row, tuple(m for m, _ in INFERENCEMAX_VLLM_BUILDS))
    return INFERENCEMAX_VLLM_BUILDS.get((named, (row.precision or "").lower())) if named else None


# InferenceMAX's B200 Llama-3.1-70B vLLM scripts capture full CUDA graphs for decode
# batches only: ``compilation-config`` ``"cudagraph_mode": "FULL_DECODE_ONLY"`` with
# ``"splitting_ops": []`` in every version of ``benchmarks/70b_fp4_b200_docker.sh`` and
# ``70b_fp8_b200_docker.sh`` (SemiAnalysisAI/InferenceX, 27f29acbe 2025-09-21 to c198b20eb /
# 24ea7def4, the template's last), both run by ``70b-tmpl.yml``'s ``vllm/vllm-openai:v0.10.2``
# jobs (``bmk-b200-fp4`` and the fp8 one). vLLM 0.10.2 (the wheel) ``config/compilation.py``:
# ``FULL_DECODE_ONLY = (FULL, NONE)``, "Mixed prefill-decode batches are run without
# cudagraphs"; ``v1/cudagraph_dispatcher.py`` ``CudagraphDispatcher.dispatch`` returns
# ``CUDAGraphMode.NONE`` for a batch with no full-graph key. So every step that holds a
# prompt runs the compiled model without a graph, whatever its size (graph tokens 0:
# ``twin.validate.silicon.eager_prefill``). The H100 / H200 scripts set no compilation
# config (piecewise graphs up to the capture size): not these.
INFERENCEMAX_VLLM_DECODE_ONLY_GRAPHS = {("llama-3.1-70b", "b200_sxm")}


def inferencemax_vllm_decode_only_graphs(row: SiliconRow) -> bool:
    """Whether ``row``'s InferenceMAX vLLM script captured graphs for decode batches only
    (above), so that each of its steps with a prompt ran eagerly."""
    if not inferencemax_row(row, "vllm") or row.backend_version:
        return False
    names = tuple(m for m, _ in INFERENCEMAX_VLLM_DECODE_ONLY_GRAPHS)
    named = model_named(row, names)
    return named is not None and (named, row.system) in INFERENCEMAX_VLLM_DECODE_ONLY_GRAPHS
