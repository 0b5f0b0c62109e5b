"""InferenceMAX's TensorRT-LLM server scripts: token budgets, attention-DP balance, batch
waiting, the MTP drafts each DeepSeek-R1 row ran and whether its context steps replayed
piecewise CUDA graphs."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from twin.model import ModelSpec
from twin.validate.silicon.harness import (
    INFERENCEMAX_GPTOSS,
    inferencemax_row,
    measured_on,
    model_named,
)
from twin.validate.silicon.inferencemax import inferencemax_deepseek, inferencemax_mtp_acceptance

if TYPE_CHECKING:
    from twin.validate.silicon.rows import SiliconRow


# InferenceMAX's TensorRT-LLM server limits (its ``benchmarks/*.sh`` scripts):
# ``--max_num_tokens`` 16384 for Llama-3.1-70B (``70b_fp4_b200_trt_docker``),
# 20000 for gpt-oss-120b (``gptoss_fp4_b200_trt_docker``, with ``--max_batch_size 512``);
# for DeepSeek-R1 (``benchmarks/single_node/dsr1_fp{4,8}_b200_trt.sh`` at commit 12ba0ae)
# ``(CONC + ISL + 64)`` rounded up to 64 and at least 8192, and with MTP
# (``dsr1_fp{4,8}_b200_trt_mtp.sh``) ``((MTP + 1) x MAX_BATCH_SIZE + ISL + 64)`` rounded up
# to 64 with no floor, ``--max_batch_size`` MAX_BATCH_SIZE = CONC without attention DP;
# whole contexts (chunked prefill left off); the 1.1.0rc2.post2 rows' scripts had no 8192
# floor until 2026-01-21 (``inferencemax_trtllm_token_floor``, below). Other models: the
# engine's defaults.
INFERENCEMAX_TRTLLM_TOKENS = {"Llama-3.1-70B": 16384, "gpt-oss-120b": 20000}
INFERENCEMAX_TRTLLM_BLOCK = 64
INFERENCEMAX_TRTLLM_FLOOR = 8192  # the plain scripts' MAX_NUM_TOKENS floor


# The attention-DP configurations of InferenceMAX's DeepSeek-R1 TensorRT-LLM scripts all
# write ``attention_dp_config: {batching_wait_iters: 0, enable_balance: true,
# timeout_iters: 60}`` (``benchmarks/dsr1_fp{4,8}_b200_trt_slurm.sh`` and
# ``dsr1_fp8_h200_trt_slurm.sh`` from ec90f3fe7, 2025-09-18, on; the -mtp scripts at
# bf3456727; ``dsr1_fp{4,8}_b200_trt.sh`` at 6eecc0e66 / ec7bafaae and
# ``dsr1_fp{4,8}_b200_trt_mtp.sh`` at 0aae52d4c / 5d517074c): TensorRT-LLM's context
# balance across the ranks (``twin.engine.adp_balance.ADPBalance``).
INFERENCEMAX_ADP_BALANCE = {
    "attention_dp_balance": "true",
    "attention_dp_timeout_iters": "60",
    "attention_dp_batching_wait_iters": "0",
}


# InferenceMAX's gpt-oss TensorRT-LLM script writes ``attention_dp_config: {enable_balance:
# true}`` and no other key of it under attention DP (``benchmarks/gptoss_fp4_b200_trt_slurm.sh``
# at 06667a51e, 2025-12-02, and 645b97aa4, 2026-01-07; ``gptoss_fp4_b200_trt.sh`` at
# 95877f5bf, 2026-02-06, the 1.2.0rc2.post2 rows): the balance at ``AttentionDpConfig``'s
# defaults, ``timeout_iters`` 50 and ``batching_wait_iters`` 10
# (``tensorrt_llm/llmapi/llm_args.py``; the mode's ``ADP_TIMEOUT_ITERS``,
# ``ADP_BATCHING_WAIT_ITERS``).
INFERENCEMAX_GPTOSS_ADP_BALANCE = {"attention_dp_balance": "true"}


def inferencemax_adp_balance(row: SiliconRow) -> dict[str, str]:
    """The ``attention_dp_config`` ``--set`` flags of ``row``'s InferenceMAX DeepSeek-R1 or
    gpt-oss TensorRT-LLM server (above); empty without attention DP."""
    if (row.attention_dp or 1) == 1:
        return {}
    if _inferencemax_trtllm_deepseek(row):
        return dict(INFERENCEMAX_ADP_BALANCE)
    imax_trtllm = inferencemax_row(row, "trtllm")
    if imax_trtllm and model_named(row, INFERENCEMAX_GPTOSS) is not None:
        return dict(INFERENCEMAX_GPTOSS_ADP_BALANCE)
    return {}


# ``--max_batch_size`` (per attention-DP rank) of the -mtp scripts, CONC without
# attention DP; with it, by image: ``CONC / TP`` in the 1.1.0rc2.post2 ones
# (``dsr1_fp{4,8}_b200_trt_mtp_slurm.sh``, ``dsr1_fp8_h200_trt_mtp_slurm.sh`` at
# bf3456727; TP the node's GPUs), ``CONC / 4`` (at least CONC below 4) in
# ``dsr1_fp4_b200_trt_mtp.sh`` at 0aae52d4c and ``CONC / 8`` (CONC below 8) in
# ``dsr1_fp8_b200_trt_mtp.sh`` at 5d517074c (1.2.0rc6.post3). MAX_NUM_TOKENS is
# ``(MTP + 1) x MAX_BATCH_SIZE + ISL + 64`` rounded up to 64 in all of them: one 1k
# context a rank an iteration where the batch is small.
INFERENCEMAX_MTP_DP_BATCH_DIVISOR = {
    ("b200_sxm", "fp4", "1.2.0rc6.post3"): 4,
    ("b200_sxm", "fp8", "1.2.0rc6.post3"): 8,
}


def inferencemax_mtp_batch(row: SiliconRow) -> int:
    """The per-rank ``--max_batch_size`` of ``row``'s InferenceMAX -mtp script (above)."""
    conc = row.concurrency or 0
    dp = row.attention_dp or 1
    if dp == 1:
        return conc
    divisor = INFERENCEMAX_MTP_DP_BATCH_DIVISOR.get(
        (row.system, row.precision, row.backend_version), (row.tp or 1) * dp
    )
    return conc if conc < divisor else conc // divisor


