"""InferenceMAX's collection, whatever the engine: the parallel layout its rows ran
with, its DeepSeek-R1 runs under either name, and the one MTP acceptance rule of its
-mtp servers. Each engine's scripts: ``inferencemax_sglang``, ``inferencemax_trtllm``,
``inferencemax_vllm``."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from twin.validate.silicon.harness import inferencemax_row, model_named
from twin.validate.silicon.inferencemax_vllm import inferencemax_vllm_data_parallel

if TYPE_CHECKING:
    from twin.validate.silicon.rows import SiliconRow


# The parallel layout an InferenceMAX row ran with. Its single-node configurations
# (``.github/configs/nvidia-master.yaml``, ``multinode: false``, read at commits 12ba0ae
# and d1349b2 of SemiAnalysisAI/InferenceX) give each run ``tp`` GPUs, an ``ep`` of 1 or
# of ``tp`` (no single-node search space has another) and ``dp-attn``; the scripts pass
# ``tp`` as the engine's tensor-parallel size over all of them (SGLang ``--tp $TP
# --ep-size $EP``, ``dsr1_fp4_b200.sh``; vLLM ``--tensor-parallel-size=$TP
# --enable-expert-parallel``, ``minimaxm2.5_fp8_b200.sh``; TensorRT-LLM
# ``moe_expert_parallel_size: $EP`` with ``enable_attention_dp``). In aiconfigurator's
# columns that is ``tp_size x attention_dp_size = moe_tp_size x moe_ep_size = tp``. The
# db-dump and 2026-04-06.csv write many ``ep = tp`` runs with the GPUs multiplied by
# ``ep``: SGLang and TensorRT-LLM as ``moe_tp_size = moe_ep_size = tp`` (``tp_size`` or,
# with attention DP, ``attention_dp_size`` tp squared), vLLM as ``attention_dp_size = tp``
# and ``moe_ep_size`` tp squared. The ids that name their layout (``..._tp8_ep8_1010``)
# and the configurations agree on the smaller count: ``dsr1-fp4-b200-sglang``'s
# ``{ tp: 8, ep: 8 }`` runs on one 8-GPU node, not 64 GPUs. A vLLM run with dp-attn is
# written as one without; the MiniMax-M2.5 fp4 scripts ran it as vLLM data parallelism
# (``inferencemax_vllm.inferencemax_vllm_data_parallel``).
# Every InferenceMAX configuration on a Grace-Blackwell rack is a multinode Dynamo
# disaggregated one (``dsr1-fp4-gb200-dynamo-trt`` ...: ``multinode: true``, ``disagg:
# true``, at both commits): its 55 rows the 2026-04-06.csv calls ``agg`` (``tp_size``
# 12-72 at up to 5,632 clients) are the GPUs of a prefill and decode deployment, not one
# aggregated instance.
INFERENCEMAX_DISAGG_SYSTEMS = frozenset({"gb200", "gb300"})
REASON_INFERENCEMAX_DISAGG = "InferenceMAX GB200/GB300 runs are disaggregated (CSV mode agg)"


def inferencemax_layout(row: SiliconRow) -> SiliconRow:
    """``row`` with the parallel layout its run had (above); unchanged where its columns
    already say it, or where it is not an aggregated InferenceMAX row (the disaggregated
    rows' workers have columns of their own: ``twin.validate.silicon_disagg``)."""
    if row.mode != "agg" or not inferencemax_row(row):
        return row
    tp, dp = row.tp or 1, row.attention_dp or 1
    moe_tp, ep = row.moe_tp or 1, row.moe_ep or 1
    if moe_tp == ep > 1 and tp * dp == ep * ep:  # SGLang and TensorRT-LLM
        gpus, attention_dp = ep, dp > 1
    elif moe_tp == 1 and dp == tp > 1 and ep == tp * tp and row.backend == "vllm":
        gpus, attention_dp = tp, inferencemax_vllm_data_parallel(row)
    else:
        return row
    csv_layout = row.layout_columns
    dp = gpus if attention_dp else 1
    # The CSV's ``batch_size`` is per attention-DP rank (``silicon_concurrency =
    # attention_dp_size x batch_size``, ``agg_workers``) of its multiplied ranks: one
    # server ran the clients, so each of its ranks takes ``c / dp`` of them.
    batch = row.concurrency // dp if row.concurrency else row.batch_size
    return dataclasses.replace(
        row,
        tp=1 if attention_dp else gpus,
        attention_dp=dp,
        moe_tp=1,
        moe_ep=gpus,
        batch_size=batch,
        csv_layout=csv_layout,
    )


# The db-dump names its DeepSeek runs by their architecture, ``deepseek-ai/DeepSeek-V3``:
# InferenceMAX runs DeepSeek-R1-0528 only (the ``dsr1-*`` configurations), and those rows
# share their measurements with the R1 rows of 2026-03-25.csv (config_id 87's, for one).
INFERENCEMAX_DEEPSEEK = ("deepseek-r1", "deepseek-v3")


def inferencemax_deepseek(row: SiliconRow) -> bool:
    """Whether ``row`` is one of InferenceMAX's DeepSeek-R1 runs (under either name)."""
    return model_named(row, INFERENCEMAX_DEEPSEEK) is not None


# How often MTP drafts are accepted on InferenceMAX's rows, one rule for every engine: the
# first draft with the rate ``INFERENCEMAX_MTP_ACCEPTANCE[0]``, each later draft, given the
# ones before it, with ``[1]``; passed as the unconditional per-position rates (the share of
# steps whose first ``i`` drafts are all accepted, ``--set speculative_acceptance=r1,r2,..``,
# ``twin.engine.speculative_acceptance.length_from_rates``) by :func:`inferencemax_mtp_acceptance`.
# Why one rule: the engines draft and verify the same way on these rows.
# - Drafting: one MTP layer (DeepSeek-R1's and Qwen3.5's checkpoints carry one) run once
#   per draft, each later draft on the hidden state the previous draft step returned: SGLang
#   0.5.9 ``speculative/eagle_worker.py`` ``EAGLEWorker.draft_forward`` (NEXTN is EAGLE,
#   ``server_args.py``); TensorRT-LLM's MTP-Eagle, its default for ``num_nextn_predict_layers``
#   above the checkpoint's one layer (``llmapi/llm_args.py`` ``MTPDecodingConfig``:
#   ``use_mtp_vanilla: False``, ``mtp_eagle_one_model: True``; ``_torch/speculative/mtp.py``
#   ``MTPEagleWorker``, read at the 1.1 and 1.2 release candidates). So drafts after the
#   first are predicted from the draft's own states, off what the MTP layer was trained on
#   (the model's hidden state), and are expected to be accepted less often than the first
#   (the fit below does not show it).
# - Verifying: exact match with the target's greedy token. InferenceMAX's client sends
#   ``temperature: 0.0`` (``utils/bench_serving/backend_request_func.py``, the openai
#   completions payload) with ``--ignore-eos``; SGLang then verifies greedily
#   (``speculative/eagle_info.py`` ``EagleVerifyInput.verify``: ``is_all_greedy`` ->
#   ``verify_tree_greedy_func``); TensorRT-LLM's relaxed acceptance (``<think>`` spans
#   accept any of the target's top-N within ``relaxed_delta``) is off by default
#   (``use_relaxed_acceptance_for_thinking: False``, ``relaxed_topk: 1``) and the -mtp
#   scripts' ``speculative_config`` gives only ``decoding_type: MTP`` and
#   ``num_nextn_predict_layers`` (InferenceMAX ``benchmarks/dsr1_fp{4,8}_{b,h}200_trt_mtp.sh``
#   at 5d517074c / 0aae52d4c, ``..._mtp_slurm.sh`` at bf3456727), so strict.
# - The prompts: ``--dataset-name random`` with ``--use-chat-template`` (``benchmark_lib.sh``
#   ``run_benchmark_serving``; ``benchmark_serving.py`` ``sample_random_requests``: runs of
#   consecutive token ids from a random offset, in the chat template), not the text the
#   DeepSeek-V3 report measured its 85-90% second-token acceptance on (the twin's MTP
#   default, ``twin.engine.speculative_methods.Mtp``); the outputs are the model's greedy answer to
#   that, continued past its end of sequence.
# Fitted on the fit split only, on the TPOT of all 164 -mtp fit rows of both engines
# together (``benchmarks/results/mtp-accept-before-fit``, each row's decode time scaled by
# the acceptance length): the least TPOT MAPE has later = first (0.77 / 0.76), so the rows
# do not show the fall with the position; one rate, 0.76, for every draft. Docs:
# docs/decisions.md, "Issue 31, step: MTP acceptance on InferenceMAX's rows, one rule for
# both engines". It replaces SGLang's 0.65 and TensorRT-LLM's default 0.85 a draft.
INFERENCEMAX_MTP_ACCEPTANCE = (0.76, 0.76)


def inferencemax_mtp_acceptance(drafts: int) -> str:
    """``--set speculative_acceptance`` of an InferenceMAX -mtp row drafting ``drafts``
    tokens: the unconditional per-position rates of the rule above."""
    first, later = INFERENCEMAX_MTP_ACCEPTANCE
    return ",".join(f"{first * later**i:.6g}" for i in range(drafts))
