"""Scoring the twin against measured serving runs (issue 31): "predict real silicon".

NVIDIA's ``aiconfigurator-core`` ships ``systems/silicon_sample.csv``: end-to-end
benchmarks of vLLM, SGLang and TensorRT-LLM serving instances on real GPUs, one row
per (model, system, engine, parallelism, ISL, OSL, concurrency) with the measured
TTFT and TPOT. An aggregated row is a closed-loop benchmark: ``c`` clients (the
``silicon_concurrency=N`` entry of ``silicon_data_source``) each sending a
random-token request of ``isl`` input and exactly ``osl`` output tokens as soon as
its previous one completes, to one instance of ``tp_size`` GPUs.

This module turns each row into the twin's run or a counted reason it cannot
(:func:`plan_row`), runs it through the one builder of a simulation
(:func:`twin.engine.run.build_run`, closed-loop clients ``concurrency=c``, the
engines' shared KV pool ``cache_gb="auto"``, the server limits of the row's deployment:
:func:`deployment`) at the row's precision (weights from its
``gemm_quant_mode``/``precision``/``moe_quant_mode`` or its checkpoint, the KV cache from
the checkpoint or aiconfigurator's pairing: :func:`_precision`, ``twin.precision``), and
scores the mean TTFT and TPOT against the measurement (:func:`summarize`: MAPE and
MdAPE, per group, per backend and precision and overall, on the issue's fixed split).
The CSV is read from the installed package at run time (never copied here);
``benchmarks/bench_silicon.py`` runs it in parallel. Decisions (request count, mean vs
median, how clients start, the deployment) are in ``docs/decisions.md``, "Scoring against
silicon (issue 31)", "Precision (issue 31)" and "TTFT against silicon (issue 31)".
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import io
import json
import logging
import math
import re
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from twin import precision as px
from twin.costmodel.profile import Profile
from twin.errors import TwinError, where
from twin.model import ModelSpec

CSV_IN_PACKAGE = ("systems", "silicon_sample.csv")
CONFIGS_IN_PACKAGE = "model_configs"
# The columns this module reads (the file has more: disaggregated workers' settings).
COLUMNS = (
    "id",
    "silicon_data_source",
    "backend",
    "backend_version",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
)
_CONCURRENCY = re.compile(r"silicon_concurrency=(\d+)")

# The fixed split: a row is fitted on when the first hex digit of the SHA-256 of
# its id is 0-7 (half the rows, whatever their order), held out otherwise.
FIT, HELD_OUT = "fit", "held_out"
SPLITS = (FIT, HELD_OUT)
_FIT_DIGITS = frozenset("01234567")

# Requests per row, in rounds of ``c``: aiconfigurator's own benchmark script (the
# package ``aiconfigurator`` 0.12.0, generator/config/backend_templates/benchmark/
# bench_run.sh.j2) runs ``aiperf profile --concurrency c --num-requests c x
# AICONFIGURATOR_BENCH_MULTI_ROUND`` (default 20) after ``--warmup-request-count 2c``.
# The warm-up requests run first and are left out of the means. (Rows of the InferenceMAX
# collection follow their own harness: :data:`INFERENCEMAX`.)
MEASURED_ROUNDS = 20
WARMUP_ROUNDS = 2


@dataclass(frozen=True)
class Harness:
    """The benchmark client a collection of rows was measured with."""

    name: str
    measured_rounds: int  # measured requests per client
    warmup_rounds: int  # warm-up requests per client, sent first and left out
    # Prompt and output lengths are drawn uniformly from [int(len x range_ratio), len]
    # (1.0: exactly the row's ISL and OSL).
    range_ratio: float


# aiconfigurator's benchmark (above): aiperf with ``--isl-stddev 0 --osl-stddev 0``
# (``generator/config/deployment_config.yaml`` defaults) and ``ignore_eos``: exact lengths.
AIPERF = Harness("aiconfigurator aiperf", MEASURED_ROUNDS, WARMUP_ROUNDS, 1.0)
# The CSV's InferenceMAX collections: "2026-04-06.csv", "2026-03-25.csv" and the
# "db-dump/2026-04-27" rows (Llama-3.1-70B, gpt-oss-120b, DeepSeek-R1, MiniMax-M2.5, ...
# at ISL/OSL 1k/1k, 1k/8k, 8k/1k, 4-256 clients). They are one measurement pipeline dumped
# three times: 2,151 rows of the CSV share their exact (TTFT, TPOT, ISL, OSL, concurrency,
# system, backend) with a row of another of the three (``measurement_key``), and the
# db-dump's ``workflow_run_id``/``config_id`` name CI runs. The matrix is InferenceMAX's;
# no source names the harness, so this is read off the matrix, not stated by the data.
# InferenceMAX's client (``benchmarks/benchmark_lib.sh`` ``run_benchmark_serving``) runs
# vLLM's ``benchmark_serving.py`` with ``--dataset-name random --random-range-ratio``
# (0.8 by default, ``.github/workflows/benchmark-tmpl.yml``), ``--num-prompts $((CONC *
# 10))``, ``--num-warmups $((2 * CONC))``, ``--ignore-eos``; its random dataset draws each
# prompt and output length uniformly from ``[int(len x ratio), len]``
# (``sample_random_requests``).
INFERENCEMAX = Harness("InferenceMAX benchmark_serving", 10, 2, 0.8)
INFERENCEMAX_SOURCES = frozenset({"2026-03-25.csv", "2026-04-06.csv"})
INFERENCEMAX_DUMP = "db-dump/"  # ``silicon_data_source`` of the CI database's rows
_SOURCE_FILE = re.compile(r"source_file=([^;]*)")


def harness_of(row: SiliconRow) -> Harness:
    """The benchmark client ``row`` was measured with, from its ``silicon_data_source``."""
    found = _SOURCE_FILE.search(row.source)
    if found and found.group(1).strip() in INFERENCEMAX_SOURCES:
        return INFERENCEMAX
    if row.source.startswith(INFERENCEMAX_DUMP):
        return INFERENCEMAX
    return AIPERF


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
# ``{ tp: 8, ep: 8 }`` runs on one 8-GPU node, not 64 GPUs.
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
    if row.mode != "agg" or harness_of(row) is not INFERENCEMAX:
        return row
    tp, dp = row.tp or 1, row.attention_dp or 1
    moe_tp, ep = row.moe_tp or 1, row.moe_ep or 1
    if moe_tp == ep > 1 and tp * dp == ep * ep:  # SGLang and TensorRT-LLM
        gpus, attention_dp = ep, dp > 1
    elif moe_tp == 1 and dp == tp > 1 and ep == tp * tp and row.backend == "vllm":
        gpus, attention_dp = tp, False
    else:
        return row
    csv_layout = (
        f"tp_size {row.tp}, attention_dp_size {row.attention_dp}, "
        f"moe_tp_size {row.moe_tp}, moe_ep_size {row.moe_ep}"
    )
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


# Random prompt token ids are drawn from [0, TOKEN_RANGE): random prompts share no
# prefix (the chance that two share even their first two tokens is 1e-10), so the
# engine's default prefix caching is kept and never hits, as on the real servers.
TOKEN_RANGE = 100_000

# The CSV's backend -> the twin's engine mode (twin.engine.modes). ``trtllm`` is the
# twin's TensorRT-LLM mode: TensorRT-LLM's kernels in the paper's world (the twin's
# default scheduler and preemption, not TensorRT-LLM's own).
ENGINE_OF_BACKEND = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm"}

# How each row's server was configured (docs/decisions.md, "TTFT against silicon (issue
# 31)"). "benchmark" (the default): each collection's own deployment: for the
# aiconfigurator collection the limits aiconfigurator's generator writes into a benchmark
# deployment (package ``aiconfigurator`` 0.12.0,
# ``generator/rule_plugin/benchmark/<backend>.rule``) for the engines whose fit rows
# say they ran with them (``DEPLOYED_ENGINES``), for the InferenceMAX collection its
# server scripts' limits (:func:`inferencemax_deployment`); "aiconfigurator": the
# generator's limits on ``DEPLOYED_ENGINES`` for every row; "aiconfigurator-all": for
# every engine the rule sizes (an exploration: TensorRT-LLM's fit rows score worse with
# it); "defaults": the engines' own defaults everywhere.
DEPLOYMENTS = ("benchmark", "aiconfigurator", "aiconfigurator-all", "defaults")
DEPLOYED_ENGINES = frozenset({"vllm"})
DEPLOYMENT_EXTRA_TOKENS = 1500  # the rules' "isl + 1500" margin
TRTLLM_TOKENS_PER_BLOCK = 32  # benchmark/trtllm.rule: tokens_per_block default
TRTLLM_TEMPLATE_FREE_FRACTION = 0.8  # extra_engine_args templates: free_gpu_memory_fraction


def aiconfigurator_deployment(row: SiliconRow, engine: str) -> dict[str, Any]:
    """``build_run`` keywords for the server limits aiconfigurator's generator writes
    into a benchmark deployment of ``row`` (empty where its rule sizes nothing the twin
    models).

    The generator sizes it from the batch size (``max_batch_size``: the CSV's
    ``batch_size`` column, the concurrency on every bf16 row) and the ISL
    (``generator/rule_plugin/benchmark/vllm.rule`` and ``trtllm.rule``, ``aiconfigurator``
    0.12.0, the ``agg`` lines):

    - vLLM: ``max_num_tokens = max_batch_size + isl + 1500``, written as
      ``--max-num-batched-tokens`` (``config/backend_templates/vllm/cli_args.0.12.0.j2``),
      and ``--max-num-seqs max_batch_size``;
    - TensorRT-LLM: ``max_num_tokens`` the same rounded up to ``tokens_per_block`` (32),
      ``max_batch_size`` the batch size (``extra_engine_args.1.0.0rc3.yaml.j2``
      ``build_config``), and ``kv_cache_config.free_gpu_memory_fraction`` the template's
      ``default(0.80)`` (every ``extra_engine_args.*.yaml.j2``; the rule sets none). vLLM's
      and SGLang's templates write ``--gpu-memory-utilization`` and
      ``--mem-fraction-static`` only when given, and the rules give none.

    SGLang's rule (``max_prefill_tokens = isl + 1500`` with ``enable_mixed_chunk =
    true``) is not expressed: mixed chunks scored SGLang's fit rows at 70.5% TTFT MAPE
    against 13.8% without ("Engine fidelity against silicon (issue 31)"), so its rows
    were not run with it.
    """
    batch = row.batch_size or row.concurrency
    if row.isl is None or not batch:
        return {}
    tokens = batch + row.isl + DEPLOYMENT_EXTRA_TOKENS
    if engine == "vllm":
        return {"sets": {"max_num_batched_tokens": str(tokens), "max_num_seqs": str(batch)}}
    if engine == "trtllm":
        block = TRTLLM_TOKENS_PER_BLOCK
        return {
            "max_batched_tokens": -(-tokens // block) * block,
            "max_running": batch,
            "memory_utilization": TRTLLM_TEMPLATE_FREE_FRACTION,
        }
    return {}


# InferenceMAX's server limits (its ``benchmarks/*.sh`` scripts): vLLM
# ``max-num-batched-tokens: 8192`` and ``--max-num-seqs 512`` (``70b_fp4_b200_docker``);
# TensorRT-LLM ``--max_num_tokens`` 16384 for Llama-3.1-70B (``70b_fp4_b200_trt_docker``),
# 20000 for gpt-oss-120b (``gptoss_fp4_b200_trt_docker``, with ``--max_batch_size 512``);
# for DeepSeek-R1 (``benchmarks/single_node/dsr1_fp{4,8}_b200_trt.sh`` at commit 12ba0ae)
# ``(CONC + ISL + 64)`` rounded up to 64 and at least 8192, and with MTP
# (``dsr1_fp{4,8}_b200_trt_mtp.sh``) ``((MTP + 1) x MAX_BATCH_SIZE + ISL + 64)`` rounded up
# to 64 with no floor, ``--max_batch_size`` MAX_BATCH_SIZE = CONC without attention DP;
# whole contexts (chunked prefill left off). Other models and SGLang: the engine's defaults.
INFERENCEMAX_VLLM = {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}
INFERENCEMAX_TRTLLM_TOKENS = {"Llama-3.1-70B": 16384, "gpt-oss-120b": 20000}
# The db-dump names its DeepSeek runs by their architecture, ``deepseek-ai/DeepSeek-V3``:
# InferenceMAX runs DeepSeek-R1-0528 only (the ``dsr1-*`` configurations), and those rows
# share their measurements with the R1 rows of 2026-03-25.csv (config_id 87's, for one).
INFERENCEMAX_DEEPSEEK = ("deepseek-r1", "deepseek-v3")


def inferencemax_deepseek(row: SiliconRow) -> bool:
    """Whether ``row`` is one of InferenceMAX's DeepSeek-R1 runs (under either name)."""
    path = row.model_path.lower()
    return any(name in path for name in INFERENCEMAX_DEEPSEEK)