# InferenceMAX's Llama-3.1-70B TensorRT-LLM scripts hold context requests back at 1k/1k
# below 8 GPUs: ``batch_wait_max_tokens_ratio: 0.9`` and ``batch_wait_timeout_iters: 20``
# when ``ISL == 1024 && OSL == 1024 && TP < 8`` ("will improve the performance, by
# default they are all zeros"; ``benchmarks/70b_fp4_b200_trt_slurm.sh`` and
# ``70b_fp8_h200_trt_slurm.sh`` at SemiAnalysisAI/InferenceX 73ef922), TensorRT-LLM's
# batch waiting (``twin.engine.trtllm_batching``). The DeepSeek-R1 scripts' own
# ``DELAY_BATCHING``: :func:`inferencemax_deepseek_batch_wait`.
INFERENCEMAX_TRTLLM_BATCH_WAIT = {
    "batch_wait_timeout_iters": "20",
    "batch_wait_max_tokens_ratio": "0.9",
}
INFERENCEMAX_BATCH_WAIT_MODELS = ("llama-3.1-70b",)


def inferencemax_batch_wait(row: SiliconRow) -> dict[str, str]:
    """The batch-waiting ``--set`` flags of InferenceMAX's TensorRT-LLM server for
    ``row`` (above); empty where its script sets none."""
    if model_named(row, INFERENCEMAX_BATCH_WAIT_MODELS) is None:
        return {}
    if (row.isl, row.osl) != (1024, 1024) or (row.tp or 1) >= 8:
        return {}
    return dict(INFERENCEMAX_TRTLLM_BATCH_WAIT)


