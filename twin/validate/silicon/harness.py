"""How each collection measured its rows (the benchmark client, requests and warm-up) and
the server limits each row ran with (aiconfigurator's generated deployments,
InferenceMAX's scripts)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twin.errors import TwinError
from twin.model import ModelSpec

if TYPE_CHECKING:
    from collections.abc import Iterable

    from twin.validate.silicon.rows import SiliconRow


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
# ``qwen3.5-397b-gap-analysis.csv`` (76 SGLang rows of Qwen3.5-397B on B200 and H200) is
# InferenceMAX's Qwen3.5 measurements again: 75 of its 76 rows equal a row of the
# 2026-03-25.csv / 2026-04-06.csv / db-dump collections in TTFT and TPOT rounded to 0.1 ms,
# ISL, OSL, concurrency and system (its values carry two decimals, theirs the full float),
# and its layouts and clients are those of InferenceMAX's qwen3.5 configurations.
INFERENCEMAX_SOURCES = frozenset(
    {"2026-03-25.csv", "2026-04-06.csv", "qwen3.5-397b-gap-analysis.csv"}
)
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
# TensorRT-LLM joined vLLM in issue 31's "TensorRT-LLM's overlap scheduler" step
# (docs/decisions.md): with the overlap scheduler's admission lag modelled, the fit rows
# of the collection's TensorRT-LLM 1.0.0rc3 H100 groups (Llama-3.1-8B, Qwen3-32B,
# Qwen3-235B) score better under the generated limits than at the engine's defaults, TTFT
# and TPOT alike (the TPOT with the limits alone too: one or two whole contexts a step).
DEPLOYED_ENGINES = frozenset({"vllm", "trtllm"})
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
# whole contexts (chunked prefill left off); the 1.1.0rc2.post2 rows' scripts had no 8192
# floor (``INFERENCEMAX_TRTLLM_NO_FLOOR``, below). Other models and SGLang: the engine's
# defaults.
INFERENCEMAX_VLLM = {"max_num_batched_tokens": "8192", "max_num_seqs": "512"}
INFERENCEMAX_TRTLLM_TOKENS = {"Llama-3.1-70B": 16384, "gpt-oss-120b": 20000}
# The db-dump names its DeepSeek runs by their architecture, ``deepseek-ai/DeepSeek-V3``:
# InferenceMAX runs DeepSeek-R1-0528 only (the ``dsr1-*`` configurations), and those rows
# share their measurements with the R1 rows of 2026-03-25.csv (config_id 87's, for one).
INFERENCEMAX_DEEPSEEK = ("deepseek-r1", "deepseek-v3")


def model_named(row: SiliconRow, names: Iterable[str]) -> str | None:
    """The first of ``names`` that ``row``'s ``model_path`` contains, case-insensitively
    (a script's or rule's model, matched by name); ``None``: none of them."""
    path = row.model_path.lower()
    return next((name for name in names if name.lower() in path), None)


def inferencemax_deepseek(row: SiliconRow) -> bool:
    """Whether ``row`` is one of InferenceMAX's DeepSeek-R1 runs (under either name)."""
    return model_named(row, INFERENCEMAX_DEEPSEEK) is not None


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
# Two more eras of the same configurations:
# - B300, image lmsysorg/sglang:v0.5.10.post1-cu130 (``nvidia-master.yaml`` at e8924a6,
#   2026-04-18; scripts added 2026-04-17, 9ebeafb and 5b302f1): ``dsr1_fp4_b300.sh`` is
#   the B200 fp4 recipe as is ("reuses the existing DSR1 FP4 B200 SGLang recipe": 256
#   requests, 0.85, 16384, the same polling, ``--enable-symm-mem``), run at tp 4 and 8 over
#   the same clients; ``dsr1_fp8_b300.sh`` the B200 fp8 one (tp 8: 128, 0.82, 32768; tp 4
#   at 8k/1k: 32, 0.95, 8192), ``dsr1-fp8-b300-sglang`` at tp 8 for 4-64 clients at 1k/1k
#   and 4 at 8k/1k, tp 4 for 4-32 at 8k/1k. Its -mtp configuration (tp 8, 4-512 clients at
#   1k/1k and 8k/1k, ``dsr1_fp8_b300_mtp.sh``) shares image and layout: rows both cover
#   run plain, rows only it covers run SGLang's defaults (its drafts are not read here).
# - Rows without a release (:func:`inferencemax_sglang_unnamed`): the configurations'
#   image from 2025-11-10 (d8fe8f73e) was lmsysorg/sglang:v0.5.5-cu129-amd64, with
#   ``benchmarks/dsr1_fp4_b200_docker.sh`` (256 requests, 0.85, 16384, the same polling,
#   ``--enable-symm-mem``; the same limits before, at e06929c) over the fp4 configuration
#   of today, and ``benchmarks/dsr1_fp8_b200_docker.sh`` (128, 0.82, 32768 chunk and
#   prefill tokens, the same polling; at 189ae51, 2025-11-18) over tp 8 at 4-64 clients
#   for all three lengths (no tp 4 and no -mtp configuration yet).
INFERENCEMAX_SGLANG_VERSION = "0.5.9"
INFERENCEMAX_SGLANG_B300 = "0.5.10.post1"
# The day InferenceMAX's configurations first name an SGLang 0.5.10 image (6cb8291,
# 2026-04-14: ``git log -S sglang:v0.5.10 -- .github/configs/nvidia-master.yaml``).
# The CSV's SGLang rows without a ``backend_version`` (DeepSeek-R1 on B200, measured
# 2025-11-02 to 2025-12-05 by their ``measured=``; no ``image=``) ran before it.
INFERENCEMAX_FIRST_SGLANG_0510 = "2026-04-14"
_MEASURED = re.compile(r"measured=(\d{4}-\d{2}-\d{2})")


def measured_on(row: SiliconRow) -> str | None:
    """The day ``row`` was measured (``measured=`` of its source, ISO), if it says."""
    found = _MEASURED.search(row.source)
    return found.group(1) if found else None


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
    if row.backend != "vllm" or row.system != "h100_sxm" or harness_of(row) is not INFERENCEMAX:
        return False
    if model_named(row, ("gpt-oss",)) is None:
        return False
    day = measured_on(row)
    first, last = INFERENCEMAX_CLIENT_CAP_DAYS
    return day is not None and first <= day <= last


def inferencemax_sglang_unnamed(row: SiliconRow) -> bool:
    """Whether ``row`` is an InferenceMAX SGLang row that names no release and was
    measured before InferenceMAX first ran an SGLang 0.5.10 image (so it ran an earlier
    release: ``INFERENCEMAX_FIRST_SGLANG_0510``)."""
    if row.backend != "sglang" or row.backend_version or harness_of(row) is not INFERENCEMAX:
        return False
    day = measured_on(row)
    return day is not None and day < INFERENCEMAX_FIRST_SGLANG_0510


# Flags of InferenceMAX's DeepSeek SGLang scripts under which SGLang 0.5.10.post1 turns
# its piecewise prefill graphs off (``server_args.py``): ``--enable-symm-mem`` (every fp4
# script: ``dsr1_fp4_b200.sh`` at 12ba0ae and e8924a6, ``dsr1_fp4_b300.sh`` at e8924a6;
# ``_handle_piecewise_cuda_graph`` condition 15, "torch.cuda.use_mem_pool is untraceable
# by dynamo") and ``--moe-runner-backend flashinfer_trtllm`` (every B200 and B300 script,
# fp4 and fp8, plain and -mtp, at both commits; the H200 one passes no runner;
# ``_handle_moe_kernel_config``: "bypassed topk is incompatible with torch.compile", for
# every architecture but gpt-oss's). By GPU: the scripts that pass at least one of them.
INFERENCEMAX_NO_PIECEWISE_SYSTEMS = frozenset({"b200_sxm", "b300_sxm"})