INFERENCEMAX_TRTLLM_BLOCK = 64
INFERENCEMAX_TRTLLM_FLOOR = 8192  # the plain scripts' MAX_NUM_TOKENS floor


# InferenceMAX's SGLang servers for DeepSeek-R1 (image lmsysorg/sglang:v0.5.9-cu130;
# ``nvidia-master.yaml`` and the scripts at commit 12ba0ae). Each configuration's search
# space says which rows it ran; a row only one covers ran with its script's flags:
# - ``dsr1-fp4-b200-sglang`` (tp 4 and 8, 4-128 clients; 8k/1k at tp 8: 4-16),
#   ``dsr1_fp4_b200.sh``: ``--max-running-requests 256 --mem-fraction-static 0.85
#   --chunked-prefill-size 16384``;
# - ``dsr1-fp8-b200-sglang`` (tp 8: 4-64 clients at 1k/1k and 1k/8k, 4 at 8k/1k; tp 4:
#   8k/1k at 4-32), ``dsr1_fp8_b200.sh``: tp 8 128 requests, 0.82, 32768 chunk and
#   prefill tokens; tp 4 32, 0.95, 8192;
# - ``dsr1-fp8-b200-sglang-mtp`` (tp 8, 4-512 clients), ``dsr1_fp8_b200_mtp.sh``: 512
#   requests, 0.82, 16384, and EAGLE over the model's MTP layer with 2 steps, top-k 1 and 3
#   draft tokens (SGLang's NEXTN). Rows both fp8 configurations cover are a mix the CSV
#   cannot separate (their lengths, clients and image are the same): run plain;
# - ``dsr1-fp8-h200-sglang`` (tp 8, 4-64 clients), ``dsr1_fp8_h200.sh``: 512 requests at
#   1k/1k, else 256; 32768; 0.82.
# The B200 scripts poll for requests every 30 decode iterations from 16 clients, else 10
# (``--scheduler-recv-interval``; 10 at fp8 tp 4). A row no configuration covers runs with
# SGLang's defaults.
INFERENCEMAX_SGLANG_VERSION = "0.5.9"
_SGLANG_FLAGS = (
    "max_running_requests",
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "scheduler_recv_interval",
)
_SGLANG_MTP = {
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": "2",
    "speculative_eagle_topk": "1",
    "speculative_num_draft_tokens": "3",
}


def inferencemax_sglang(row: SiliconRow) -> dict[str, str]:
    """The ``--set`` flags of InferenceMAX's SGLang server for ``row`` (above); empty
    where no one configuration of that image covers it."""
    if row.backend_version != INFERENCEMAX_SGLANG_VERSION or not inferencemax_deepseek(row):
        return {}
    conc, tp, lengths = row.concurrency or 0, row.tp or 1, (row.isl, row.osl)
    poll = "30" if conc >= 16 else "10"
    long_prompt = lengths == (8192, 1024)
    flags: tuple[str, ...]
    extra: dict[str, str] = {}
    if row.system == "b200_sxm" and row.precision == "fp4":
        if tp not in (4, 8) or conc > (16 if tp == 8 and long_prompt else 128):
            return {}
        flags = ("256", "0.85", "16384", "16384", poll)
    elif row.system == "b200_sxm" and row.precision == "fp8" and tp == 4:
        if not long_prompt or conc > 32:
            return {}
        flags = ("32", "0.95", "8192", "8192", "10")
    elif row.system == "b200_sxm" and row.precision == "fp8" and tp == 8:
        if conc <= (4 if long_prompt else 64):
            flags = ("128", "0.82", "32768", "32768", poll)
        elif conc <= 512:
            flags, extra = ("512", "0.82", "16384", "16384", poll), _SGLANG_MTP
        else:
            return {}
    elif row.system == "h200_sxm" and row.precision == "fp8" and tp == 8 and conc <= 64:
        running = "512" if lengths == (1024, 1024) else "256"
        flags = (running, "0.82", "32768", "32768", "1")
    else:
        return {}
    return {**dict(zip(_SGLANG_FLAGS, flags, strict=True)), **extra}