# InferenceMAX's DeepSeek-R1 runs with TensorRT-LLM on B200 come in two configurations that
# differ by image: ``dsr1-fp{4,8}-b200-trt`` (release 1.2.0rc6.post2, no speculation) and
# ``dsr1-fp{4,8}-b200-trt-mtp`` (1.2.0rc6.post3, MTP: "MTP=3 (or MTP=1 when DP_ATTN=true)")
# (InferenceMAX ``.github/configs/nvidia-master.yaml`` at commit 12ba0ae, 2026-03-25). The
# CSV names the image in ``backend_version``, so those rows ran with MTP: at the same
# layout their measured TPOT is about half the post2 rows' (5.4 against 10.3 ms, fp8, tp 8,
# 4 clients).
INFERENCEMAX_MTP = {("trtllm", "b200_sxm", "1.2.0rc6.post3"): (3, 1)}  # drafts: plain, DP
# The 1.1.0rc2.post2 image served both configurations (``dsr1-fp{4,8}-b200-trt[-mtp]``,
# ``dsr1-fp8-h200-trt[-mtp]``), so the image does not tell them apart; the day a row was
# measured does. The -mtp configurations were added by SemiAnalysisAI/InferenceX bf3456727
# ("Add MTP Benchmark Support for DeepSeek-R1 TRT", merged 2026-01-14T22:26:18Z; its
# scripts ``benchmarks/dsr1_fp{4,8}_{b,h}200_trt_mtp_slurm.sh``: MTP=3, or MTP=1 with
# attention DP), and the CSV's 1.1.0rc2.post2 rows measured that day are that merge's
# sweep (2026-03-25.csv stamps them ``2026-01-14T22:26:21Z``, three seconds after the
# merge): against the rows measured 2025-12-15 (the plain configurations) at the same
# system, precision, lengths and clients their TPOT is about half (H200 fp8 1k/8k at 4
# clients 7.1 against 13.7 ms; B200 fp8 1k/1k 7.8 against 14.6) and their TTFT higher, and
# they include points only the -mtp configurations have (H200 1k/1k at 128 and 256
# clients). The two H200 rows measured 2026-01-28 (stamped ``06:18:44Z``) are the sweep of
# e28c038f8 ("trigger full sweep to add GSM8k to official results", 2026-01-28T06:18:41Z),
# whose rows come from both H200 configurations, still 1.1.0rc2.post2: the 1k/8k row at
# 256 clients with attention DP is at a point only ``dsr1-fp8-h200-trt-mtp``'s search space
# has there
# (``{ tp: 8, ep: 8, dp-attn: true, conc-start: 256, conc-end: 256, spec-decoding: mtp }``;
# the plain configuration's 1k/8k ends at 64 clients without attention DP), so it ran
# ``dsr1_fp8_h200_trt_mtp.sh`` (MTP=1, no token floor); the 1k/8k row at 64 clients, a
# point of both, measures the plain rows' TPOT (32.16 against 32.10 ms on 2025-12-15, the
# -mtp row of 2026-01-14 19.41): plain (``None``).
INFERENCEMAX_MTP_RUNS: dict[tuple[str, str, str, str], tuple[int | None, int]] = {
    **{
        ("trtllm", system, "1.1.0rc2.post2", "2026-01-14"): (3, 1)
        for system in ("b200_sxm", "h200_sxm")
    },
    ("trtllm", "h200_sxm", "1.1.0rc2.post2", "2026-01-28"): (None, 1),
}


def inferencemax_mtp_drafts(row: SiliconRow) -> int | None:
    """The MTP drafts an InferenceMAX DeepSeek row ran with (above); ``None``: none, or
    not known."""
    key = (row.backend, row.system, row.backend_version)
    found = INFERENCEMAX_MTP.get(key) or INFERENCEMAX_MTP_RUNS.get((*key, measured_on(row) or ""))
    if found is None or not inferencemax_row(row) or not inferencemax_deepseek(row):
        return None
    return found[1] if (row.attention_dp or 1) > 1 else found[0]


# The script each InferenceMAX DeepSeek-R1 TensorRT-LLM row ran, read at the commit whose
# merge started the row's sweep (the CSV's ``measured=`` stamps fall seconds after it), by
# (system, precision, image): whether its context steps replay piecewise CUDA graphs
# (``torch_compile_config.enable_piecewise_cuda_graph: true``, with ``capture_num_tokens``
# up to ``max_num_tokens``: every context batch then runs captured graphs, not eager
# Python, so it pays no eager host time, ``eager_prefill_s``), and whether it holds
# contexts back (``batch_wait_timeout_iters: 40``, ``batch_wait_max_tokens_ratio: 0.8``,
# the script's ``DELAY_BATCHING``; ``twin.engine.trtllm_batching``). By script:
# - ``benchmarks/dsr1_fp8_b200_trt.sh`` at ec7bafaae (2026-01-29T15:27:25Z; rows stamped
#   15:27:29Z, image 1.2.0rc6.post2): piecewise graphs at 1k/1k from 64 clients, 1k/8k at
#   128 to 255 and 8k/1k from 64; the batch waiting at 1k/1k from 64 clients;
# - ``benchmarks/dsr1_fp4_b200_trt.sh`` at 6eecc0e66 (2026-02-03T17:34:14Z; rows 17:34:19Z,
#   1.2.0rc6.post2): piecewise graphs at 1k/1k with tp 8 and ep 8 only; no batch waiting;
# - ``benchmarks/dsr1_fp8_b200_trt_mtp.sh`` at 5d517074c (2026-02-05T19:55:01Z; rows
#   19:55:05Z, 1.2.0rc6.post3): piecewise graphs on except under attention DP, at 1k/1k
#   up to 4 clients, 1k/8k up to 8 and 8k/1k up to 16;
# - ``benchmarks/dsr1_fp4_b200_trt_mtp.sh`` at 0aae52d4c (2026-02-06T17:21:54Z; rows
#   17:21:58Z, 1.2.0rc6.post3): piecewise graphs at 1k/1k with 32 or 64 clients, or 128
#   without attention DP, and at 1k/8k with 64;
# - the 1.1.0rc2.post2 scripts (``benchmarks/dsr1_fp{4,8}_b200_trt_slurm.sh``,
#   ``dsr1_fp8_h200_trt_slurm.sh`` at 93e1b3ca1, unchanged until 2026-01-12, and the -mtp
#   scripts at bf3456727): neither, and their ``MAX_NUM_TOKENS`` has no 8192 floor
#   (``(CONC + ISL + 64)`` rounded up to 64; the -mtp ones ``((MTP + 1) x CONC + ISL +
#   64)``) until the plain ones' floor of 64af5a771 (``inferencemax_trtllm_token_floor``),
#   which adds neither either (``dsr1_fp8_h200_trt.sh`` at e28c038f8).
# Rows of another image (the CSV's unnamed 2025-11-02 ones) keep the engine's defaults.
def _fp8_b200_piecewise(isl: int, osl: int, conc: int, tp: int, ep: int, dp: bool) -> bool:
    if (isl, osl) == (1024, 8192):
        return 128 <= conc < 256
    return conc >= 64 and (isl, osl) in ((1024, 1024), (8192, 1024))