def inferencemax_no_piecewise(row: SiliconRow) -> bool:
    """Whether ``row``'s InferenceMAX SGLang server passed a flag that turns SGLang's
    piecewise prefill graphs off (above)."""
    return (
        row.backend == "sglang"
        and harness_of(row) is INFERENCEMAX
        and inferencemax_deepseek(row)
        and row.system in INFERENCEMAX_NO_PIECEWISE_SYSTEMS
    )


_SGLANG_FLAGS = (
    "max_running_requests",
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "scheduler_recv_interval",
)
# How often MTP drafts are accepted on InferenceMAX's rows, one rule for every engine: the
# first draft with the rate ``INFERENCEMAX_MTP_ACCEPTANCE[0]``, each later draft, given the
# ones before it, with ``[1]``; passed as the unconditional per-position rates (the share of
# steps whose first ``i`` drafts are all accepted, ``--set speculative_acceptance=r1,r2,..``,
# ``twin.engine.speculative.length_from_rates``) by :func:`inferencemax_mtp_acceptance`.
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
#   default, ``twin.engine.speculative.Mtp``); the outputs are the model's greedy answer to
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


_SGLANG_MTP = {
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": "2",
    "speculative_eagle_topk": "1",
    "speculative_num_draft_tokens": "3",
    "speculative_acceptance": inferencemax_mtp_acceptance(2),
}


# InferenceMAX's SGLang servers for Qwen3.5-397B-A17B (its ``qwen3.5-*-sglang``
# configurations in ``.github/configs/nvidia-master.yaml`` and their scripts
# ``benchmarks/single_node/qwen3.5_<precision>_<gpu>[_mtp].sh``, read at the commits of
# the three collections: 12ba0ae (2026-03-25), 51e31df (2026-04-06) and e8924a6
# (2026-04-18, the db-dump rows' measurement date); the flags are the same at all three
# where a script exists). Every script runs ``--disable-radix-cache`` (so SGLang keeps its
# overlap scheduler: a hybrid model turns it off only with the radix cache on,
# ``server_args.py`` ``_handle_mamba_radix_cache``, 0.5.9 and 0.5.10.post1), and:
# - B200 fp8 (image v0.5.9) and bf16 (nightly-dev-20260216), ``qwen3.5_{fp8,bf16}_b200.sh``:
#   ``--max-running-requests 128 --mem-fraction-static 0.82 --chunked-prefill-size 32768
#   --max-prefill-tokens 32768``, the scheduler polling for requests every 10 iterations
#   below 16 clients, else 30 (``--scheduler-recv-interval``); B200 fp4 (nightly-dev-20260402,
#   ``qwen3.5_fp4_b200.sh``) the same at 0.85; B300 bf16 and fp4 (v0.5.10.post1) the same
#   at 0.82 and 0.8;
# - B200 fp8 at tp 4 without expert parallelism is the ``-mtp`` configuration (the plain one
#   runs tp 8 and tp 4 with ep 4; the -mtp one tp 4 ep 1 up to 256 clients),
#   ``qwen3.5_fp8_b200_mtp.sh``: ``--max-running-requests $CONC --mem-fraction-static 0.8``,
#   the same chunk and polling, and EAGLE over the model's own MTP layer ("MTP
#   (Multi-Token Prediction) Config - EAGLE speculative decoding"; SGLang's NEXTN) with 3
#   steps, top-k 1 and 4 draft tokens;
# - H200 fp8 (v0.5.9), ``qwen3.5_fp8_h200.sh``: ``--max-running-requests 128
#   --chunked-prefill-size 16384 --mem-fraction-static 0.8``, polling every iteration;
# - B300 fp8 (v0.5.10.post1), ``qwen3.5_fp8_b300.sh``: ``--max-running-requests $CONC
#   --chunked-prefill-size 16384 --max-prefill-tokens 16384 --mem-fraction-static 0.8
#   --scheduler-recv-interval 10``.
# Where a plain and an -mtp configuration share image and layout (H200 fp8, B200 bf16 and
# fp4, B300 fp8 from 2026-04-18) the rows cannot be told apart and run plain, as for
# DeepSeek. The B300 v0.5.9 rows of 2026-03-25.csv have no configuration at 12ba0ae: SGLang's
# defaults.
_QWEN35_FLAGS = ("disable_radix_cache", *_SGLANG_FLAGS)
_QWEN35_MTP = {
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": "3",
    "speculative_eagle_topk": "1",
    "speculative_num_draft_tokens": "4",
    "speculative_acceptance": inferencemax_mtp_acceptance(3),
}
# (system, precision, release) -> (max_running_requests, mem_fraction_static,
# chunked_prefill_size, max_prefill_tokens, scheduler_recv_interval); "c": the clients,
# "poll": 10 below 16 clients else 30, None: not given.
# The configuration whose tp 4 / ep 1 rows are the -mtp script (_QWEN35_MTP_SCRIPT).
_QWEN35_MTP_KEY = ("b200_sxm", "fp8", "0.5.9")
_QWEN35_SCRIPTS: dict[tuple[str, str, str], tuple[str, str, str, str | None, str | None]] = {
    _QWEN35_MTP_KEY: ("128", "0.82", "32768", "32768", "poll"),
    ("b200_sxm", "bf16", "nightly-dev"): ("128", "0.82", "32768", "32768", "poll"),
    ("b200_sxm", "fp4", "nightly-dev-20260402"): ("128", "0.85", "32768", "32768", "poll"),
    ("h200_sxm", "fp8", "0.5.9"): ("128", "0.8", "16384", None, None),
    ("b300_sxm", "bf16", "0.5.10.post1"): ("128", "0.82", "32768", "32768", "poll"),
    ("b300_sxm", "fp4", "0.5.10.post1"): ("128", "0.8", "32768", "32768", "poll"),
    ("b300_sxm", "fp8", "0.5.10.post1"): ("c", "0.8", "16384", "16384", "10"),
}
_QWEN35_MTP_SCRIPT = ("c", "0.8", "32768", "32768", "poll")


def inferencemax_qwen35(row: SiliconRow) -> dict[str, str]:
    """The ``--set`` flags of InferenceMAX's SGLang server for a Qwen3.5-397B row (above);
    empty where no configuration covers it."""
    if model_named(row, ("qwen3.5-397b",)) is None:
        return {}
    release = row.backend_version
    if release.startswith("nightly-dev"):  # the image's date names the configuration
        release = "nightly-dev-20260402" if "20260402" in release else "nightly-dev"
    flags = _QWEN35_SCRIPTS.get((row.system, row.precision, release))
    if flags is None:
        return {}
    conc = row.concurrency or 0
    mtp = (row.system, row.precision, release) == _QWEN35_MTP_KEY and (
        (row.tp or 1, row.moe_ep or 1) == (4, 1)
    )
    if mtp:
        flags = _QWEN35_MTP_SCRIPT
    given = ("true", *flags)
    poll = "30" if conc >= 16 else "10"
    out: dict[str, str] = {}
    for name, value in zip(_QWEN35_FLAGS, given, strict=True):
        if value is not None:
            out[name] = {"c": str(conc), "poll": poll}.get(value, value)
    return {**out, **(_QWEN35_MTP if mtp else {})}