def inferencemax_deployment(row: SiliconRow, engine: str) -> dict[str, Any]:
    """``build_run`` keywords for the InferenceMAX scripts' server limits of ``row``."""
    if engine == "vllm":
        return {"sets": dict(INFERENCEMAX_VLLM)}
    if engine == "sglang":
        sglang = inferencemax_sglang(row)
        return {"sets": sglang} if sglang else {}
    if engine != "trtllm":
        return {}
    path = row.model_path.lower()
    for name, tokens in INFERENCEMAX_TRTLLM_TOKENS.items():
        if name.lower() in path:
            return {"max_batched_tokens": tokens}
    if not inferencemax_deepseek(row) or not row.isl:
        return {}
    block, conc = INFERENCEMAX_TRTLLM_BLOCK, row.concurrency or 0
    drafts = inferencemax_mtp_drafts(row)
    if drafts is not None and (row.attention_dp or 1) == 1:
        tokens = (drafts + 1) * conc + row.isl + 64
        return {"max_batched_tokens": -(-tokens // block) * block, "max_running": conc}
    tokens = -(-(conc + row.isl + 64) // block) * block
    return {"max_batched_tokens": max(tokens, INFERENCEMAX_TRTLLM_FLOOR)}


# InferenceMAX's DeepSeek-R1 runs with TensorRT-LLM on B200 come in two configurations that
# differ by image: ``dsr1-fp{4,8}-b200-trt`` (release 1.2.0rc6.post2, no speculation) and
# ``dsr1-fp{4,8}-b200-trt-mtp`` (1.2.0rc6.post3, MTP: "MTP=3 (or MTP=1 when DP_ATTN=true)")
# (InferenceMAX ``.github/configs/nvidia-master.yaml`` at commit 12ba0ae, 2026-03-25). The
# CSV names the image in ``backend_version``, so those rows ran with MTP: at the same
# layout their measured TPOT is about half the post2 rows' (5.4 against 10.3 ms, fp8, tp 8,
# 4 clients). Other MTP configurations share their image with a plain one (H200
# TensorRT-LLM 1.1.0rc2.post2, SGLang v0.5.9) and cannot be told apart: run plain.
INFERENCEMAX_MTP = {("trtllm", "b200_sxm", "1.2.0rc6.post3"): (3, 1)}  # drafts: plain, DP


def inferencemax_mtp_drafts(row: SiliconRow) -> int | None:
    """The MTP drafts an InferenceMAX DeepSeek row ran with (above); ``None``: none, or
    not known."""
    found = INFERENCEMAX_MTP.get((row.backend, row.system, row.backend_version))
    if found is None or harness_of(row) is not INFERENCEMAX or not inferencemax_deepseek(row):
        return None
    return found[1] if (row.attention_dp or 1) > 1 else found[0]


def inferencemax_speculation(row: SiliconRow, model: ModelSpec) -> dict[str, Any] | None:
    """The speculative decoding an InferenceMAX row ran with (above), as
    ``EngineConfig.speculative``; ``None``: none, or not known."""
    drafts = inferencemax_mtp_drafts(row)
    if drafts is None:
        return None
    from twin.engine import speculative  # late: the engine is not needed to read rows

    return speculative.build(model, "mtp", drafts).to_dict()


def deployment(row: SiliconRow, engine: str, kind: str = "benchmark") -> dict[str, Any]:
    """The server limits ``row`` runs with under the deployment ``kind`` (``DEPLOYMENTS``)."""
    if kind not in DEPLOYMENTS:
        raise TwinError(f"deployment {kind!r}: expected one of {', '.join(DEPLOYMENTS)}")
    if kind == "benchmark" and harness_of(row) is INFERENCEMAX:
        return inferencemax_deployment(row, engine)
    if kind == "defaults" or (kind != "aiconfigurator-all" and engine not in DEPLOYED_ENGINES):
        return {}
    return aiconfigurator_deployment(row, engine)


# The CSV's precision names and quant modes (aiconfigurator's) -> the twin's --precision
# (twin.precision.TABLE_MODES; ``fp8_static`` is per-tensor static fp8: the same bytes,
# priced by the fp8 GEMM fit). An empty ``precision`` (the older collection's unquantised
# runs) is read from the checkpoint: its quantisation config, else its name's suffix,
# else its dtype.
_WEIGHT_MODES = {**px.TABLE_MODES, "fp8_static": "fp8"}
_CHECKPOINT_DTYPES = {"bfloat16": "bf16"}
# Checkpoint quantisation configs -> --precision: ModelOpt's ``quant_algo`` (the
# ``hf_quant_config.json`` NVIDIA ships, or ``quantization_config`` with quant_method
# modelopt) and Hugging Face's ``quant_method`` (fp8, with ``weight_block_size`` for
# block scales).
_CHECKPOINT_ALGOS = {"FP8": "fp8", "FP8_BLOCK": "fp8-block", "NVFP4": "nvfp4"}
# A quantised repository's name: ``nvidia/Llama-3.1-8B-Instruct-FP8``, ``-NVFP4``,
# ``Qwen3-32B-FP8-Static-PerTensor`` (the weights' format; the architecture is the base
# model's).
_NAME_SUFFIX = re.compile(r"-(fp8|nvfp4|mxfp4)(?=-|$)", re.IGNORECASE)
# aiconfigurator's quant profiles pair fp8 and nvfp4 weights with an fp8 KV cache and
# bf16 with a bf16 one (package aiconfigurator 0.12.0, sdk/task_v1_compat.py
# ``_PROFILE_TO_QUANT``; its checkpoint inference does the same, aiconfigurator-core
# sdk/models/helpers.py ``_infer_quant_modes_from_raw_config``): a row whose checkpoint
# does not say (``kv_cache_quant_algo``) is run with that KV cache.
_KV_OF_WEIGHTS = {"bf16": "bf16", "fp8": "fp8", "fp8-block": "fp8", "nvfp4": "fp8"}

# Reasons a row is not expressed, in the order they are checked (a row is counted once,
# under the first that applies).
REASON_NO_MEASUREMENT = "no measured TTFT/TPOT"
REASON_DISAGG = "disaggregated serving (mode disagg)"
REASON_PP = "pipeline parallel (pp_size > 1)"
REASON_ATTN_DP = "attention data parallel (attention_dp_size > 1)"
REASON_DP_SPECULATIVE = "attention data parallel with speculative decoding (MTP) not modelled"
REASON_EP = "expert parallel (moe_ep_size > 1)"
REASON_NO_CONCURRENCY = "no silicon_concurrency in silicon_data_source"
REASON_NO_LENGTHS = "no isl/osl"


@dataclass(frozen=True)
class SiliconRow:
    """One row of the CSV, parsed (``None`` where the file leaves a value empty)."""

    id: str
    source: str
    backend: str
    backend_version: str
    model_path: str
    system: str
    precision: str
    mode: str
    isl: int | None
    osl: int | None
    gemm_quant_mode: str
    moe_quant_mode: str
    batch_size: int | None
    tp: int | None
    pp: int | None
    attention_dp: int | None
    moe_tp: int | None
    moe_ep: int | None
    concurrency: int | None
    ttft_ms: float | None
    tpot_ms: float | None
    # Another row of the file holds the same measurement (``measurement_key``) under a
    # fit id: the measurement was seen when fitting, so this row is fit too.
    copy_in_fit: bool = False
    # The CSV's own parallel columns where they were read as another layout
    # (:func:`inferencemax_layout`); empty where the columns are the run's.
    csv_layout: str = ""

    @property
    def split(self) -> str:
        return FIT if self.copy_in_fit else split_of(self.id)

    @property
    def measurement_key(self) -> tuple[object, ...] | None:
        """What makes two rows one measurement: the same measured TTFT and TPOT (exact
        floats) at the same lengths, concurrency, system and backend. The InferenceMAX
        collections repeat measurements under other ids, model names (DeepSeek-V3 and
        -R1) and versions; ``None`` without a measurement."""
        if self.ttft_ms is None or self.tpot_ms is None:
            return None
        return (
            self.ttft_ms,
            self.tpot_ms,
            self.isl,
            self.osl,
            self.concurrency,
            self.system,
            self.backend,
        )

    @property
    def model_name(self) -> str:
        """The model's name without its organisation (``Qwen3-32B``)."""
        return self.model_path.rsplit("/", 1)[-1]

    @property
    def precision_label(self) -> str:
        return self.precision or "unspecified"

    @property
    def group(self) -> str:
        """The summary's group: model | system | backend | precision."""
        return f"{self.model_name}|{self.system}|{self.backend}|{self.precision_label}"


def split_of(row_id: str) -> str:
    """``fit`` when the first hex digit of SHA-256(``row_id``) is 0-7, else ``held_out``
    (a row's split also counts its copies: ``SiliconRow.split``)."""
    digit = hashlib.sha256(row_id.encode("utf-8")).hexdigest()[0]
    return FIT if digit in _FIT_DIGITS else HELD_OUT


# ------------------------------------------------------------------ reading the CSV
def package_dir() -> Path:
    """The installed ``aiconfigurator_core`` (a TwinError naming the extra if absent)."""
    from twin.calibration.aic_tables import package_dir as aic_package_dir

    return aic_package_dir("scoring against silicon_sample.csv")


def default_csv() -> Path:
    return package_dir().joinpath(*CSV_IN_PACKAGE)


def default_configs() -> Path:
    return package_dir() / CONFIGS_IN_PACKAGE


def _number(text: str, path: Path, row: int, column: str, what: str) -> float | None:
    """A cell as a float (None when empty); one error naming file, row and column."""
    text = text.strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise TwinError(f"{where(path, row, column)}: expected {what} (got {text!r})") from None


def _int(text: str, path: Path, row: int, column: str) -> int | None:
    value = _number(text, path, row, column, "an integer")
    if value is None:
        return None
    if not value.is_integer():
        raise TwinError(f"{where(path, row, column)}: expected an integer (got {text.strip()!r})")
    return int(value)


def _float(text: str, path: Path, row: int, column: str) -> float | None:
    value = _number(text, path, row, column, "a number")
    if value is None:
        return None
    return value if math.isfinite(value) and value > 0 else None


def read_rows(path: str | Path | None = None) -> list[SiliconRow]:
    """The CSV's rows (the installed package's ``systems/silicon_sample.csv`` by default).

    A missing column or a malformed number is a TwinError naming the file, row and
    column; an empty value is ``None`` (the row is then not expressed, with a reason).
    """
    p = Path(path) if path is not None else default_csv()
    try:
        with p.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise TwinError(f"{p}: missing column {missing[0]!r} (a silicon_sample.csv?)")
            rows = []
            for i, raw in enumerate(reader, start=1):
                rows.append(inferencemax_layout(_parse(raw, p, i)))
    except FileNotFoundError:
        raise TwinError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TwinError(f"{p}: not a readable CSV file ({err})") from None
    seen: set[str] = set()
    for i, r in enumerate(rows, start=1):
        if not r.id:
            raise TwinError(f"{where(p, i, 'id')}: empty id")
        if r.id in seen:
            raise TwinError(f"{where(p, i, 'id')}: duplicate id {r.id!r}")
        seen.add(r.id)
    return mark_copies(rows)


def mark_copies(rows: Sequence[SiliconRow]) -> list[SiliconRow]:
    """``rows`` with ``copy_in_fit`` set where another row holds the same measurement
    under a fit id, so a held-out score never counts a measurement the fit split saw
    (608 held-out rows of the package's CSV have a fit copy)."""
    fit_keys = {
        r.measurement_key for r in rows if r.measurement_key is not None and split_of(r.id) == FIT
    }
    return [
        dataclasses.replace(r, copy_in_fit=True)
        if split_of(r.id) != FIT and r.measurement_key in fit_keys
        else r
        for r in rows
    ]


def _parse(raw: dict[str, str | None], path: Path, i: int) -> SiliconRow:
    text = {c: (raw.get(c) or "").strip() for c in COLUMNS}

    def n(column: str) -> int | None:
        return _int(text[column], path, i, column)

    found = _CONCURRENCY.search(text["silicon_data_source"])
    return SiliconRow(
        id=text["id"],
        source=text["silicon_data_source"],
        backend=text["backend"].lower(),
        backend_version=text["backend_version"],
        model_path=text["model_path"],
        system=text["system"].lower(),
        precision=text["precision"].lower(),
        mode=text["mode"].lower(),
        isl=n("isl"),
        osl=n("osl"),
        gemm_quant_mode=text["gemm_quant_mode"].lower(),
        moe_quant_mode=text["moe_quant_mode"].lower(),
        batch_size=n("batch_size"),
        tp=n("tp_size"),
        pp=n("pp_size"),
        attention_dp=n("attention_dp_size"),
        moe_tp=n("moe_tp_size"),
        moe_ep=n("moe_ep_size"),
        concurrency=int(found.group(1)) if found else None,
        ttft_ms=_float(text["silicon_ttft_ms"], path, i, "silicon_ttft_ms"),
        tpot_ms=_float(text["silicon_tpot_ms"], path, i, "silicon_tpot_ms"),
    )


def select(
    rows: Iterable[SiliconRow],
    models: Sequence[str] = (),
    systems: Sequence[str] = (),
    backends: Sequence[str] = (),
) -> list[SiliconRow]:
    """Rows whose model path contains one of ``models`` (case-insensitive), whose system
    is one of ``systems`` and backend one of ``backends`` (empty: any)."""
    ms = [m.lower() for m in models]
    ss = {s.lower() for s in systems}
    bs = {b.lower() for b in backends}
    return [
        r
        for r in rows
        if (not ms or any(m in r.model_path.lower() for m in ms))
        and (not ss or r.system in ss)
        and (not bs or r.backend in bs)
    ]


# ------------------------------------------------------------------ row -> run
@dataclass(frozen=True)
class RowPlan:
    """What the twin runs for one expressible row."""

    row: SiliconRow
    model_fields: dict[str, Any]  # ModelSpec.to_dict(derived=False): plain data, pickles
    model_id: str  # the Hugging Face id whose config was used (may differ from model_path)
    config_path: str
    gpu: str  # the twin's GPU name (its shipped <gpu>-<engine> profile prices the steps)
    engine: str  # the twin's engine mode
    tp: int
    concurrency: int  # clients on the one worker the twin runs (:func:`agg_workers`)
    precision: str  # what is priced, and why
    priced: str  # what is priced, as the summary groups it: "fp8, fp8 KV"
    warmup: int  # requests sent first and left out of the means
    requests: int  # all requests, warm-up included
    # build_run keywords for the server's limits (:func:`deployment`)
    deployment: dict[str, Any] = dataclasses.field(default_factory=dict)
    ep: int = 1  # expert-parallel ranks within the tp GPUs (the row's moe_ep_size)
    workers: int = 1  # aggregated workers the measured clients were spread over
    range_ratio: float = 1.0  # the harness's length spread (:class:`Harness`)
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


def config_candidates(model_path: str) -> list[str]:
    """Hugging Face ids whose ``config.json`` describes ``model_path``'s architecture, in
    order: the id itself; the same name without a quantised repository's suffix
    (``nvidia/Llama-3.1-8B-Instruct-FP8`` is Meta's Llama-3.1-8B-Instruct quantised by
    NVIDIA ModelOpt, per its model card: the same shapes); Meta's pre-2024 name of a
    renamed Llama 3.1 repository (``meta-llama/Llama-3.1-8B`` was
    ``meta-llama/Meta-Llama-3.1-8B``, which the package caches); each without an
    ``-Instruct`` suffix (instruction tuning changes the weights, not the shapes: the
    same config.json keys for layers, widths and vocab). :func:`find_config` also looks
    for these names under another organisation."""
    org, _, name = model_path.rpartition("/")
    names = [name]
    quantised = _NAME_SUFFIX.search(name)
    if quantised is not None:
        names.append(name[: quantised.start()])
    names += [f"Meta-{n}" for n in names if n.startswith("Llama-3.1-")]
    names += [n.removesuffix("-Instruct") for n in names if n.endswith("-Instruct")]
    out: list[str] = []
    for n in names:
        hf_id = f"{org}/{n}" if org else n
        if hf_id not in out:
            out.append(hf_id)
    return out


def find_config(configs: Path, model_path: str) -> tuple[str, Path] | None:
    """The first cached config of :func:`config_candidates`, else the first of their
    names under any organisation (sorted; NVIDIA's quantised checkpoints carry the base
    model's name, e.g. ``nvidia/Qwen3-32B-NVFP4`` -> ``Qwen/Qwen3-32B``)."""
    candidates = config_candidates(model_path)
    for hf_id in candidates:
        if config_file(configs, hf_id).is_file():
            return hf_id, config_file(configs, hf_id)
    for hf_id in candidates:
        name = hf_id.rsplit("/", 1)[-1]
        for path in sorted(configs.glob(f"*--{name}_config.json")):
            return path.name.removesuffix("_config.json").replace("--", "/", 1), path
    return None


def config_file(configs: Path, hf_id: str) -> Path:
    """The package's cached config of ``hf_id``: ``<org>--<name>_config.json``."""
    return configs / f"{hf_id.replace('/', '--')}_config.json"


@cache
def _load_model(path: str, hf_id: str) -> ModelSpec:
    from twin.hf_config import from_hf_config

    return from_hf_config(path, name=hf_id)


@cache
def _read_config(path: str) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if isinstance(data.get("text_config"), dict):  # a multimodal wrapper's language model
        return {**data, **data["text_config"]}
    return data


def system_gpus() -> dict[str, str]:
    """The CSV's ``system`` -> the twin's GPU name: the inverse of the kernel tables' map
    (``calibration.aic_tables.SYSTEMS``: ``h100_sxm`` -> ``h100``, ``gb200`` -> ``gb200``)."""
    from twin.calibration.aic_tables import SYSTEMS

    return {system: gpu for gpu, system in SYSTEMS.items()}


@dataclass(frozen=True)
class RowPrecision:
    """What the twin prices a row at (``twin.precision``) and why."""

    weights: str  # --precision
    kv: str  # --kv-dtype
    moe: str | None = None  # the experts' (None: as the weights)
    why: str = ""
    kv_from_checkpoint: bool = False  # the checkpoint says the KV dtype (else a default)
    # Read from the checkpoint where the columns name a mode the GPU runs weight-only
    # (``weight_only_checkpoint``), not from the columns.
    native: bool = False

    @property
    def label(self) -> str:
        """``fp8-block, fp8 KV``: the summary's per-precision key."""
        experts = f", {self.moe} experts" if self.moe not in (None, self.weights) else ""
        return f"{self.weights}{experts}, {self.kv} KV"

    @property
    def text(self) -> str:
        """The per-row ``priced_as``: the label and where it was read."""
        return f"{self.weights} weights{', ' + self.moe + ' experts' if self.moe else ''}, " + (
            f"{self.kv} KV ({self.why})"
        )


def _unpriced_columns(row: SiliconRow) -> str | None:
    """The reason, if the row's own precision columns name one the twin does not price."""
    gemm = row.gemm_quant_mode or row.precision
    if gemm and gemm not in _WEIGHT_MODES:
        label = row.precision or row.gemm_quant_mode
        extra = f" ({row.gemm_quant_mode})" if row.gemm_quant_mode not in ("", label) else ""
        return f"precision {label}{extra} not priced"
    if row.moe_quant_mode and row.moe_quant_mode not in _WEIGHT_MODES:
        return f"precision {row.moe_quant_mode} (MoE) not priced"
    return None


def hf_quant_config(configs: Path, hf_id: str) -> dict[str, Any] | None:
    """The ``quantization`` section of ``<org>--<name>_hf_quant_config.json`` (NVIDIA
    ModelOpt's file beside a quantised checkpoint's config), if the package caches it."""
    path = configs / f"{hf_id.replace('/', '--')}_hf_quant_config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    quant = data.get("quantization") if isinstance(data, dict) else None
    return quant if isinstance(quant, dict) else None


def _checkpoint_quant(config: dict[str, Any], hf: dict[str, Any] | None) -> str | None:
    """The weights' --precision a checkpoint's own quantisation says, ``""`` for an
    unquantised one, or a reason (starting "precision") for one the twin cannot price."""
    quant = config.get("quantization_config")
    algo = (hf or {}).get("quant_algo")
    if isinstance(quant, dict) and not algo:
        method = str(quant.get("quant_method", "quantised")).lower()
        if method == "fp8":
            return "fp8-block" if quant.get("weight_block_size") else "fp8"
        if method == "modelopt":
            algo = quant.get("quant_algo")
        else:
            return f"precision of the {method} checkpoint not priced"
    if algo:
        found = _CHECKPOINT_ALGOS.get(str(algo).upper())
        return found or f"precision of the {algo} checkpoint not priced"
    return ""


def _checkpoint_kv(config: dict[str, Any], hf: dict[str, Any] | None) -> str | None:
    """The KV dtype a checkpoint says (``kv_cache_quant_algo``, ``kv_cache_scheme``)."""
    quant = config.get("quantization_config")
    algo = (hf or {}).get("kv_cache_quant_algo")
    if algo is None and isinstance(quant, dict):
        algo = quant.get("kv_cache_quant_algo")
        scheme = quant.get("kv_cache_scheme")
        if algo is None and isinstance(scheme, dict):
            algo = f"{scheme.get('type', 'float')}{scheme.get('num_bits', '')}"
    if algo is None:
        return None
    return "fp8" if str(algo).upper() in ("FP8", "FLOAT8") else f"kv {algo}"


def weight_only_checkpoint(config: dict[str, Any]) -> tuple[str, str] | None:
    """``(linear layers, experts)`` as --precision values for a checkpoint whose own
    quantisation stores its routed experts in a 4-bit weight-only format the twin prices
    (``twin.precision``), None for any other. aiconfigurator reads the same two
    (aiconfigurator-core 0.12.0 ``sdk/models/helpers.py``
    ``_infer_quant_modes_from_raw_config``):

    - ``quant_method`` mxfp4 (gpt-oss): gemm bfloat16, moe ``w4a16_mxfp4``; Hugging
      Face's ``Mxfp4Config`` quantises the experts only (``modules_to_not_convert``:
      attention, router, embeddings, LM head);
    - compressed-tensors with 4-bit integer weights (Kimi-K2.5): ``int4_wo``
      (``sdk/utils.py`` ``parse_compressed_tensors_quant``), the linear layers bf16
      where ``ignore`` names the attention (``re:.*self_attn.*``). Only the twin's
      ``int4`` (group 32, symmetric, no activation quantisation) is read."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return None
    method = str(quant.get("quant_method", "")).lower()
    if method == "mxfp4":
        return "bf16", "mxfp4"
    if method != "compressed-tensors":
        return None
    groups = [g for g in (quant.get("config_groups") or {}).values() if isinstance(g, dict)]
    weights = [g.get("weights") or {} for g in groups]
    int4 = bool(groups) and all(
        w.get("num_bits") == 4
        and str(w.get("type", "")).lower() == "int"
        and w.get("group_size") == 32
        and w.get("symmetric")
        and not g.get("input_activations")
        for g, w in zip(groups, weights, strict=True)
    )
    attention_kept = any("self_attn" in str(p) for p in quant.get("ignore") or [])
    return ("bf16", "int4") if int4 and attention_kept else None


def _runs_weight_only(row: SiliconRow, gpu: str | None) -> bool:
    """Whether the row's experts' column names a 4-bit mode the GPU runs weight-only:
    ``int4_wo``, or nvfp4 on a GPU without FP4 tensor cores (aiconfigurator 0.12.0 runs
    nvfp4 as ``nvfp4_wo`` there: aiconfigurator-core ``sdk/models/helpers.py``
    ``resolve_nvfp4_for_system``, "non-Blackwell hardware has no native FP4 tensor
    cores")."""
    mode = row.moe_quant_mode or row.gemm_quant_mode or row.precision
    if mode == "int4_wo":
        return True
    from twin.hardware import GPUS

    spec = GPUS.get(gpu or "")
    return _WEIGHT_MODES.get(mode) == "nvfp4" and spec is not None and not spec.fp4_flops


def _precision(
    row: SiliconRow,
    config: dict[str, Any],
    own: bool,
    hf: dict[str, Any] | None,
    gpu: str | None = None,
) -> RowPrecision | str:
    """What the twin prices ``row`` at, or a reason starting "precision".

    The row's columns first (``gemm_quant_mode``, else ``precision``; ``moe_quant_mode``
    for the experts); with both empty, the checkpoint: its quantisation config when the
    cached config is the row's own (``own``) or its ``hf_quant_config.json``, else the
    repository name's suffix (``-FP8``, ``-NVFP4``), else its dtype (bfloat16 only). The
    KV cache: the checkpoint's ``kv_cache_quant_algo`` where it says, else
    ``_KV_OF_WEIGHTS`` (aiconfigurator's pairing).

    One exception to the columns: where they name a 4-bit mode ``gpu`` runs weight-only
    (``_runs_weight_only``) and the row's own checkpoint stores its experts in a 4-bit
    weight-only format (:func:`weight_only_checkpoint`), the checkpoint's formats are
    priced: that is what the engine loads and runs (gpt-oss-120b's rows say fp4 /
    nvfp4, the InferenceMAX collection's precision label, but its checkpoint is mxfp4,
    and aiconfigurator's InferenceMAX reader takes gpt-oss's quantisation from the
    checkpoint: aiconfigurator 0.12.0 ``sdk/config_adapter/inferencex.py``
    ``NATIVE_QUANT_MODELS``; Kimi-K2.5's int4 rows say ``int4_wo`` for the GEMMs too,
    but its checkpoint leaves attention and the shared and dense MLPs in bf16)."""
    native = weight_only_checkpoint(config) if own else None
    if native is not None and _runs_weight_only(row, gpu):
        kv = _checkpoint_kv(config, hf)
        if kv is not None and kv not in px.KV_DTYPES:
            return f"precision {kv} cache not priced"
        weights, experts = native
        why = (
            f"precision column {row.precision or '-'}, moe_quant_mode "
            f"{row.moe_quant_mode or '-'} run weight-only on {gpu}: the checkpoint's "
            f"{experts} experts, {weights} linear layers"
        )
        kv_why = "KV: the checkpoint's kv_cache_quant_algo" if kv else "KV: as the weights"
        said = kv is not None
        kv = kv or _KV_OF_WEIGHTS[weights]
        return RowPrecision(
            weights, kv, experts, f"{why}; {kv_why}", kv_from_checkpoint=said, native=True
        )
    reason = _unpriced_columns(row)
    if reason is not None:
        return reason
    gemm = row.gemm_quant_mode or row.precision
    moe = _WEIGHT_MODES[row.moe_quant_mode] if row.moe_quant_mode else None
    checkpoint = _checkpoint_quant(config, hf) if own or hf else ""
    if checkpoint and checkpoint.startswith("precision"):
        if not gemm:
            return checkpoint
        checkpoint = ""
    suffix = _NAME_SUFFIX.search(row.model_path.rsplit("/", 1)[-1])
    if gemm:
        weights = _WEIGHT_MODES[gemm]
        why = (
            f"precision column {row.precision or '-'}, gemm_quant_mode {row.gemm_quant_mode or '-'}"
        )
    elif checkpoint:
        weights, why = checkpoint, "the checkpoint's quantisation config"
    elif suffix is not None:
        weights = suffix.group(1).lower()
        why = f"precision columns empty; the name's -{suffix.group(1)} suffix"
    else:
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "")
        if dtype not in _CHECKPOINT_DTYPES:
            return f"precision unspecified (checkpoint dtype {dtype or 'not given'}) not priced"
        weights = _CHECKPOINT_DTYPES[dtype]
        why = f"precision column empty; checkpoint torch_dtype {dtype}"
    if weights not in _KV_OF_WEIGHTS:
        return f"precision {weights} not priced"
    kv = _checkpoint_kv(config, hf) if own or hf else None
    if kv is not None and kv not in px.KV_DTYPES:
        return f"precision {kv} cache not priced"
    if kv is None:
        kv, kv_why = _KV_OF_WEIGHTS[weights], "KV: aiconfigurator's pairing"
    else:
        kv_why = "KV: the checkpoint's kv_cache_quant_algo"
    return RowPrecision(
        weights,
        kv,
        moe if moe != weights else None,
        f"{why}; {kv_why}",
        kv is not None and kv_why.endswith("kv_cache_quant_algo"),
    )


# Engines whose rows run at their own defaults (no deployment written for them) and
# whose default KV cache dtype the checkpoint decides: SGLang 0.5.6.post2
# ``model_executor/model_runner.py`` ``ModelRunner.init_memory_pool`` (the same rule in
# 0.5.1.post1 to 0.5.10.post1): ``--kv-cache-dtype auto`` (``server_args.py``'s default)
# is fp8 only when the model's quantisation config says ``kv_cache_quant_algo`` FP8, else
# the model's dtype, so ``--quantization fp8`` on a bf16 checkpoint keeps a bf16 cache.
# aiconfigurator's fp8 pairing is what its generated deployment writes
# (``generator/rule_plugin/benchmark/sglang.rule``: ``kv_cache_dtype = fp8_e4m3``), which
# these rows did not run with (``DEPLOYED_ENGINES``).
ENGINE_DEFAULT_KV = frozenset({"sglang"})


def engine_default_kv(
    precision: RowPrecision, engine: str, limits: dict[str, Any], config: dict[str, Any]
) -> RowPrecision:
    """``precision`` with the KV cache the engine picks at its defaults (``ENGINE_DEFAULT_KV``)
    where the row runs at them (``limits`` empty) and the checkpoint does not say."""
    if engine not in ENGINE_DEFAULT_KV or limits or precision.kv_from_checkpoint:
        return precision
    dtype = _CHECKPOINT_DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or ""))
    if dtype is None or dtype == precision.kv:
        return precision
    why = precision.why.replace(
        "KV: aiconfigurator's pairing", f"KV: {engine}'s --kv-cache-dtype auto (the model's dtype)"
    )
    return dataclasses.replace(precision, kv=dtype, why=why)


@cache
def _profile(gpu: str, engine: str) -> Profile | None:
    """``gpu``'s shipped profile for engine mode ``engine``; None if none."""
    from twin.costmodel.profile_store import load_profile
    from twin.engine.modes import get_mode

    try:
        return load_profile(gpu, get_mode(engine).kernels)
    except (TwinError, KeyError):
        return None


def _unpriceable(profile: Profile, precision: RowPrecision, model: ModelSpec) -> str | None:
    """Why ``profile`` cannot price ``model`` at ``precision`` (None if it can): "precision
    nvfp4 not priced by profile h100-trtllm (it prices bf16, fp8, fp8-block; H100 SXM5 has
    no FP4 tensor cores)"."""
    from twin.costmodel import precision_kernels as pk

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
    if not pool and row.system in INFERENCEMAX_DISAGG_SYSTEMS and harness_of(row) is INFERENCEMAX:
        return REASON_INFERENCEMAX_DISAGG
    if (row.pp or 1) > 1:
        return REASON_PP
    unpriced = _unpriced_columns(row)
    if unpriced is not None and not _runs_weight_only(row, system_gpus().get(row.system)):
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
    if gpus > 1:
        from twin.costmodel.formulas import allreduce_kernel

        if allreduce_kernel(gpus) not in profile.kernels:
            at = f"tp_size {tp}" + (f" x attention_dp_size {dp}" if dp > 1 else "")
            return f"{at}: no measured all-reduce at {gpus} GPUs in the {gpu} profile"
    folder = configs if configs is not None else default_configs()
    found = find_config(folder, row.model_path)
    if found is None:
        return "no cached model config (<org>--<name>_config.json)"
    hf_id, path = found
    try:
        config = _read_config(str(path))
    except (OSError, ValueError):
        return "model config not readable"
    model_type = str(config.get("model_type", ""))
    own = hf_id == row.model_path
    precision = _precision(row, config, own, hf_quant_config(folder, row.model_path), gpu)
    if isinstance(precision, str):
        return precision
    try:
        base = _load_model(str(path), hf_id)
    except TwinError as err:
        preset = _preset(row.model_path)  # the twin's own shapes of the measured set
        if preset is not None:
            base = preset
        elif "unsupported model_type" in str(err):
            return f"model_type {model_type} not supported by twin.hf_config"
        else:
            return f"model config not importable (model_type {model_type})"
    if base.n_heads and base.n_heads % tp:
        # vLLM, SGLang and TensorRT-LLM shard attention heads evenly across TP ranks.
        return f"tp_size {tp} does not divide the {base.n_heads} attention heads"
    ep = row.moe_ep or 1
    if ep > 1 or dp > 1:  # expert (and attention-data) parallelism (twin.parallel.Layout)
        if ep > 1 and (not base.n_moe_layers or (row.moe_tp or 1) * ep != gpus):
            return REASON_EP
        from twin.parallel import Layout, check_layout

        try:
            check_layout(base, Layout(gpus, ep, dp))
        except TwinError as err:
            return str(err)
    limits = deployment(row, engine, deploy)
    if harness_of(row) is not INFERENCEMAX:  # its scripts' KV flags are not read
        precision = engine_default_kv(precision, engine, limits, config)
    unpriceable = _unpriceable(profile, precision, base)
    if unpriceable is not None:
        return unpriceable
    model = precision_model(base, precision)
    workers = agg_workers(row)
    c = row.concurrency // workers
    harness = harness_of(row)
    spec = inferencemax_speculation(row, model) if deploy == "benchmark" else None
    if spec is not None:
        if (row.attention_dp or 1) > 1:  # the engine refuses the pair (twin.engine.dp_attention)
            return REASON_DP_SPECULATIVE
        limits = {**limits, "speculative": spec}
    return RowPlan(
        row=row,
        model_fields=model.to_dict(derived=False),
        model_id=hf_id,
        config_path=str(path),
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
        requests=harness.measured_rounds * c,
        deployment=limits,
        ep=ep,
        workers=workers,
        range_ratio=harness.range_ratio,
        dp=dp,
        native_quant=precision.native,
    )


def _preset(model_path: str) -> ModelSpec | None:
    """The twin's preset of a measured-set model whose config ``twin.hf_config`` cannot
    import (DeepSeek-V3/R1, Kimi-K2.5: ``twin.validate.coverage.PRESET_OF_MODEL_PATH``)."""
    from twin.presets import get_model
    from twin.validate.coverage import PRESET_OF_MODEL_PATH

    name = PRESET_OF_MODEL_PATH.get(model_path)
    return get_model(name) if name is not None else None


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


def plan_rows(
    rows: Iterable[SiliconRow], configs: Path | None = None, deploy: str = "benchmark"
) -> tuple[list[RowPlan], Counter[str]]:
    """The expressible rows' plans, and how many rows each reason left out."""
    plans: list[RowPlan] = []
    reasons: Counter[str] = Counter()
    for row in rows:
        plan = plan_row(row, configs, deploy)
        if isinstance(plan, str):
            reasons[plan] += 1
        else:
            plans.append(plan)
    return plans, reasons


# ------------------------------------------------------------------ running a row
def write_workload(
    path: Path, isl: int, osl: int, requests: int, seed: int, range_ratio: float = 1.0
) -> Path:
    """``requests`` single-turn sessions of random prompt tokens (a closed-loop client
    starts each when its previous one completes): ``isl`` prompt tokens and exactly
    ``osl`` output tokens, or, with ``range_ratio < 1``, lengths drawn uniformly from
    ``[int(isl x range_ratio), isl]`` and ``[int(osl x range_ratio), osl]`` as vLLM's
    ``benchmark_serving.py`` random dataset draws them."""
    from twin.workloads.schema import WorkloadRow
    from twin.workloads.writer import WorkloadWriter

    rng = np.random.default_rng(seed)
    meta = {"generator": "silicon", "isl": isl, "osl": osl, "requests": requests, "seed": seed}
    if range_ratio < 1.0:
        meta["range_ratio"] = range_ratio
        isls = rng.integers(int(isl * range_ratio), isl + 1, requests)
        osls = rng.integers(max(int(osl * range_ratio), 1), osl + 1, requests)
    else:
        isls, osls = np.full(requests, isl), np.full(requests, osl)
    with WorkloadWriter(path, meta) as w:
        for i in range(requests):
            prompt = rng.integers(0, TOKEN_RANGE, int(isls[i]), dtype=np.int32)
            w.write(WorkloadRow(i, 0, None, None, prompt, False, None, int(osls[i])))
    return path


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def _median(values: Sequence[float]) -> float:
    return float(np.median(values)) if len(values) else math.nan


def predict(plan: RowPlan) -> dict[str, Any]:
    """Run ``plan`` in the twin; the means (and medians) over the measured requests, in ms.

    A run the twin refuses (a TwinError: the weights do not fit, say) returns its
    message under ``twin_error``.
    """
    from twin.engine.modes import measured_mode
    from twin.engine.run import build_run
    from twin.metrics import RequestRecord

    row = plan.row
    assert row.isl is not None and row.osl is not None
    records: list[RequestRecord] = []
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory(prefix="twin-silicon-") as tmp:
            path = write_workload(
                Path(tmp) / "workload.parquet",
                row.isl,
                row.osl,
                plan.requests,
                plan.seed,
                plan.range_ratio,
            )
            run = build_run(
                path,
                model=plan.model,
                gpu=plan.gpu,
                # The modelled release standing for the measured one (vLLM 0.11-0.19 ->
                # 0.19.0, SGLang 0.5.1-0.5.10.post1 -> 0.5.10.post1): its defaults.
                engine=measured_mode(plan.engine, row.backend_version),
                # The kernel tables of the row's own release (twin.costmodel.table_release);
                # a release that is no version number: the modelled one's above.
                kernel_tables=kernel_tables(row.backend_version),
                cache_gb="auto",
                tp=plan.tp,
                ep=plan.ep,
                concurrency=plan.concurrency,
                dp_attention=plan.dp,
                **plan.deployment,
            )
            summary = run.simulate(on_record=records.append)
    except TwinError as err:
        return {"twin_error": str(err).splitlines()[0]}
    wall = time.perf_counter() - started
    measured = [r for r in records if r.session_id >= plan.warmup]
    rejected = sum(r.rejected for r in measured)
    if rejected or not measured:
        return {"twin_error": f"{rejected} request(s) larger than the replica's KV pool"}
    ttft = [r.ttft_s * 1e3 for r in measured]
    tpot = [r.tpot_s * 1e3 for r in measured if r.output_tokens >= 2]
    queue = [r.queue_s * 1e3 for r in measured]
    pool = (summary.cluster.replicas or ({},))[0].get("pool", {})
    return {
        "twin_ttft_ms": _mean(ttft),
        "twin_tpot_ms": _mean(tpot),
        "twin_ttft_p50_ms": _median(ttft),
        "twin_tpot_p50_ms": _median(tpot),
        "twin_queue_ms": _mean(queue),
        "twin_preemptions": int(sum(r.preemptions for r in measured)),
        "twin_peak_running": pool.get("peak_running_requests"),
        "twin_pool_gb": (pool.get("bytes") or 0) / 1e9,
        "twin_steady_state": None if summary.steady_state is None else summary.steady_state.verdict,
        "twin_sim_s": float(summary.cluster.sim_end_s or math.nan),
        "twin_wall_s": wall,
    }


def kernel_tables(version: str) -> str:
    """``build_run``'s ``kernel_tables`` for a row run at engine ``version``: that release
    when it is a version number, else "" (``--engine NAME==VERSION``'s release then)."""
    from twin.costmodel.table_release import version_key

    return version if version_key(version) is not None else ""


AIC_NOT_INSTALLED = "aiconfigurator not installed"


def aiconfigurator_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("aiconfigurator") is not None


def aiconfigurator_estimate(plan: RowPlan) -> dict[str, Any]:
    """aiconfigurator's own estimate for the row, called as its accuracy job calls it
    (``ai-dynamo/aiconfigurator``, tools/accuracy_regression_testing/
    predict_silicon_sample.py: ``cli_estimate`` with the row's model, system, mode,
    backend, ISL/OSL, quantisation modes, batch size and parallel sizes). Two
    differences, both forced offline: the database is the package's current one for
    the backend (the rows' older versions are not in the package; the job's own
    fallback when a version is missing), and the model is the cached config the twin
    uses (``model_id``), since a path the package does not cache is downloaded.
    ``{"aic_error": ...}`` when it fails or is not installed."""
    if not aiconfigurator_available():
        return {"aic_error": AIC_NOT_INSTALLED}
    row = plan.row
    args = cli_estimate_args(plan, "agg")
    args["batch_size"] = row.batch_size or plan.concurrency
    for name, value in (
        ("tp_size", row.tp),
        ("pp_size", row.pp),
        ("attention_dp_size", row.attention_dp),
        ("moe_tp_size", row.moe_tp),
        ("moe_ep_size", row.moe_ep),
    ):
        if value:
            args[name] = value
    return run_cli_estimate(args)


def cli_estimate_args(plan: RowPlan, mode: str) -> dict[str, Any]:
    """The arguments of ``cli_estimate`` every row shares: model, system, ``mode``,
    backend (its current database), lengths and quantisation modes: the row's columns,
    or none where the twin read the checkpoint's (``RowPlan.native_quant``), so that
    aiconfigurator infers them from the checkpoint as well (called with the columns, its
    0.12.0 release runs those rows' nvfp4 / int4_wo as weight-only GEMMs it has no table
    for on Hopper and fails with PerfDataNotAvailableError)."""
    row = plan.row
    columns = not getattr(plan, "native_quant", False)
    return {
        "model_path": plan.model_id,
        "system_name": row.system,
        "mode": mode,
        "backend_name": row.backend,
        "backend_version": None,
        "isl": row.isl,
        "osl": row.osl,
        "gemm_quant_mode": (row.gemm_quant_mode or None) if columns else None,
        "moe_quant_mode": (row.moe_quant_mode or None) if columns else None,
    }


def run_cli_estimate(args: dict[str, Any]) -> dict[str, Any]:
    """aiconfigurator's ``cli_estimate(**args)`` (its nightly accuracy job's call), quiet:
    ``{"aic_ttft_ms", "aic_tpot_ms"}``, or ``{"aic_error": ...}`` when it fails."""
    logging.getLogger("aiconfigurator").setLevel(logging.ERROR)
    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    try:
        from aiconfigurator.cli.api import cli_estimate

        with contextlib.redirect_stdout(io.StringIO()):
            result = cli_estimate(**args)
        ttft, tpot = float(result.ttft), float(result.tpot)
    except Exception as err:  # its failures are data here, not our errors
        text = (str(err).splitlines() or [""])[0][:200]
        return {"aic_error": f"{type(err).__name__}: {text}"}
    return {"aic_ttft_ms": ttft, "aic_tpot_ms": tpot}


def _deployment_text(settings: dict[str, Any]) -> str:
    """``max_num_batched_tokens=2548 max_num_seqs=8``: the limits a row ran with."""
    flat = {**settings.get("sets", {}), **{k: v for k, v in settings.items() if k != "sets"}}
    spec = flat.pop("speculative", None)
    if spec:  # method, drafts a step and the expected tokens a step
        flat["speculative"] = (
            f"{spec['method']}:{spec['num_speculative_tokens']}@{spec['acceptance_length']:.2f}"
        )
    pairs = [  # a disaggregated pool's own flags as decode_engine_flags.max_num_seqs=64
        (f"{k}.{name}", value)
        for k, v in flat.items()
        if isinstance(v, dict)
        for name, value in v.items()
    ]
    return " ".join(
        [f"{k}={v}" for k, v in flat.items() if not isinstance(v, dict)]
        + [f"{k}={v}" for k, v in pairs]
    )


def score_row(plan: RowPlan, aiconfigurator: bool = False) -> dict[str, Any]:
    """One result row: the measurement, the twin's prediction and (optionally)
    aiconfigurator's, with the absolute percentage errors. A process pool's task."""
    row = plan.row
    out: dict[str, Any] = {
        "id": row.id,
        "split": row.split,
        "group": row.group,
        "model_path": row.model_path,
        "model_config": plan.model_id,
        "system": row.system,
        "backend": row.backend,
        "backend_version": row.backend_version,
        "precision": row.precision_label,
        "priced": plan.priced,
        "priced_as": plan.precision,
        "isl": row.isl,
        "osl": row.osl,
        "concurrency": plan.concurrency,
        "workers": plan.workers,
        "harness": harness_of(row).name,
        "tp": plan.tp,
        "gpu": plan.gpu,
        "engine": plan.engine,
        "requests": plan.requests,
        "warmup": plan.warmup,
        "deployment": _deployment_text(plan.deployment),
        "silicon_ttft_ms": row.ttft_ms,
        "silicon_tpot_ms": row.tpot_ms,
    }
    out.update(predict(plan))
    if aiconfigurator:
        out.update(aiconfigurator_estimate(plan))
    for who in ("twin", "aic"):
        for metric in ("ttft", "tpot"):
            pred = out.get(f"{who}_{metric}_ms")
            actual = out[f"silicon_{metric}_ms"]
            out[f"{who}_{metric}_ape"] = ape(pred, actual) if pred is not None else None
    return out


# ------------------------------------------------------------------ scoring
def ape(predicted: float, actual: float) -> float:
    """Absolute percentage error, % (aiconfigurator's ``_ape``: |pred - actual| / actual)."""
    return abs(predicted - actual) / actual * 100.0


def mape(errors: Sequence[float]) -> float:
    """Mean of absolute percentage errors (%)."""
    return statistics.fmean(errors) if errors else math.nan


def mdape(errors: Sequence[float]) -> float:
    """Median of absolute percentage errors (%)."""
    return statistics.median(errors) if errors else math.nan


def metrics(results: Sequence[dict[str, Any]], who: str = "twin") -> dict[str, Any] | None:
    """MAPE and MdAPE of TTFT and TPOT of ``who``'s predictions (rows that have both)."""
    scored = [
        r
        for r in results
        if r.get(f"{who}_ttft_ape") is not None and r.get(f"{who}_tpot_ape") is not None
    ]
    if not scored:
        return None
    out: dict[str, Any] = {"n": len(scored)}
    for metric in ("ttft", "tpot"):
        errors = [float(r[f"{who}_{metric}_ape"]) for r in scored]
        out[f"{metric}_mape"] = mape(errors)
        out[f"{metric}_mdape"] = mdape(errors)
        # Which way the predictions are off: the median of predicted / measured.
        ratios = [r[f"{who}_{metric}_ms"] / r[f"silicon_{metric}_ms"] for r in scored]
        out[f"{metric}_median_ratio"] = float(np.median(ratios))
    return out


def _block(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The twin's metrics; with aiconfigurator's predictions, its metrics and the twin's
    on the same rows (like for like)."""
    out: dict[str, Any] = {"rows": len(results), "twin": metrics(results, "twin")}
    with_aic = [r for r in results if r.get("aic_ttft_ape") is not None]
    if with_aic:
        out["aiconfigurator"] = metrics(with_aic, "aic")
        out["twin_on_aiconfigurator_rows"] = metrics(with_aic, "twin")
    return out


def _grouped(results: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    keys = sorted({str(r[key]) for r in results})
    return {k: _block([r for r in results if str(r[key]) == k]) for k in keys}


def precision_key(result: dict[str, Any]) -> str:
    """The per-precision group of a result: ``vllm | fp8, fp8 KV``."""
    return f"{result['backend']} | {result.get('priced') or 'bf16, bf16 KV'}"


def summarize(
    results: Sequence[dict[str, Any]],
    reasons: Counter[str] | dict[str, int],
    rows_read: int,
) -> dict[str, Any]:
    """The summary: row counts, rows not expressed by reason, runs the twin refused, and
    per split (fit, held out, all) the overall, per-backend and per-group metrics."""
    predicted = [r for r in results if r.get("twin_ttft_ms") is not None]
    failed = Counter(str(r["twin_error"]) for r in results if r.get("twin_error"))
    aic_failed = Counter(str(r["aic_error"]) for r in results if r.get("aic_error"))
    splits: dict[str, Any] = {}
    for split in (*SPLITS, "all"):
        part = [r for r in predicted if split == "all" or r["split"] == split]
        by_precision = [{**r, "precision_key": precision_key(r)} for r in part]
        splits[split] = {
            "overall": _block(part),
            "by_backend": _grouped(part, "backend"),
            "by_precision": _grouped(by_precision, "precision_key"),
            "by_group": _grouped(part, "group"),
        }
    return {
        "rows": {
            "read": rows_read,
            "not_expressed": sum(reasons.values()),
            "expressed": len(results),
            "predicted": len(predicted),
            "twin_refused": sum(failed.values()),
        },
        "not_expressed": dict(sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))),
        "twin_refused": dict(failed.most_common()),
        "aiconfigurator_failed": dict(aic_failed.most_common()),
        "splits": splits,
    }


RESULT_COLUMNS = (
    "id",
    "split",
    "group",
    "model_path",
    "model_config",
    "system",
    "backend",
    "backend_version",
    "precision",
    "priced",
    "priced_as",
    "isl",
    "osl",
    "concurrency",
    "workers",
    "harness",
    "tp",
    "gpu",
    "engine",
    "requests",
    "warmup",
    "deployment",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
    "twin_ttft_ms",
    "twin_tpot_ms",
    "twin_ttft_ape",
    "twin_tpot_ape",
    "twin_ttft_p50_ms",
    "twin_tpot_p50_ms",
    "twin_queue_ms",
    "twin_preemptions",
    "twin_peak_running",
    "twin_pool_gb",
    "twin_steady_state",
    "twin_sim_s",
    "twin_wall_s",
    "twin_error",
    "aic_ttft_ms",
    "aic_tpot_ms",
    "aic_ttft_ape",
    "aic_tpot_ape",
    "aic_error",
)


def write_outputs(
    out_dir: str | Path, results: Sequence[dict[str, Any]], summary: dict[str, Any]
) -> tuple[Path, Path]:
    """``predictions.csv`` (one row per expressed CSV row) and ``summary.json`` under
    ``out_dir``, each written atomically."""
    from twin.atomic import atomic_path
    from twin.metrics import to_json

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table, summary_path = out / "predictions.csv", out / "summary.json"
    with atomic_path(table) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=RESULT_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in results:
            writer.writerow({k: _cell(r.get(k)) for k in RESULT_COLUMNS})
    with atomic_path(summary_path) as tmp:
        tmp.write_text(to_json(summary))
    return table, summary_path


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6g}"
    return "" if value is None else value


__all__ = [
    "AIPERF",
    "FIT",
    "HELD_OUT",
    "INFERENCEMAX",
    "MEASURED_ROUNDS",
    "WARMUP_ROUNDS",
    "Harness",
    "RowPlan",
    "SiliconRow",
    "aiconfigurator_estimate",
    "ape",
    "harness_of",
    "inferencemax_deployment",
    "mape",
    "mdape",
    "metrics",
    "plan_row",
    "plan_rows",
    "predict",
    "read_rows",
    "score_row",
    "select",
    "split_of",
    "summarize",
    "write_outputs",
    "write_workload",
]