def _fp4_b200_piecewise(isl: int, osl: int, conc: int, tp: int, ep: int, dp: bool) -> bool:
    return (isl, osl) == (1024, 1024) and (tp, ep) == (8, 8)


def _fp8_b200_mtp_piecewise(isl: int, osl: int, conc: int, tp: int, ep: int, dp: bool) -> bool:
    narrow = {(1024, 1024): 4, (1024, 8192): 8, (8192, 1024): 16}.get((isl, osl), 0)
    return not dp and conc > narrow


def _fp4_b200_mtp_piecewise(isl: int, osl: int, conc: int, tp: int, ep: int, dp: bool) -> bool:
    if (isl, osl) == (1024, 1024):
        return conc in (32, 64) or (conc == 128 and not dp)
    return (isl, osl) == (1024, 8192) and conc == 64


INFERENCEMAX_TRTLLM_PIECEWISE = {
    ("b200_sxm", "fp8", "1.2.0rc6.post2"): _fp8_b200_piecewise,
    ("b200_sxm", "fp4", "1.2.0rc6.post2"): _fp4_b200_piecewise,
    ("b200_sxm", "fp8", "1.2.0rc6.post3"): _fp8_b200_mtp_piecewise,
    ("b200_sxm", "fp4", "1.2.0rc6.post3"): _fp4_b200_mtp_piecewise,
}
INFERENCEMAX_DEEPSEEK_BATCH_WAIT = {
    "batch_wait_timeout_iters": "40",
    "batch_wait_max_tokens_ratio": "0.8",
}
# The plain DeepSeek-R1 scripts' ``MAX_NUM_TOKENS`` floor of 8,192 came with InferenceX
# 64af5a771 (2026-01-21 23:05 UTC, "Adding evals after throughput benchmarks", #258:
# ``dsr1_fp4_b200_trt_slurm.sh``, ``dsr1_fp8_b200_trt_slurm.sh``,
# ``dsr1_fp8_h200_trt_slurm.sh``); before it ``(CONC + ISL + 64)`` rounded up to 64 stood
# alone. The 1.1.0rc2.post2 image ran on both sides of that day: its plain H200 fp8 row of
# 2026-01-28 (1k/8k at 64 clients; the 256-client one of that day ran the -mtp script,
# ``INFERENCEMAX_MTP_RUNS``) ran the floor (``dsr1_fp8_h200_trt.sh`` at e28c038f8,
# 2026-01-28T06:18:41Z), its earlier rows did not.
INFERENCEMAX_TRTLLM_NO_FLOOR = frozenset({"1.1.0rc2.post2"})  # images run without the floor
INFERENCEMAX_TRTLLM_FLOOR_FROM = "2026-01-22"  # the first whole day after 64af5a771


def inferencemax_trtllm_token_floor(row: SiliconRow) -> bool:
    """Whether ``row``'s plain InferenceMAX DeepSeek-R1 TensorRT-LLM script floored
    ``MAX_NUM_TOKENS`` at :data:`INFERENCEMAX_TRTLLM_FLOOR` (above): every image but
    1.1.0rc2.post2, and that one from the day the floor came."""
    if row.backend_version not in INFERENCEMAX_TRTLLM_NO_FLOOR:
        return True
    day = measured_on(row)
    return day is not None and day >= INFERENCEMAX_TRTLLM_FLOOR_FROM