def inferencemax_sglang(row: SiliconRow) -> dict[str, str]:
    """The ``--set`` flags of InferenceMAX's SGLang server for ``row`` (above); empty
    where no one configuration of that image covers it."""
    qwen35 = inferencemax_qwen35(row)
    if qwen35:
        return qwen35
    if not inferencemax_deepseek(row):
        return {}
    b300 = row.system == "b300_sxm" and row.backend_version == INFERENCEMAX_SGLANG_B300
    unnamed = row.system == "b200_sxm" and inferencemax_sglang_unnamed(row)
    if row.backend_version != INFERENCEMAX_SGLANG_VERSION and not (b300 or unnamed):
        return {}
    if row.system == "b300_sxm" and not b300:  # no B300 configuration of 0.5.9
        return {}
    conc, tp, lengths = row.concurrency or 0, row.tp or 1, (row.isl, row.osl)
    poll = "30" if conc >= 16 else "10"
    long_prompt = lengths == (8192, 1024)
    flags: tuple[str, ...]
    extra: dict[str, str] = {}
    blackwell = row.system in ("b200_sxm", "b300_sxm")
    if blackwell and row.precision == "fp4":
        if tp not in (4, 8) or conc > (16 if tp == 8 and long_prompt else 128):
            return {}
        flags = ("256", "0.85", "16384", "16384", poll)
    elif unnamed and row.precision == "fp8":  # the v0.5.5 era: tp 8 only, no -mtp
        if tp != 8 or conc > 64:
            return {}
        flags = ("128", "0.82", "32768", "32768", poll)
    elif blackwell and row.precision == "fp8" and tp == 4:
        if not long_prompt or conc > 32:
            return {}
        flags = ("32", "0.95", "8192", "8192", "10")
    elif blackwell and row.precision == "fp8" and tp == 8:
        if conc <= (4 if long_prompt else 64):
            flags = ("128", "0.82", "32768", "32768", poll)
        elif conc <= 512 and not b300:
            flags, extra = ("512", "0.82", "16384", "16384", poll), _SGLANG_MTP
        else:
            return {}
    elif row.system == "h200_sxm" and row.precision == "fp8" and tp == 8 and conc <= 64:
        running = "512" if lengths == (1024, 1024) else "256"
        flags = (running, "0.82", "32768", "32768", "1")
    else:
        return {}
    return {**dict(zip(_SGLANG_FLAGS, flags, strict=True)), **extra}


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


def inferencemax_minimax_flags(row: SiliconRow) -> bool:
    """Whether ``row`` is an InferenceMAX MiniMax-M2.5 vLLM run whose script passed the
    prompt-sized budget and the 2,048-token capture size (above)."""
    if row.backend != "vllm" or model_named(row, INFERENCEMAX_MINIMAX) is None:
        return False
    since = INFERENCEMAX_MINIMAX_FLAGS_FROM.get((row.system, (row.precision or "").lower()))
    day = measured_on(row)
    return since is not None and day is not None and day >= since