# The KV pool share every InferenceMAX DeepSeek-R1 TensorRT-LLM script writes
# (``kv_cache_config.free_gpu_memory_fraction``, TensorRT-LLM's ``KvCacheConfig``; the
# engine's 0.9 when unset is what the twin used before): the share of what the profiling
# peak leaves free (``twin.engine.memory_rules``). By script (SemiAnalysisAI/InferenceX):
# - H200 fp8, 0.75: ``benchmarks/dsr1_fp8_h200_trt_slurm.sh`` at e06929c70 (the unnamed
#   2025-11-02 rows) and 93e1b3ca1 (2025-12-15), ``dsr1_fp8_h200_trt_mtp_slurm.sh`` at
#   bf3456727 (the -mtp rows, 2026-01-14);
# - B200, 0.8: ``dsr1_fp{4,8}_b200_trt_slurm.sh`` at e06929c70 and 93e1b3ca1, the -mtp
#   ``_slurm.sh`` scripts at bf3456727 (1.1.0rc2.post2), ``dsr1_fp4_b200_trt.sh`` at
#   6eecc0e66 (1.2.0rc6.post2) and ``dsr1_fp4_b200_trt_mtp.sh`` at 0aae52d4c
#   (1.2.0rc6.post3), whatever the layout;
# - B200 fp8 1.2.0rc6.post2 (``dsr1_fp8_b200_trt.sh`` at ec7bafaae): 0.8, but 0.7 at
#   1k/8k from 256 clients (its DEEPGEMM branch) and 0.75 at 8k/1k on 4 GPUs;
# - B200 fp8 1.2.0rc6.post3 (``dsr1_fp8_b200_trt_mtp.sh`` at 5d517074c): 0.8, 0.7 with
#   attention DP.
INFERENCEMAX_KV_FRACTION = {"h200_sxm": 0.75, "b200_sxm": 0.8}
# Every InferenceMAX gpt-oss-120b TensorRT-LLM script writes 0.85, on B200 and H200, on
# every day the CSV's rows ran (``benchmarks/gptoss_fp4_b200_trt_slurm.sh`` at ac1998a50,
# 06667a51e and 645b97aa4, ``gptoss_fp4_b200_trt.sh`` at 95877f5bf,
# ``gptoss_fp4_h200_trt_slurm.sh`` at 9596d23d7 and d22bf9ca9, ``gptoss_fp4_h200_trt.sh``
# at e28c038f8); the Llama-3.1-70B scripts write none (the engine's 0.9).
INFERENCEMAX_GPTOSS_KV_FRACTION = 0.85


def inferencemax_kv_fraction(row: SiliconRow) -> float | None:
    """``kv_cache_config.free_gpu_memory_fraction`` of ``row``'s InferenceMAX DeepSeek-R1
    or gpt-oss-120b TensorRT-LLM script (above), as ``EngineConfig.memory_utilization``;
    ``None`` for other rows and systems no script was read for."""
    if inferencemax_row(row, "trtllm") and model_named(row, INFERENCEMAX_GPTOSS) is not None:
        return INFERENCEMAX_GPTOSS_KV_FRACTION
    if not _inferencemax_trtllm_deepseek(row):
        return None
    fraction = INFERENCEMAX_KV_FRACTION.get(row.system)
    if row.system != "b200_sxm" or row.precision != "fp8":
        return fraction
    conc, dp = row.concurrency or 0, (row.attention_dp or 1) > 1
    if row.backend_version == "1.2.0rc6.post2":
        if (row.isl, row.osl) == (1024, 8192) and conc >= 256:
            return 0.7
        if (row.isl, row.osl) == (8192, 1024) and (row.tp or 1) * (row.attention_dp or 1) == 4:
            return 0.75
    if row.backend_version == "1.2.0rc6.post3" and dp:
        return 0.7
    return fraction


def _inferencemax_trtllm_deepseek(row: SiliconRow) -> bool:
    deepseek = inferencemax_row(row, "trtllm") and inferencemax_deepseek(row)
    return deepseek and bool(row.isl and row.osl)


def inferencemax_trtllm_piecewise(row: SiliconRow) -> bool:
    """Whether ``row``'s InferenceMAX DeepSeek-R1 TensorRT-LLM server captured its context
    steps as piecewise CUDA graphs (above)."""
    rule = INFERENCEMAX_TRTLLM_PIECEWISE.get((row.system, row.precision, row.backend_version))
    if rule is None or not _inferencemax_trtllm_deepseek(row):
        return False
    tp, ep, dp = row.tp or 1, row.moe_ep or 1, (row.attention_dp or 1) > 1
    return rule(
        row.isl or 0, row.osl or 0, row.concurrency or 0, tp * (row.attention_dp or 1), ep, dp
    )


# The MoE backend each InferenceMAX DeepSeek-R1 fp8 TensorRT-LLM script writes
# (``moe_config.backend``; SemiAnalysisAI/InferenceX, read at each commit the rows ran):
# - H200, ``CUTLASS``: ``benchmarks/dsr1_fp8_h200_trt_slurm.sh`` at e06929c70 (the unnamed
#   2025-11-02 rows) and 93e1b3ca1, ``dsr1_fp8_h200_trt_mtp_slurm.sh`` at bf3456727;
# - B200 1.1.0rc2.post2, ``DEEPGEMM``: ``dsr1_fp8_b200_trt_slurm.sh`` at e06929c70 and
#   93e1b3ca1, ``dsr1_fp8_b200_trt_mtp_slurm.sh`` at bf3456727, whatever the layout;
# - B200 1.2.0rc6.post2 (``dsr1_fp8_b200_trt.sh`` at ec7bafaae): ``TRTLLM``, ``DEEPGEMM``
#   at 1k/8k from 256 clients;
# - B200 1.2.0rc6.post3 (``dsr1_fp8_b200_trt_mtp.sh`` at 5d517074c): ``TRTLLM``,
#   ``DEEPGEMM`` under attention DP.
# TensorRT-LLM maps the name to its module (``tensorrt_llm/_torch/modules/fused_moe/
# create_moe.py`` ``get_moe_cls``, NVIDIA/TensorRT-LLM's stored tree, the 1.x line):
# ``CUTLASS`` -> ``CutlassFusedMoE``, ``DEEPGEMM`` -> ``DeepGemmFusedMoE``, ``TRTLLM`` ->
# ``TRTLLMGenFusedMoE`` for fp8 block scales (the checkpoint's, ``precision``).
def inferencemax_trtllm_moe_backend(row: SiliconRow) -> str | None:
    """``moe_config.backend`` of ``row``'s InferenceMAX DeepSeek-R1 fp8 TensorRT-LLM
    script (above); ``None`` for other rows."""
    if not _inferencemax_trtllm_deepseek(row) or row.precision != "fp8":
        return None
    if row.system == "h200_sxm":
        return "CUTLASS"
    if row.system != "b200_sxm":
        return None
    conc, dp = row.concurrency or 0, (row.attention_dp or 1) > 1
    if row.backend_version == "1.1.0rc2.post2":
        return "DEEPGEMM"
    if row.backend_version == "1.2.0rc6.post2":
        return "DEEPGEMM" if (row.isl, row.osl) == (1024, 8192) and conc >= 256 else "TRTLLM"
    if row.backend_version == "1.2.0rc6.post3":
        return "DEEPGEMM" if dp else "TRTLLM"
    return None


# The MoE backend each InferenceMAX DeepSeek-R1 fp4 TensorRT-LLM script writes on B200
# (``moe_config.backend``; SemiAnalysisAI/InferenceX, read at each commit the rows ran):
# ``CUTLASS`` where the script runs attention DP, ``TRTLLM`` (TRTLLM-gen) otherwise, in
# ``benchmarks/dsr1_fp4_b200_trt_slurm.sh`` at e06929c70 (the unnamed 2025-11-02 rows, the
# script's own layout: :func:`inferencemax_trtllm_script_layout`),
# ``dsr1_fp4_b200_trt_mtp_slurm.sh`` at bf3456727 (1.1.0rc2.post2 -mtp),
# ``dsr1_fp4_b200_trt.sh`` at 6eecc0e66 (1.2.0rc6.post2) and ``dsr1_fp4_b200_trt_mtp.sh``
# at 0aae52d4c (1.2.0rc6.post3); ``dsr1_fp4_b200_trt_slurm.sh`` at 93e1b3ca1 (the
# 2025-12-15 1.1.0rc2.post2 rows) chooses it by lengths and clients instead: ``CUTLASS``
# at 1k/1k and 1k/8k from 256 clients and at 8k/1k above 32 (tp 4 and 8), else
# ``TRTLLM``. The twin's ``--set moe_backend`` (``twin.engine.modes_trtllm``) prices the
# nvfp4 experts with that module's table at every step.
INFERENCEMAX_FP4_BY_LENGTHS_DAY = "2025-12-15"  # the 93e1b3ca1 sweep's measured= stamp
_FP4_CUTLASS_FROM = {(1024, 1024): 256, (1024, 8192): 256, (8192, 1024): 33}


def inferencemax_trtllm_fp4_moe_backend(row: SiliconRow) -> str | None:
    """``moe_config.backend`` of ``row``'s InferenceMAX DeepSeek-R1 fp4 TensorRT-LLM
    script on B200 (above); ``None`` for other rows."""
    if not _inferencemax_trtllm_deepseek(row) or row.precision != "fp4":
        return None
    if row.system != "b200_sxm" or row.backend_version not in INFERENCEMAX_FP4_IMAGES:
        return None
    plain = inferencemax_mtp_drafts(row) is None
    if plain and measured_on(row) == INFERENCEMAX_FP4_BY_LENGTHS_DAY:
        start = _FP4_CUTLASS_FROM.get((row.isl or 0, row.osl or 0))
        return "CUTLASS" if start is not None and (row.concurrency or 0) >= start else "TRTLLM"
    return "CUTLASS" if (row.attention_dp or 1) > 1 else "TRTLLM"


INFERENCEMAX_FP4_IMAGES = ("1.1.0rc2.post2", "1.2.0rc6.post2", "1.2.0rc6.post3")