def inferencemax_vllm(row: SiliconRow) -> dict[str, str]:
    """The vLLM server limits of InferenceMAX's script for ``row`` (``--set`` values)."""
    if model_named(row, INFERENCEMAX_MINIMAX) is None:
        return dict(INFERENCEMAX_VLLM)
    from twin.engine.modes_vllm import VLLM_BATCH_DEFAULTS  # late: rows are read without it

    budget, seqs = VLLM_BATCH_DEFAULTS[True]
    if inferencemax_minimax_flags(row) and row.isl:
        budget = 2 * row.isl
    seqs = min(seqs, budget)
    return {"max_num_batched_tokens": str(budget), "max_num_seqs": str(seqs)}


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
        wait = inferencemax_batch_wait(row)
        tokens = INFERENCEMAX_TRTLLM_TOKENS[named]
        return {"max_batched_tokens": tokens, **({"sets": wait} if wait else {})}
    if not inferencemax_deepseek(row) or not row.isl:
        return {}
    block, conc = INFERENCEMAX_TRTLLM_BLOCK, row.concurrency or 0
    balance = inferencemax_adp_balance(row)
    drafts = inferencemax_mtp_drafts(row)
    if drafts is not None:
        batch = inferencemax_mtp_batch(row)
        tokens = (drafts + 1) * batch + row.isl + 64
        limits = {"max_batched_tokens": -(-tokens // block) * block, "max_running": batch}
        return {**limits, **({"sets": balance} if balance else {})}
    tokens = -(-(conc + row.isl + 64) // block) * block
    if row.backend_version not in INFERENCEMAX_TRTLLM_NO_FLOOR:
        tokens = max(tokens, INFERENCEMAX_TRTLLM_FLOOR)
    sets = {**inferencemax_deepseek_batch_wait(row), **balance}
    return {"max_batched_tokens": tokens, **({"sets": sets} if sets else {})}


# The attention-DP configurations of InferenceMAX's DeepSeek-R1 TensorRT-LLM scripts all
# write ``attention_dp_config: {batching_wait_iters: 0, enable_balance: true,
# timeout_iters: 60}`` (``benchmarks/dsr1_fp{4,8}_b200_trt_slurm.sh`` and
# ``dsr1_fp8_h200_trt_slurm.sh`` from ec90f3fe7, 2025-09-18, on; the -mtp scripts at
# bf3456727; ``dsr1_fp{4,8}_b200_trt.sh`` at 6eecc0e66 / ec7bafaae and
# ``dsr1_fp{4,8}_b200_trt_mtp.sh`` at 0aae52d4c / 5d517074c): TensorRT-LLM's context
# balance across the ranks (``twin.engine.dp_attention.ADPBalance``).
INFERENCEMAX_ADP_BALANCE = {
    "attention_dp_balance": "true",
    "attention_dp_timeout_iters": "60",
    "attention_dp_batching_wait_iters": "0",
}


def inferencemax_adp_balance(row: SiliconRow) -> dict[str, str]:
    """The ``attention_dp_config`` ``--set`` flags of ``row``'s InferenceMAX DeepSeek-R1
    TensorRT-LLM server (above); empty without attention DP."""
    if (row.attention_dp or 1) == 1 or not _inferencemax_trtllm_deepseek(row):
        return {}
    return dict(INFERENCEMAX_ADP_BALANCE)


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
# clients). Two H200 rows measured 2026-01-28 are not read (no configuration change that
# day was found): plain.
INFERENCEMAX_MTP_RUNS = {
    ("trtllm", system, "1.1.0rc2.post2", "2026-01-14"): (3, 1)
    for system in ("b200_sxm", "h200_sxm")
}


def inferencemax_mtp_drafts(row: SiliconRow) -> int | None:
    """The MTP drafts an InferenceMAX DeepSeek row ran with (above); ``None``: none, or
    not known."""
    key = (row.backend, row.system, row.backend_version)
    found = INFERENCEMAX_MTP.get(key) or INFERENCEMAX_MTP_RUNS.get((*key, measured_on(row) or ""))
    if found is None or harness_of(row) is not INFERENCEMAX or not inferencemax_deepseek(row):
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
#   64)``).
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
INFERENCEMAX_TRTLLM_NO_FLOOR = frozenset({"1.1.0rc2.post2"})  # scripts without the floor


def _inferencemax_trtllm_deepseek(row: SiliconRow) -> bool:
    return (
        row.backend == "trtllm"
        and harness_of(row) is INFERENCEMAX
        and inferencemax_deepseek(row)
        and bool(row.isl and row.osl)
    )


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


def inferencemax_deepseek_batch_wait(row: SiliconRow) -> dict[str, str]:
    """The batch-waiting ``--set`` flags of ``row``'s InferenceMAX DeepSeek-R1
    TensorRT-LLM server (``DELAY_BATCHING``, above); empty where its script sets none."""
    key = (row.system, row.precision, row.backend_version)
    if key != ("b200_sxm", "fp8", "1.2.0rc6.post2") or not _inferencemax_trtllm_deepseek(row):
        return {}
    if (row.isl, row.osl) != (1024, 1024) or (row.concurrency or 0) < 64:
        return {}
    return dict(INFERENCEMAX_DEEPSEEK_BATCH_WAIT)


def inferencemax_speculation(row: SiliconRow, model: ModelSpec) -> dict[str, Any] | None:
    """The speculative decoding an InferenceMAX row ran with (above), as
    ``EngineConfig.speculative``; ``None``: none, or not known."""
    drafts = inferencemax_mtp_drafts(row)
    if drafts is None:
        return None
    from twin.engine import speculative  # late: the engine is not needed to read rows

    acceptance = ("speculative_acceptance", inferencemax_mtp_acceptance(drafts))
    return speculative.build(model, "mtp", drafts, acceptance=acceptance).to_dict()


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

    imax = kind == "benchmark" and harness_of(row) is INFERENCEMAX
    if imax and model_named(row, INFERENCEMAX_VLLM_ASYNC_MODELS) is not None:
        return True
    return release_at_least(row.backend_version, VLLM_ASYNC_FROM)


# InferenceMAX's Hopper gpt-oss scripts export VLLM_MXFP4_USE_MARLIN=1
# (SemiAnalysisAI/InferenceX ``benchmarks/gptoss_fp4_h200.sh`` at 16cd955,
# ``gptoss_fp4_h100.sh`` at c6b96dd and 1fc5d73), which vLLM honours before its Triton
# default (0.15.1-0.18.0 ``quantization/mxfp4.py`` ``get_mxfp4_backend``; 0.19.0
# ``fused_moe/oracle/mxfp4.py`` ``select_mxfp4_moe_backend``; the 0.11.2 image's release
# not read, taken to honour it as its successors do): those rows' experts ran Marlin, the
# twin's ``--set moe_backend=marlin`` (``twin.engine.modes_vllm``). Blackwell's scripts do
# not set it (``gptoss_fp4_b200.sh``: FlashInfer's TRT-LLM-gen kernel).
INFERENCEMAX_VLLM_MARLIN = {"gpt-oss-120b": frozenset({"h100_sxm", "h200_sxm"})}


def vllm_moe_backend(row: SiliconRow, kind: str = "benchmark") -> str | None:
    """``--set moe_backend`` for the vLLM server of ``row`` (above); None: vLLM's default."""
    if kind != "benchmark" or harness_of(row) is not INFERENCEMAX:
        return None
    named = model_named(row, INFERENCEMAX_VLLM_MARLIN)
    return "marlin" if named and row.system in INFERENCEMAX_VLLM_MARLIN[named] else None


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


def deployment(row: SiliconRow, engine: str, kind: str = "benchmark") -> dict[str, Any]:
    """The server limits ``row`` runs with under the deployment ``kind`` (``DEPLOYMENTS``)."""
    if kind not in DEPLOYMENTS:
        raise TwinError(f"deployment {kind!r}: expected one of {', '.join(DEPLOYMENTS)}")
    if kind == "benchmark" and harness_of(row) is INFERENCEMAX:
        return inferencemax_deployment(row, engine)
    if kind == "defaults" or (kind != "aiconfigurator-all" and engine not in DEPLOYED_ENGINES):
        return {}
    return aiconfigurator_deployment(row, engine)


# SGLang's prefill runs without CUDA graphs before 0.5.10: 0.5.9's (and 0.5.6.post2's)
# ``server_args.py`` has ``enable_piecewise_cuda_graph: bool = False``, and
# ``model_executor/model_runner.py`` ``ModelRunner._forward_raw`` replays a graph only
# for a forward mode that is a CUDA-graph mode (decode, target verify) and sends extend
# batches to ``forward_extend``, which uses the piecewise runner only when enabled. From
# 0.5.10 the piecewise graphs are on by default (0.5.10.post1 ``server_args.py``
# ``disable_piecewise_cuda_graph: bool = False``), but ``_handle_piecewise_cuda_graph``
# turns them off for speculative decoding, attention DP, symmetric memory, ... and for
# two kinds of model read here: the architectures of ``configs/model_config.py``
# ``piecewise_cuda_graph_disabled_model_archs`` (GLM-5's ``GlmMoeDsaForCausalLM``,
# Qwen3-Next, DeepSeek-V3.2: ``twin.engine.memory_rules.SGLANG_NO_PIECEWISE``) and
# multimodal models (``ModelConfig.is_multimodal``: ``enable_multimodal`` is on by
# default, and a config with a ``vision_config`` is multimodal, Qwen3.5's
# ``Qwen3_5MoeForConditionalGeneration``). Such a model prefills eagerly in every
# release, a nightly build included. The scripts' flags that turn them off are read for
# InferenceMAX's DeepSeek servers (:func:`inferencemax_no_piecewise`: symmetric memory,
# the FlashInfer TRT-LLM MoE runner), so its B300 0.5.10.post1 rows prefill eagerly; and
# an InferenceMAX row that names no release but was measured before that collection first
# ran 0.5.10 (:func:`inferencemax_sglang_unnamed`) ran an earlier release, so eagerly too.
# (0.5.10.post1 also caps an MLA model's piecewise graphs at 2,048 tokens,
# ``_handle_gpu_memory_settings`` sets ``piecewise_cuda_graph_max_tokens`` so, and a larger
# DeepSeek prefill forward runs eagerly there even with the graphs on: not modelled, the
# engine's host time is one price for every prefill step.)
# An eager forward is issued kernel by kernel from Python, so a step that prefills takes
# the host's time to issue the model's kernels, in series with the kernels as the
# measured rows place it (``twin.engine.host_time.EagerPrefillPricer``). Public
# single-request runs of DeepSeek-R1 under SGLang show that floor: TTFT 180-200 ms from
# 128 to 4,096 prompt tokens on 16 H100s (tenstorrent/tt-inference-server issue 356),
# while the twin's kernels price a 1,024-token prefill at 45-100 ms.
SGLANG_PIECEWISE_DEFAULT = "0.5.10"
# From 0.5.23 SGLang captures its prefill graphs whatever the model
# (``twin.engine.memory_rules``): the sglang 0.5.23 wheel's
# ``sglang/srt/model_executor/cuda_graph_config.py``, ``CudaGraphConfig.prefill`` defaults
# to ``default_prefill_backend()``, the ``breakable`` backend on CUDA.
SGLANG_PREFILL_GRAPHS_ALWAYS = "0.5.23"
# Kernels one decoder layer launches on SGLang's eager prefill path, by part (its input
# norm and all-reduce counted with the part after them), read from SGLang 0.5.9's
# forward code (CUDA, block-fp8 weights, tensor-parallel MoE without DeepEP; 0.5.6.post2's
# Qwen3-MoE path is the same); an fp8 linear is two launches (activation quantisation,
# GEMM: ``layers/quantization/fp8_utils.py``). Counts within a launch or two:
# - ``mla`` 17 (``models/deepseek_common/attention_forward_methods/forward_mha.py``
#   ``forward_normal_prepare`` / ``forward_normal_core``: input norm, fused q_a/kv_a
#   projection 2, q_a and kv_a norms, q_b projection 2, RoPE, the q_pe copy, the latent
#   KV write, kv_b projection 2, the k concat, ragged attention, o projection 2);
# - ``attention`` 10 (``models/qwen3_moe.py`` ``forward_prepare_native``: input norm,
#   qkv 2, q and k norms, RoPE, KV write, attention, o projection 2), ``swa`` the same;
#   with an output gate (``attn_output_gate``, ``models/qwen3_5.py``
#   ``Qwen3_5AttentionDecoderLayer.self_attention``) 4 more (q and gate copies, sigmoid,
#   product);
# - ``gdn`` 26 (``models/qwen3_5.py`` ``Qwen3_5GatedDeltaNet._forward`` and
#   ``layers/attention/fla/chunk.py`` ``chunk_gated_delta_rule_fwd``: input norm,
#   qkv and z projections 2 each, b and a projections and their copies, causal conv,
#   the q/k/v copies 3, gating, q and k l2-norms, cumsum, KK^T, triangular solve, w/u,
#   state pass, output, state write, gated norm, out projection 2);
# - ``moe`` 13 (``models/deepseek_v2.py`` ``DeepseekV2MoE.forward_normal``,
#   ``models/qwen3_moe.py`` ``forward_normal``: post-attention norm, the attention's
#   all-reduce, router GEMM, top-k, the Triton fused MoE's alignment, quantisation, two
#   grouped GEMMs, activation, second quantisation and sum = 8, the MoE's all-reduce);
#   a shared expert 6 more (gate_up 2, activation, down 2, the add; Qwen3.5's sigmoid
#   gate on it, 3 more, is not counted: no model field says a shared expert is gated);
# - ``mlp`` 8 (a dense layer: post-attention norm, all-reduce, gate_up 2, activation,
#   down 2, all-reduce).
SGLANG_EAGER_LAUNCHES: dict[str, int] = {
    "mla": 17,
    "attention": 10,
    "swa": 10,
    "gdn": 26,
    "attention_gate": 4,
    "moe": 13,
    "shared_expert": 6,
    "mlp": 8,
}
# Host seconds per launched kernel of an eager SGLang forward, per GPU (its node's host:
# Python, the op's dispatch and the launch), in series with the step's kernels
# (``twin.engine.host_time.EagerPrefillPricer``), fitted on the fit split only: the 70
# fit rows the rule applies to among 90 spread over the SGLang rows of DeepSeek-R1/V3,
# Qwen3-235B, Qwen3.5-397B and GLM-5 (with InferenceMAX's Qwen3.5 server flags), each
# row's TTFT interpolated between runs at two host times, least mean TTFT APE per GPU
# over 20-160 us in 5 us steps (docs/decisions.md, "Issue 31, step: InferenceMAX's
# Qwen3.5 servers, and the eager prefill's host time in series"): B200 75 us (23.1% on 49
# rows, flat at 70-80), H200 60 us (12.6% on 14), B300 45 us (16.3% on 7: Qwen3.5's 6
# rows want it, GLM-5's one wants none). A GPU without an entry gets no floor.
SGLANG_EAGER_LAUNCH_S: dict[str, float] = {"h200": 60e-6, "b200": 75e-6, "b300": 45e-6}


# TensorRT-LLM's PyTorch backend runs every batch that holds a context request without a
# CUDA graph: ``_torch/pyexecutor/model_engine.py`` ``_maybe_get_cuda_graph`` returns a
# graph only for a batch that can run one (generation requests only:
# ``batch.can_run_cuda_graph``, older releases ``batch.is_generation_only``), and its
# piecewise context graphs (``torch_compile_config.enable_piecewise_cuda_graph``) are off
# unless configured (read in NVIDIA/TensorRT-LLM's stored tree; the 1.1/1.2 wheels are not
# on PyPI). So a context step is issued kernel by kernel from Python, as SGLang's eager
# prefill is. Its kernels are counted with :data:`SGLANG_EAGER_LAUNCHES` (TensorRT-LLM's
# DeepSeek, gpt-oss and Qwen3-MoE modules issue the same ops per layer part: norm,
# projections, RoPE, attention, router, top-k, fused MoE, all-reduces; not recounted from
# TensorRT-LLM's own modules in this step), times one host time per launch per GPU fitted
# on the fit split only (docs/decisions.md, "Issue 31, step: TensorRT-LLM's eager context
# step"). As for SGLang, MoE models only (the dense TensorRT-LLM rows' TTFT shows no such
# shortfall at 1k/8k and 8k/1k: Llama-3.1-70B within +-50 ms at 4-16 clients), and not
# under attention DP (the floor is not modelled there). A GPU without an entry: no floor.
# Where an InferenceMAX DeepSeek-R1 script turns the piecewise context graphs on
# (:func:`inferencemax_trtllm_piecewise`, read at the commit each row's sweep ran), the
# context steps replay graphs and get no eager host time: B200 fp4 tp 8 ep 8 1k/1k at 64
# clients (1.2.0rc6.post2), measured TTFT 137 ms, the twin 282 ms with the eager time and
# 122 without. Not on the -mtp scripts' rows (MTP): there the measured TTFT is the same
# with and without the graphs (fp8 1.2.0rc6.post3 tp 8 1k/1k: 195 ms at 4 clients without,
# 153 and 195 ms at 8 and 16 with; fp4 1k/1k tp 8: 210 ms at 4 without, 212 at 32 with),
# so those context steps keep it. Why is open: TensorRT-LLM's guide
# (``docs/source/features/torch_compile_and_piecewise_cuda_graph.md``, stored tree) says
# the MTP layers are outside torch.compile's scope, and that attention, run eagerly between
# the captured pieces, still leaves host bubbles in the context phase.
# The fit (fit split only): `python benchmarks/bench_eager_prefill.py --backend trtllm
# --per-split 40 --grid-us 0,25,50,75,100,140` (40 fit rows spread over the TensorRT-LLM
# MoE rows the rule applies to, at most 64 clients: 23 on B200, 17 on H200), the host time
# in series with the kernels (``EagerPrefillPricer``); the value of least TTFT + TPOT MAPE
# per GPU, since the host time also stalls the decodes batched with a prefill: B200 50 us
# (TTFT / TPOT 54.7 / 15.9% -> 24.4 / 23.1%; least TTFT alone also 50), H200 75 us (56.5 /
# 9.5% -> 24.1 / 20.3%; least TTFT alone 100 us, 22.3 / 24.6%)
# (docs/decisions.md, "Issue 31, step: TensorRT-LLM's host time per launch refitted in series").
# Refitted in session 19 after the overlap scheduler's admission lag and the DeepSeek rows'
# own scripts (MTP, piecewise graphs) landed, on the same 40 fit rows: `... --per-split 40
# --grid-us 25,50,75,100` (`benchmarks/results/trtllm-eager-grid-s19.json`): B200 25 us
# (TTFT / TPOT 23.3 / 19.2%; 50 us: 32.3 / 20.2%), H200 75 us unchanged (24.6 / 13.6%; 50:
# 28.2 / 14.2, 100: 26.5 / 15.5) (docs/decisions.md, "Issue 31, step: session 19's merge").
TRTLLM_EAGER_LAUNCH_S: dict[str, float] = {"b200": 25e-6, "h200": 75e-6}


# vLLM replays piecewise CUDA graphs only for steps of at most
# ``max_cudagraph_capture_size`` tokens (0.19.0 ``v1/cudagraph_dispatcher.py``
# ``CudagraphDispatcher.dispatch``: ``CUDAGraphMode.NONE`` for ``num_tokens >
# max_size``); a larger step runs the compiled model without a graph, its host issuing
# each piece's kernels and the custom ops between them (attention, the fused MoE) one by
# one. The size defaults to ``min(max_num_seqs x 2, 512)`` (``config/vllm.py``
# ``VllmConfig._set_cudagraph_sizes``, decode query length 1 without speculation;
# ``config/compilation.py`` ``max_cudagraph_capture_size``), capped by
# ``max_num_batched_tokens``; InferenceMAX's gpt-oss scripts set
# ``max-cudagraph-capture-size: 2048`` (``gptoss_fp4_h200.sh`` at 16cd955,
# ``gptoss_fp4_h100.sh`` at 1fc5d73). So every 1k-token prefill step of the measured rows
# but gpt-oss's is eager. The host time of that forward is priced as SGLang's and
# TensorRT-LLM's, with vLLM's own launches per layer part (:data:`VLLM_EAGER_LAUNCHES`,
# read from its modules) times a host time per launch per GPU
# fitted on the fit split only (:data:`VLLM_EAGER_LAUNCH_S`), in series with the kernels
# (``EagerPrefillPricer``, with ``eager_graph_tokens`` the capture size). MoE models only
# (as the other engines' rule), not under attention DP, and in the releases whose
# dispatcher was read (0.14.0, 0.16.0 and 0.19.0 wheels: the same test and default; so
# from 0.14.0, and the nightly builds of the rows, 2026 images of vLLM's main branch).
# Older releases (0.11.2, 0.12.0) and rows without a release keep the kernels' price: not
# read (the fit grid's three Qwen3-235B 0.12.0 H200 rows got worse with it, 11.6 -> 25.5%).
VLLM_MAX_CAPTURE = 512
# Kernels one decoder layer launches in vLLM's eager (no graph) forward, by part, as
# (other kernels, linear layers), read from the 0.16.0 wheel and checked in 0.14.0 and
# 0.19.0 (the same files and calls). vLLM compiles the model with Inductor and splits it
# at the attention ops (``config/compilation.py`` ``_attention_ops``), with its custom
# element-wise ops off under Inductor (``config/vllm.py``: ``custom_ops`` "none"), so a
# layer's norms, residual adds, RoPE and element-wise products are generated kernels,
# fused where they meet; the attention op and the fused MoE op run their own kernels.
# SGLang's counts (:data:`SGLANG_EAGER_LAUNCHES`) launch each norm, RoPE and copy alone
# and count every linear as two launches (block-fp8), which for Kimi-K2.5's bf16 MLA
# and shared expert overstated vLLM's layer by about a third. Counts within a launch or
# two:
# - ``mla`` (8, 4) (``model_executor/layers/mla.py``
#   ``MultiHeadLatentAttentionWrapper.forward``, ``layers/attention/mla_attention.py``
#   ``forward_impl`` / ``forward_mha``): the input norm with its residual add, the q_a and
#   kv_a norms, RoPE, ``concat_and_cache_mla``, the k concat, the varlen attention and
#   its output copy; linears fused_qkv_a, q_b, kv_b, o;
# - ``attention`` / ``swa`` (5, 2): the input norm, the q/k norms and RoPE (two generated
#   kernels), the KV write, the attention; linears qkv and o;
# - ``moe`` (6, 0) plus the experts: the post-attention norm, the attention's all-reduce,
#   the router GEMM (unquantised), top-k, the routed scaling and the MoE's all-reduce;
#   the experts' kernel (``fused_moe/fused_marlin_moe.py`` ``fused_marlin_moe``:
#   ``moe_align_block_size``, two grouped GEMMs, the activation, ``torch.sum``; the
#   Triton ``fused_moe.py`` path the same) 5 launches, 7 where the activations are
#   quantised (fp8, fp8-block, nvfp4: one quantisation before each grouped GEMM);
# - ``shared_expert`` (3, 2): run inside the MoE op (``SharedFusedMoE``, not fused by
#   Inductor): the activation's silu and product, the add; linears gate_up and down;
# - ``mlp`` (3, 2): the norm, the activation, the all-reduce; linears gate_up and down.
# A linear is one launch, two where its activations are quantised (``QuantFP8``, kept a
# CUDA op for block-scaled weights by ``config/vllm.py``, or the fp4 quantisation, then
# the GEMM). Parts without a vLLM count (``gdn``, the output gate: no vLLM MoE row has
# them) take SGLang's.
VLLM_EAGER_LAUNCHES: dict[str, tuple[int, int]] = {
    "mla": (8, 4),
    "attention": (5, 2),
    "swa": (5, 2),
    "moe": (6, 0),
    "shared_expert": (3, 2),
    "mlp": (3, 2),
}
VLLM_EXPERT_LAUNCHES = 5  # the fused MoE kernels, activations unquantised (above)
INFERENCEMAX_VLLM_CAPTURE = {"gpt-oss-120b": 2048}
VLLM_EAGER_FROM = "0.14.0"
# Host seconds per launch of vLLM's eager forward, per GPU, fitted on the fit split only:
# ``python benchmarks/bench_eager_prefill.py --backend vllm --per-split 48 --grid-us
# 0,10,20,30,45,60`` (48 fit rows spread over the vLLM MoE rows with at most 64 clients:
# MiniMax-M2.5, Kimi-K2.5, gpt-oss-120b, Qwen3-235B; the rule's rows among them, release
# 0.14.0 on or nightly), least TTFT + TPOT MAPE per GPU (``benchmarks/results/
# vllm-eager-grid.json``; docs/decisions.md, "Issue 31, step: vLLM's eager steps above its
# largest CUDA graph, and gpt-oss's Marlin experts on Hopper"): B200 20 us (22 rows, TTFT /
# TPOT 32.6 / 11.0% -> 20.6 / 11.9%), H200 45 us (10 rows, 39.7 / 14.8 -> 21.8 / 13.5), H100
# 45 us (5 rows, 35.7 / 4.7 -> 23.8 / 3.9; 60 us the same within 0.5), B300 30 us (5 rows,
# 38.4 / 20.5 -> 13.4 / 19.9; few rows).
# Refitted with vLLM's own launch counts (:data:`VLLM_EAGER_LAUNCHES`), fit split only:
# ``python benchmarks/bench_eager_prefill.py --backend vllm --per-split 48 --max-clients 128
# --grid-us 20,30,45,60 --out benchmarks/results/vllm-moe-eager-grid`` (48 fit rows with at
# most 128 clients), least TTFT + TPOT MAPE per GPU (docs/decisions.md, "Issue 31, step:
# vLLM's eager launches counted from its modules"): B200 20 us (24 rows, 18.8 / 12.6%),
# H200 45 us (12 rows, 25.7 / 10.1%), B300 20 us (7 rows, 16.4 / 16.4%; 30 us 15.2 / 18.3),
# H100 20 us (5 rows, 9.6 / 8.1%; 45 us 19.7 / 8.7). Below it (``--grid-us 5,10,15 --out
# benchmarks/results/vllm-moe-eager-grid-low``, the same rows): B200 15 us 18.5 / 12.5%
# (TTFT + TPOT 31.0 against 31.4 at 20: kept at 20), B300 15 us 18.2 / 15.9, H100 15 us
# 13.4 / 8.0, H200 15 us 30.8 / 11.0: none lower.
# Refitted again once the InferenceMAX MiniMax-M2.5 rows ran their scripts' capture size
# (:data:`INFERENCEMAX_MINIMAX_CAPTURE`: their 1k steps now replay a graph, so the fit no
# longer prices them), the same 48 fit rows and rule: ``--grid-us 10,15,20,30,45,60 --out
# benchmarks/results/vllm-refit-eager-grid``, ``--grid-us 25,35,40 --out ...-grid-mid``,
# ``--grid-us 50,55 --out ...-grid-h200`` (docs/decisions.md, "Issue 31, step: vLLM's
# eager host time refitted with the MiniMax scripts' capture size"), TTFT + TPOT MAPE:
# B200 20 us (33.3; 15 us 33.6, 25 us 33.6), B300 30 us (36.4; 20 us 36.8, 25 us 36.4),
# H100 25 us (17.0; 20 us 17.7), H200 50 us (35.2; 45 us 35.9, 55 us 36.4). Checked on
# the wider fit runs of the same step (``benchmarks/results/vllm-refit-fit-*``): B300 30 us
# and H100 25 us hold there; H200 50 us lost to 45 on its 60 rows, so H200 stays at 45 us.
# Refitted once more when vLLM's asynchronous scheduling took its admission lag (a request
# arriving while step n runs joins step n+2: ``twin.engine.vllm_batching``) and B200's
# 0.19.0 MiniMax rows their FlashInfer block-fp8 experts (``engine_kernels``), the same 48
# fit rows and rule: ``--grid-us 5,15,25,35,45`` and ``--grid-us 10,20,30,40`` (docs/
# decisions.md, "Issue 31, step: vLLM's block-fp8 experts on Blackwell and its
# asynchronous scheduling's admission lag"), TTFT + TPOT MAPE: B200 15 us (35.65; 20 us
# 36.23), B300 20 us (31.36; 15 us 31.42, 30 us 32.94), H100 15 us (9.26; 25 us 14.83),
# H200 35 us (35.58; 45 us 37.63). Checked on the step's 336 vLLM fit rows: B300, H100 and
# H200 hold there; B200 15 us lost to 20 (TTFT + TPOT 36.2 against 35.1 on its 168
# rows), so B200 stays at 20 us.
VLLM_EAGER_LAUNCH_S: dict[str, float] = {"b200": 20e-6, "b300": 20e-6, "h200": 35e-6, "h100": 15e-6}


def vllm_prefills_eagerly(row: SiliconRow) -> bool:
    """Whether ``row``'s vLLM release is one the eager rule was read in (above)."""
    from twin.costmodel.table_release import release_at_least  # late: rows read without it

    version = row.backend_version or ""
    return version.startswith("nightly") or release_at_least(version, VLLM_EAGER_FROM)


def vllm_graph_tokens(row: SiliconRow, limits: dict[str, Any], kind: str = "benchmark") -> int:
    """vLLM's ``max_cudagraph_capture_size`` for ``row`` run with the server limits
    ``limits`` (:func:`deployment`'s keywords under the deployment ``kind``; above): an
    InferenceMAX script's own size only where its scripts' limits are run (``benchmark``,
    as :func:`deployment`)."""
    sets = limits.get("sets", {})
    seqs = int(sets.get("max_num_seqs", 0) or 0)
    size = min(2 * seqs, VLLM_MAX_CAPTURE) if seqs else VLLM_MAX_CAPTURE
    if kind == "benchmark" and harness_of(row) is INFERENCEMAX:
        named = model_named(row, INFERENCEMAX_VLLM_CAPTURE)
        size = INFERENCEMAX_VLLM_CAPTURE[named] if named else size
        if inferencemax_minimax_flags(row):  # the script's --max-cudagraph-capture-size
            size = INFERENCEMAX_MINIMAX_CAPTURE
    budget = int(sets.get("max_num_batched_tokens", 0) or 0)
    return min(size, budget) if budget else size


def eager_launches(model: ModelSpec, backend: str = "sglang") -> int:
    """Kernels one eager forward of ``model`` launches, summed over its layers: SGLang's
    counts (``SGLANG_EAGER_LAUNCHES``, TensorRT-LLM's stand-in) or, for ``backend``
    "vllm", vLLM's (:func:`vllm_part_launches`). Mixer kinds without a count (Mamba2,
    say) count none."""
    if backend == "vllm":
        n = {part: vllm_part_launches(model, part) for part in SGLANG_EAGER_LAUNCHES}
    else:
        n = SGLANG_EAGER_LAUNCHES
    out = sum(n.get(kind, 0) * count for kind, count in model.mixer_counts.items())
    if model.attn_output_gate:
        gated = model.mixer_counts.get("attention", 0) + model.mixer_counts.get("swa", 0)
        out += n["attention_gate"] * gated
    per_moe = n["moe"] + (n["shared_expert"] if model.moe_shared_d_ff else 0)
    return out + per_moe * model.n_moe_layers + n["mlp"] * model.n_mlp_layers


def vllm_part_launches(model: ModelSpec, part: str) -> int:
    """Kernels one ``part`` of a ``model`` layer launches in vLLM's eager forward
    (:data:`VLLM_EAGER_LAUNCHES`): its other kernels, its linears at one launch each, two
    where ``model``'s linear precision quantises the activations, and for ``moe`` the
    experts' kernels (two more where the experts' format quantises the activations).
    A part vLLM's count does not cover: SGLang's."""
    from twin import precision as px  # late: the rows are read without the formats

    if part not in VLLM_EAGER_LAUNCHES:
        return SGLANG_EAGER_LAUNCHES[part]
    other, linears = VLLM_EAGER_LAUNCHES[part]
    per_linear = 1 if px.weight_format(model.precision).act_bytes is None else 2
    out = other + linears * per_linear
    if part == "moe":
        quantised = px.moe_format(model).act_bytes is not None
        out += VLLM_EXPERT_LAUNCHES + (2 if quantised else 0)
    return out


def sglang_prefills_eagerly(row: SiliconRow, model: ModelSpec, multimodal: bool) -> bool:
    """Whether SGLang runs ``row``'s prefill batches without CUDA graphs (above): a
    release before 0.5.10, a model whose piecewise graphs every release turns off, an
    InferenceMAX DeepSeek server whose script passes a flag that turns them off
    (:func:`inferencemax_no_piecewise`), or an InferenceMAX row that names no release
    but ran before 0.5.10 (:func:`inferencemax_sglang_unnamed`); never from 0.5.23."""
    from twin.costmodel.table_release import (  # late: rows read without it
        release_at_least,
        version_key,
    )
    from twin.engine.memory_rules import SGLANG_NO_PIECEWISE

    if release_at_least(row.backend_version, SGLANG_PREFILL_GRAPHS_ALWAYS):
        return False
    if multimodal or any(stem in model.name.lower() for stem in SGLANG_NO_PIECEWISE):
        return True
    if inferencemax_no_piecewise(row) or inferencemax_sglang_unnamed(row):
        return True
    dated = version_key(row.backend_version) is not None
    return dated and not release_at_least(row.backend_version, SGLANG_PIECEWISE_DEFAULT)


def eager_prefill_s(row: SiliconRow, model: ModelSpec, gpu: str, multimodal: bool = False) -> float:
    """The host time added to a prefill step (``EngineConfig.eager_prefill_s``) for ``row``
    run on the twin's ``gpu``: the model's eager launches (:func:`eager_launches`) times
    the GPU's host time per launch; 0.0 where the engine prefills with graphs
    (:func:`sglang_prefills_eagerly`; ``multimodal``: the model's config has a
    ``vision_config``), the model has no MoE layers (the dense SGLang rows are GPU-bound:
    nothing to fit them on), attention DP is on, or the GPU has no fitted host time.
    TensorRT-LLM rows: every context step is eager (``TRTLLM_EAGER_LAUNCH_S``) unless the
    row's InferenceMAX script captured piecewise CUDA graphs
    (:func:`inferencemax_trtllm_piecewise`) and ran no MTP; vLLM rows of the releases read
    (:func:`vllm_prefills_eagerly`): the steps above its largest captured graph, at
    vLLM's own launch count (``VLLM_EAGER_LAUNCHES``) times ``VLLM_EAGER_LAUNCH_S`` (the
    plan adds :func:`vllm_graph_tokens`)."""
    if not model.n_moe_layers or (row.attention_dp or 1) > 1:
        return 0.0
    if row.backend == "trtllm":  # context steps run eagerly (TRTLLM_EAGER_LAUNCH_S) unless
        # the row's script captured them as graphs (and runs no MTP: above)
        if inferencemax_trtllm_piecewise(row) and inferencemax_mtp_drafts(row) is None:
            return 0.0
        return TRTLLM_EAGER_LAUNCH_S.get(gpu, 0.0) * eager_launches(model)
    if row.backend == "vllm":  # steps above the largest graph (VLLM_EAGER_LAUNCH_S)
        if not vllm_prefills_eagerly(row):
            return 0.0
        return VLLM_EAGER_LAUNCH_S.get(gpu, 0.0) * eager_launches(model, "vllm")
    if row.backend != "sglang" or not sglang_prefills_eagerly(row, model, multimodal):
        return 0.0
    return SGLANG_EAGER_LAUNCH_S.get(gpu, 0.0) * eager_launches(model)


# SGLang runs Qwen3.5's GDN input projection as the checkpoint's four matrices, one GEMM
# launch each, up to 0.5.9 (the 0.5.9 wheel's ``models/qwen3_5.py``, file dated
# 2026-02-23: ``Qwen3_5GatedDeltaNet._forward`` calls ``in_proj_qkv``, ``in_proj_z``,
# ``in_proj_b`` and ``in_proj_a`` in turn); 0.5.10.post1's (2026-04-08) loads them into
# ``in_proj_qkvz`` and ``in_proj_ba`` and, in a captured decode graph, runs the second on
# another stream beside the first (``_forward_input_proj``): the one GEMM the twin prices
# by default (``twin.costmodel.dense_pricing.DensePricing._gdn_in_proj``). A nightly
# build dated before 0.5.9's file ran that file's code or an earlier one; InferenceMAX's
# ``nightly-dev`` Qwen3.5 rows name the nightly-dev-20260216 image (``inferencemax_qwen35``).
# Later nightlies are not read and keep the default.
SGLANG_GDN_SPLIT_BEFORE = "0.5.10"
SGLANG_0_5_9_QWEN35_DAY = "20260223"
_NIGHTLY_DAY = re.compile(r"^nightly-dev-(\d{8})")


# TensorRT-LLM runs each layer's residual add + RMSNorm inside its tensor-parallel
# all-reduces (``AllReduceFusionOp.RESIDUAL_RMS_NORM``; for an NVFP4 Llama
# ``RESIDUAL_RMS_NORM_QUANT_NVFP4``, which writes the next GEMM's quantised input too)
# for two of the collection's models, read in NVIDIA/TensorRT-LLM's 1.x PyTorch flow:
# - Llama (``tensorrt_llm/_torch/models/modeling_llama.py`` ``LlamaDecoderLayer``, at
#   3a5901cd): ``PRE_MLP_FUSION`` / ``POST_MLP_FUSION`` where the mapping has TP, no
#   attention DP and ``hidden_size > 4096`` ("Disable fusion for small models due to
#   accuracy issues"): Llama-3.1-70B, not Llama-3.1-8B (hidden 4,096);
# - gpt-oss (``modeling_gpt_oss.py`` ``TransformerBlock.forward_tp``, at 050b6cb9):
#   whenever ``mapping.has_tp() and not enable_attention_dp``, the post-attention norm
#   and the next layer's ``input_layernorm`` ride on the two all-reduces.
# Qwen3 (``modeling_qwen3.py`` ``Qwen3DecoderLayer``, at 5dedf53b) runs its norms apart.
# ``ModelSpec.norm_in_allreduce``, priced by
# ``twin.costmodel.dense_pricing.DensePricing._norm_in_allreduce``.
TRTLLM_LLAMA_FUSION_MIN_HIDDEN = 4096


def trtllm_norm_in_allreduce(
    row: SiliconRow, model: ModelSpec, tp: int, dp: int
) -> tuple[bool, bool]:
    """(whether TensorRT-LLM ran ``row``'s norms inside its all-reduces, whether those
    also quantised the next GEMM's input: Llama's NVFP4 op) by the rules above."""
    if row.backend != "trtllm" or tp <= 1 or dp > 1:
        return False, False
    if model_named(row, ("gpt-oss",)) is not None:
        return True, False
    if model_named(row, ("llama-3",)) is None:
        return False, False
    fused = model.d_model > TRTLLM_LLAMA_FUSION_MIN_HIDDEN
    return fused, fused


# TensorRT-LLM's Qwen3 and Qwen3-MoE attention (``Qwen3Attention``, the one module both
# ``models/modeling_qwen3.py`` and ``models/modeling_qwen3_moe.py`` build; NVIDIA/
# TensorRT-LLM at 5dedf53b) is a ``QKNormRoPEAttention`` with ``fuse_qk_norm_rope``
# true: one ``fused_qk_norm_rope`` launch an attention layer, the per-head q/k norms and
# RoPE over the fused QKV (``ModelSpec.qk_norm_rope_pass``). By the checkpoint's
# ``model_type``, the configs' name for those two architectures.
TRTLLM_QK_NORM_ROPE_TYPES = ("qwen3", "qwen3_moe")


def trtllm_qk_norm_rope_pass(row: SiliconRow, model_type: str) -> bool:
    """Whether TensorRT-LLM ran ``row``'s q/k norms and RoPE as a pass of their own."""
    return row.backend == "trtllm" and model_type in TRTLLM_QK_NORM_ROPE_TYPES


def sglang_gdn_in_proj_gemms(row: SiliconRow, model: ModelSpec) -> int:
    """The GEMM launches of a GDN layer's input projection SGLang ran ``row`` with
    (``ModelSpec.gdn_in_proj_gemms``, above): 4 for Qwen3.5 on a release before 0.5.10 or
    a nightly built before 0.5.9's ``qwen3_5.py``; else 1."""
    from twin.costmodel.table_release import release_at_least, version_key

    if row.backend != "sglang" or not model.mixer_counts.get("gdn"):
        return 1
    if model_named(row, ("qwen3.5",)) is None:
        return 1
    release = row.backend_version
    if version_key(release) is not None:
        return 1 if release_at_least(release, SGLANG_GDN_SPLIT_BEFORE) else 4
    day = _NIGHTLY_DAY.match(release)
    if day is not None:
        return 4 if day.group(1) < SGLANG_0_5_9_QWEN35_DAY else 1
    return 4 if release == "nightly-dev" and harness_of(row) is INFERENCEMAX else 1