def inferencemax_deepseek_batch_wait(row: SiliconRow) -> dict[str, str]:
    """The batch-waiting ``--set`` flags of ``row``'s InferenceMAX DeepSeek-R1
    TensorRT-LLM server (``DELAY_BATCHING``, above); empty where its script sets none."""
    key = (row.system, row.precision, row.backend_version)
    if key != ("b200_sxm", "fp8", "1.2.0rc6.post2") or not _inferencemax_trtllm_deepseek(row):
        return {}
    if (row.isl, row.osl) != (1024, 1024) or (row.concurrency or 0) < 64:
        return {}
    return dict(INFERENCEMAX_DEEPSEEK_BATCH_WAIT)


# The CSV's InferenceMAX DeepSeek-R1 TensorRT-LLM rows that name no image (stamped
# ``measured=2025-11-02``, B200 fp4 / fp8 and H200 fp8, under either model name) predate
# the configurations' search space (SemiAnalysisAI/InferenceX 17d5e204f, "candidate
# search space", 2025-11-03, which first gave each run an ``ep`` and ``dp-attn`` of its
# own, written since to the CSV's columns): every row collected before it has
# ``moe_ep_size`` and ``attention_dp_size`` 1, whatever ran. From ec90f3fe7 (2025-09-18)
# to that commit the workflow (``.github/workflows/dsr1-tmpl.yml``) ran the
# ``nvcr.io/nvidia/tensorrt-llm/release:1.1.0rc2.post2`` image for ``bmk-b200-trt-fp4``,
# ``-fp8`` and ``bmk-h200-trt-fp8``, and the scripts chose the layout themselves from
# ``TP``, the lengths and ``CONC`` (``benchmarks/dsr1_fp4_b200_trt_slurm.sh``,
# ``dsr1_fp8_b200_trt_slurm.sh``, ``dsr1_fp8_h200_trt_slurm.sh``, unchanged in these
# lines from ec90f3fe7 to e06929c70, the last commit before 2025-11-03):
# - fp4 B200: ``EP_SIZE=TP`` above 32 clients at tp 4 (above 8 at tp 8 1k/1k, 16 at tp 8
#   1k/8k, 32 at tp 8 8k/1k); attention DP (with ``moe_config.backend: CUTLASS``, else
#   TRTLLM) from 256 clients at 1k/1k and 1k/8k, above 32 at 8k/1k;
# - fp8 B200: ``EP_SIZE=TP`` always (``moe_config.backend: DEEPGEMM``); attention DP above
#   32 clients at 1k/1k, above 64 at 1k/8k and 8k/1k;
# - fp8 H200: ``EP_SIZE=TP`` always (CUTLASS); attention DP above 64 clients at 1k/1k and
#   1k/8k, above 32 at 8k/1k;
# and ``MAX_NUM_TOKENS=(CONC + ISL + 64)`` rounded up to 64 with no 8192 floor (the
# 1.1.0rc2.post2 scripts of those days: ``inferencemax_trtllm_token_floor``). These rows
# are read as that image and layout (:func:`inferencemax_trtllm_script_layout`).
INFERENCEMAX_SEARCH_SPACE_DAY = "2025-11-03"
INFERENCEMAX_TRTLLM_SCRIPT_IMAGE = "1.1.0rc2.post2"


# Each script's branches, by (isl, osl): clients above which it ran attention DP (fp4:
# from 256 at 1k/1k and 1k/8k); lengths without a branch keep the script's defaults (fp4:
# EP_SIZE 1, fp8: EP_SIZE TP; no attention DP).
_FP4_B200_EP_ABOVE = {
    (4, 1024, 1024): 32,
    (4, 1024, 8192): 32,
    (4, 8192, 1024): 32,
    (8, 1024, 1024): 8,
    (8, 1024, 8192): 16,
    (8, 8192, 1024): 32,
}
_FP8_B200_DP_ABOVE = {(1024, 1024): 32, (1024, 8192): 64, (8192, 1024): 64}
_FP8_H200_DP_ABOVE = {(1024, 1024): 64, (1024, 8192): 64, (8192, 1024): 32}


def _fp4_b200_script(isl: int, osl: int, conc: int, tp: int) -> tuple[bool, bool]:
    ep_above = _FP4_B200_EP_ABOVE.get((tp, isl, osl))
    if ep_above is None:  # no branch of the script's: EP 1, no attention DP
        return False, False
    dp = conc > 32 if (isl, osl) == (8192, 1024) else conc >= 256
    return conc > ep_above, dp


def _fp8_script(
    dp_above: dict[tuple[int, int], int], isl: int, osl: int, conc: int, tp: int
) -> tuple[bool, bool]:
    """The fp8 scripts: EP always, attention DP above the (isl, osl) branch's clients."""
    above = dp_above.get((isl, osl))
    return True, above is not None and conc > above


ScriptLayout = Callable[[int, int, int, int], tuple[bool, bool]]  # isl, osl, conc, tp
INFERENCEMAX_TRTLLM_SCRIPT_LAYOUT: dict[tuple[str, str], ScriptLayout] = {  # -> (EP, DP)
    ("b200_sxm", "fp4"): _fp4_b200_script,
    ("b200_sxm", "fp8"): functools.partial(_fp8_script, _FP8_B200_DP_ABOVE),
    ("h200_sxm", "fp8"): functools.partial(_fp8_script, _FP8_H200_DP_ABOVE),
}


# The CSV's InferenceMAX gpt-oss-120b H200 TensorRT-LLM rows that name no image (stamped
# ``measured=2025-11-02``, tp 2, 4 and 8, written ``moe_ep_size`` 1 like every row
# collected before 17d5e204f, above) ran ``benchmarks/gptoss_fp4_h200_trt_slurm.sh`` at
# 9596d23d7 (2025-10-29, the last commit to it before 2025-11-03; its server line
# unchanged since ffe0b55a7, 2025-09-28, "Remove triton dependency on H200 TRT GPTOSS"):
# ``trtllm-serve ... --ep_size=$TP ... --tp_size=$TP``, experts split by expert parallelism
# across the TP GPUs (MoE TP 1), on the image ``.github/workflows/gptoss-tmpl.yml``
# ``bmk-h200-trt`` names at e06929c70 (``release:gpt-oss-dev``, from ffe0b55a7 on). Before
# ffe0b55a7 the script ran ``--ep_size 1`` on 1.1.0rc2.post2; no row of those days is in
# the CSV. These rows are read as that image and layout.
INFERENCEMAX_GPTOSS_H200_EP_FROM = "2025-09-29"  # the first whole day after ffe0b55a7
INFERENCEMAX_GPTOSS_H200_IMAGE = "gpt-oss-dev"


def _gptoss_h200_script_layout(row: SiliconRow, day: str) -> SiliconRow:
    """The gpt-oss H200 rows' script layout (above); ``row`` unchanged where it is not one."""
    if row.system != "h200_sxm" or model_named(row, INFERENCEMAX_GPTOSS) is None:
        return row
    if not INFERENCEMAX_GPTOSS_H200_EP_FROM <= day < INFERENCEMAX_SEARCH_SPACE_DAY:
        return row
    gpus = row.tp or 1
    if gpus == 1 or (row.attention_dp or 1, row.moe_ep or 1, row.moe_tp or gpus) != (1, 1, gpus):
        return row
    csv_layout = f"script layout (no image, measured {day}): {row.layout_columns}"
    return dataclasses.replace(
        row,
        backend_version=INFERENCEMAX_GPTOSS_H200_IMAGE,
        moe_tp=1,
        moe_ep=gpus,
        csv_layout=csv_layout,
    )


def inferencemax_trtllm_script_layout(row: SiliconRow) -> SiliconRow:
    """``row`` at the image and parallel layout its script chose, where it is an
    InferenceMAX DeepSeek-R1 or H200 gpt-oss-120b TensorRT-LLM row measured before the
    search space named them (above); unchanged otherwise. The CSV's columns stay in
    ``csv_layout``."""
    day = measured_on(row)
    unnamed = inferencemax_row(row, "trtllm") and not row.backend_version and row.mode == "agg"
    if unnamed and day is not None and not row.csv_layout:
        row = _gptoss_h200_script_layout(row, day)
    rule = INFERENCEMAX_TRTLLM_SCRIPT_LAYOUT.get((row.system, row.precision))
    if rule is None or row.backend_version or day is None or day >= INFERENCEMAX_SEARCH_SPACE_DAY:
        return row
    if not _inferencemax_trtllm_deepseek(row) or row.mode != "agg" or not row.concurrency:
        return row
    if (row.attention_dp or 1, row.moe_ep or 1, row.moe_tp or row.tp) != (1, 1, row.tp):
        return row
    gpus = row.tp or 1
    ep, dp = rule(row.isl or 0, row.osl or 0, row.concurrency, gpus)
    ranks = gpus if dp else 1
    csv_layout = f"script layout (no image, measured {day}): {row.layout_columns}"
    return dataclasses.replace(
        row,
        backend_version=INFERENCEMAX_TRTLLM_SCRIPT_IMAGE,
        tp=gpus // ranks,
        attention_dp=ranks,
        moe_tp=1 if ep else gpus,
        moe_ep=gpus if ep else 1,
        batch_size=row.concurrency // ranks,
        csv_layout=csv_layout,
    )


def inferencemax_speculation(row: SiliconRow, model: ModelSpec) -> dict[str, Any] | None:
    """The speculative decoding an InferenceMAX row ran with (above), as
    ``EngineConfig.speculative``; ``None``: none, or not known."""
    drafts = inferencemax_mtp_drafts(row)
    if drafts is None:
        return None
    from twin.engine import speculative  # late: the engine is not needed to read rows

    acceptance = ("speculative_acceptance", inferencemax_mtp_acceptance(drafts))
    return speculative.build(model, "mtp", drafts, acceptance=acceptance).to_dict()
