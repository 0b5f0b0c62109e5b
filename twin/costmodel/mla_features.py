"""Features of the MLA kernel families (issue 34): FLOPs, bytes and extras of a shape.

Multi-head latent attention (``twin.mixers``, ``mla``) runs in two forms, and NVIDIA's
tables (``aiconfigurator-core`` 0.12.0, ``systems/data/<gpu>/mla*``) time them in the
same pieces the engines run:

- **prefill** (decompressed, "MHA"): kv_b_proj turns each visible key's latent into
  per-head K (nope) and V, the RoPE key is shared; attention per head at ``nope + rope``
  for QK and ``v`` for AV (TensorRT-LLM's collector: ``head_dim`` nope + rope,
  ``num_kv_heads`` = heads, ``v_head_dim`` v, ``collector/trtllm/collect_mla.py``);
- **decode** (absorbed, "MQA over the latent"): W_UK maps each head's q_nope into the
  latent (a batched GEMM per head, ``mla_bmm`` "pre"), attention reads each key's
  latent + RoPE key once for all heads (QK at ``kv_lora_rank + rope``, AV at
  ``kv_lora_rank``), W_UV maps the result back (``mla_bmm`` "post");
- **the module** (vLLM's ``DeepseekV2MLAAttention`` forward, TensorRT-LLM's
  ``DeepseekV3Attention``: ``collector/{vllm,trtllm}/collect_mla_module.py``): the
  above plus q_a / kv_a (one replicated GEMM, ``fused_qkv_a_proj``), q_b and o_proj,
  without the layer's pre-norm and all-reduce.

Every function here is per GPU: ``heads`` is the rank's share (``n_heads / tp``), the
latent is whole on every rank. Counts may be arrays (a run of decode steps), as in
``twin.costmodel.features``. Pure Python.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from twin.costmodel.engine_kernels import BLACKWELL_SM100, HOPPER
from twin.costmodel.features import (
    DECODE_PACKED_ROWS,
    Sums,
    gemm_sums_at,
    next_power_of_two,
    replay_l2,
    replay_resident,
    tile_waves,
)


class MlaDims(NamedTuple):
    """One GPU's MLA widths (``twin.mixers``' field names; ``heads`` the rank's)."""

    d_model: int
    q_lora: int  # 0: one q_proj from d_model
    kv_lora: int
    nope: int
    rope: int
    v: int
    heads: int


def mla_prefill_sums(
    queries: Sums,
    keys: Sums,
    kv_rows: Sums,
    sequences: Sums,
    dims: MlaDims,
    e: int,
    kv_e: int,
) -> tuple[Sums, Sums, Sums, Sums]:
    """(FLOPs, bytes, tiles, keys per sequence) of prefill chunks' MLA attention kernel in
    the decompressed form, batched in one launch: QK^T at ``nope + rope`` and AV at
    ``v`` per head and query-key pair; Q in and O out per query, the decompressed K and V
    of every visible row per head (at ``kv_e``: an fp8 cache runs the FMHA on fp8 K/V)
    and the new rows' latent written to the cache. A tile is one (sequence, head): the
    heads do not share K/V in this form."""
    h, qk = dims.heads, dims.nope + dims.rope
    flops = 2.0 * h * (qk + dims.v) * keys
    per_head = float(h * (qk + dims.v))
    nbytes = e * queries * per_head + kv_e * (
        kv_rows * per_head + queries * (dims.kv_lora + dims.rope)
    )
    return flops, nbytes, float(h) * sequences, kv_rows / sequences


# Query rows one CTA of the context (prefill) attention kernel computes: the trtllm-gen
# FMHA runner's default ``mTileSizeQ(128)`` (``SelectKernelParams`` in flashinfer-python
# 0.6.1 ``include/flashinfer/trtllm/fmha/fmhaRunnerParams.h``; the kernels SGLang's
# ``trtllm_mla`` backend and TensorRT-LLM's Blackwell attention run; only the MLA
# generation kernels pick another, ``fmhaKernels.cuh`` ``selectMlaGenerationKernel``).
# The grid is one CTA per (sequence, head, 128-row query tile).
MLA_PREFILL_TILE_Q = 128


def mla_prefill_waves(queries: Sums, sequences: Sums, heads: int, sms: int) -> Sums:
    """Waves of CTAs a prefill launch runs over ``sms`` SMs: one CTA per sequence, head
    and ``MLA_PREFILL_TILE_Q`` query rows (a batch of chunks at their mean length), one CTA
    a SM at a time, ``ceil(ctas / sms)``. Each wave costs about one CTA's time whatever
    the other SMs do: the steps of NVIDIA's context tables as the prompts or the batch
    cross a multiple of the SMs (``formulas``: the serial ``waves`` feature)."""
    tiles = -(-(queries / sequences) // MLA_PREFILL_TILE_Q)
    return -(-(sequences * heads * tiles) // sms)


# Query heads one thread block of an MLA decode kernel computes against each key block:
# FlashMLA's 64 (deepseek-ai/FlashMLA, docs/20250422-new-kernel-deep-dive.md: a CTA holds
# 64 query rows, h_q x s_q), which FlashInfer's and TensorRT-LLM's MLA decode kernels
# share. NVIDIA's tables show it on every engine: at a given batch and context the time is
# flat from 1 to 64 heads on the rank and nearly doubles at 128 (H200 TensorRT-LLM 1.3,
# batch 256, 65,535 cached tokens: 4.23 ms at 1 head, 4.31 at 64, 7.11 at 128).
MLA_DECODE_HEAD_TILE = 64


def decode_head_tiles(heads: int) -> int:
    """Blocks of ``MLA_DECODE_HEAD_TILE`` query heads a decode kernel runs per sequence."""
    return -(-heads // MLA_DECODE_HEAD_TILE)


# GPUs whose MLA decode kernels are trtllm-gen's MLA generation kernels: SGLang's
# ``trtllm_mla`` backend and TensorRT-LLM's attention on the SM100-family Blackwell parts
# (NVIDIA's decode tables on these GPUs: SGLang 0.5.14 ``kernel_source`` trtllm_mla,
# TensorRT-LLM 1.3.0rc20 ``default``): ``engine_kernels.BLACKWELL_SM100``. The RTX PRO 6000
# (SM120) runs other kernels.
TRTLLM_GEN_GPUS = BLACKWELL_SM100
# The ``kernel_source`` of SGLang's trtllm-gen MLA backend in NVIDIA's tables.
TRTLLM_MLA_SOURCE = "trtllm_mla"
# trtllm-gen's MLA generation constants (flashinfer-python 0.6.1
# ``include/flashinfer/trtllm/fmha/fmhaKernels.cuh``, ported from TensorRT-LLM's
# trtllm-gen FMHA runner): the low-latency kernel's query heads a CTA
# (``SwapsMmaAbForGeneration``), the high-throughput kernel's, the fewest keys one CTA of a
# split takes, the keys a CTA of the low-latency kernel may be left with, the most splits
# reduced in a cluster's shared memory (more go through global memory).
TRTLLM_GEN_LL_HEADS = 16
TRTLLM_GEN_HT_HEADS = 64
TRTLLM_GEN_KEYS_PER_CTA = 256
TRTLLM_GEN_LL_MAX_KEYS = 1024
TRTLLM_GEN_CGA_SPLITS = 16


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class MlaGenLaunch(NamedTuple):
    """One trtllm-gen MLA generation launch (:func:`trtllm_gen_launch`)."""

    low_latency: bool  # the 16-heads-a-CTA kernel (else 64 heads a CTA)
    two_cta: bool  # 128 heads on a pair of CTAs that share the keys they load
    grid: int  # CTAs before the KV split: sequences x head CTAs
    splits: int  # CTAs each sequence's keys are split over
    reduction: str  # the splits' partial outputs reduced: "none", "cga" or "gmem"
    dim_split: bool  # the 512-wide output split over two CTAs (each reads the keys)

    @property
    def ctas(self) -> int:
        """CTAs launched."""
        return self.grid * self.splits * (2 if self.dim_split else 1)

    def kv_passes(self, batch: int) -> int:
        """How many CTAs read each key of a sequence: its head CTAs (one for a pair that
        shares them), twice where the output is split."""
        heads = 1 if self.two_cta else self.grid // batch
        return heads * (2 if self.dim_split else 1)


def trtllm_gen_launch(batch: int, keys: int, heads: int, sms: int) -> MlaGenLaunch:
    """trtllm-gen's MLA generation launch for ``batch`` sequences of ``keys`` keys with
    ``heads`` query rows each, as its runner picks it (``fmhaKernels.cuh``, see
    ``TRTLLM_GEN_GPUS``): ``selectMlaGenerationKernel`` runs the low-latency kernel at
    <= 32 heads, or when a sequence's keys split at 256 a CTA leave <= 1,024 keys a CTA
    and its CTAs fit the SMs; else the high-throughput one (two CTAs at 128 heads);
    ``computeCtaAndClusterConfig`` splits each sequence's keys over
    ``min(ceil(keys / 256), max(1, sms // grid))`` CTAs, reducing 2-16 splits in a
    cluster's shared memory (low-latency kernel) and more in global memory, and splits the
    512-wide output over two CTAs when a global-memory reduction still leaves half the SMs
    idle."""
    ll_grid = batch * _cdiv(heads, TRTLLM_GEN_LL_HEADS)
    ll_splits = min(_cdiv(keys, TRTLLM_GEN_KEYS_PER_CTA), max(1, sms // ll_grid))
    low = heads <= 2 * TRTLLM_GEN_LL_HEADS or (
        _cdiv(keys, ll_splits) <= TRTLLM_GEN_LL_MAX_KEYS and ll_grid <= sms
    )
    two_cta = not low and heads == 2 * TRTLLM_GEN_HT_HEADS
    per_cta = TRTLLM_GEN_LL_HEADS if low else TRTLLM_GEN_HT_HEADS
    grid = batch * (2 if two_cta else _cdiv(heads, per_cta))
    splits = min(_cdiv(keys, TRTLLM_GEN_KEYS_PER_CTA), max(1, sms // grid))
    if splits <= 1:
        reduction = "none"
    elif low and splits <= TRTLLM_GEN_CGA_SPLITS:
        reduction = "cga"
    else:
        reduction = "gmem"
    dim_split = reduction == "gmem" and not two_cta and grid * splits * 2 <= sms
    return MlaGenLaunch(low, two_cta, grid, splits, reduction, dim_split)


# FlashAttention-3, the kernel SGLang's ``fa3`` backend runs MLA decode with on Hopper
# (NVIDIA's H100 / H200 decode tables: SGLang 0.5.14 ``kernel_source`` flash_attention),
# over a bf16 cache: the latent's RoPE part as the head dim (64) and the latent as the value
# dim (512), one KV head. Read in Dao-AILab/flash-attention ``hopper/`` (commits 07602adc,
# 13d0fd9c): ``tile_size_fwd_sm90`` gives 64 x 64 tiles (query rows x keys) at head dim 64,
# value dim 512, 2-byte elements; ``flash_api.cpp`` ``get_num_splits`` packs the query heads
# into the query rows (``seqlen_q * h / h_k``) and passes ``heuristics.h``
# ``num_splits_heuristic`` the m-blocks of the batch, the SMs, the key blocks and at most
# 128 splits: no split once the m-blocks fill 80% of the SMs (unless one KV head exceeds
# a 50 MiB L2 and the m-blocks are twice the SMs) or at <= 4 key blocks; else the fewest
# splits whose wave efficiency is >= 85% of the best. The split outputs are reduced by a
# combine kernel (``run_mha_fwd_combine``).
FA3_BLOCK_M = DECODE_PACKED_ROWS  # 64
FA3_BLOCK_N = 64
FA3_MAX_SPLITS = 128
FA3_L2_BYTES = 50 * 1024 * 1024


def fa3_num_splits(
    m_blocks_total: int, sms: int, n_blocks: int, m_blocks: int, kv_head: int
) -> int:
    """FlashAttention-3's split count (``num_splits_heuristic``, see ``FA3_BLOCK_M``):
    ``m_blocks_total`` the batch's query-row blocks, ``n_blocks`` a sequence's key
    blocks, ``m_blocks`` a sequence's query-row blocks, ``kv_head`` one KV head's bytes."""
    if m_blocks_total >= 0.8 * sms:
        if kv_head > FA3_L2_BYTES and m_blocks >= 2 * sms:
            return min(_cdiv(kv_head, FA3_L2_BYTES), FA3_MAX_SPLITS)
        return 1
    if n_blocks <= 4:
        return 1
    most = min(FA3_MAX_SPLITS, sms, n_blocks)
    eff = []
    for splits in range(1, most + 1):
        waves = m_blocks_total * splits / sms
        eff.append(waves / -(-waves // 1))
    best = max(eff)
    return next(i + 1 for i, x in enumerate(eff) if x >= 0.85 * best)


# The decode kernel's launch features (``formulas``: ``mla_decode``'s last five): its
# CTAs and their waves over the SMs (compute side: a CTA's fixed work), then after the
# smooth maximum the key bytes read again by a sequence's other CTAs, the split partial
# outputs' elements a reduction writes and reads, and the keys one SM streams along the
# launch's critical path (FA3's: a split's keys times the waves).
LaunchSums = tuple[float, float, float, float, float]
NO_LAUNCH: LaunchSums = (0.0, 0.0, 0.0, 0.0, 0.0)
# SGLang's Triton MLA decode (NVIDIA's L40S and RTX PRO 6000 decode tables: SGLang 0.5.14
# ``kernel_source`` triton), read in the sglang 0.5.14 wheel: ``layers/attention/
# triton_ops/decode_attention.py`` ``_decode_grouped_att_m_fwd`` launches stage 1 on the
# grid ``(batch, cdiv(heads, min(BLOCK_H, kv_group_num)), MAX_KV_SPLITS)`` with
# ``BLOCK_H = 16`` (MLA's one latent KV head makes ``kv_group_num`` the heads; one head
# takes ``decode_attention_fwd_normal``, the same grid), every program past its sequence's
# splits exiting at once; ``_decode_softmax_reducev_fwd`` reduces on ``(batch, heads)``,
# each program looping over all ``MAX_KV_SPLITS``. ``triton_backend.py``:
# ``_mla_decode_kv_splits_cap`` raises MAX_KV_SPLITS from ``triton_attention_num_kv_splits``
# (``server_args.py``: 8) to ``min(next_power_of_2(SMs), next_power_of_2(cdiv(context_len,
# _MLA_DECODE_MIN_BLOCK_KV = 32)))``: the SMs' power of two for any model of >= 32 x that
# many tokens of context (8,192 at 256; every MLA preset; DeepSeek-V3's 163,840 in the
# tables); ``metadata.py`` ``get_num_kv_splits_triton`` splits each sequence of ``L`` keys
# over ``min(cdiv(int(SMs x max(log2(L / 64), 1)), batch x head blocks), MAX_KV_SPLITS)``
# chunks (equal lengths: the batch's spread term is one split). NVIDIA's tables show the
# grid: at 2 keys a sequence the time grows with batch x head blocks (L40S, 16 heads: 56 us
# at batch 64, 194 at 256; x1.9 at 32 heads, x3.8 at 64), the empty split programs'.
TRITON_DECODE_BLOCK_H = 16
TRITON_MIN_KV_SPLITS = 8
TRITON_SOURCE = "triton"


def triton_max_kv_splits(sms: int) -> int:
    """SGLang's Triton MLA decode ``MAX_KV_SPLITS`` on ``sms`` SMs (``TRITON_DECODE_BLOCK_H``)."""
    return max(TRITON_MIN_KV_SPLITS, next_power_of_two(sms))


def triton_num_kv_splits(batch: int, keys: int, blocks: int, sms: int) -> int:
    """The splits ``get_num_kv_splits_triton`` gives ``batch`` sequences of ``keys`` keys
    with ``blocks`` head blocks each (``TRITON_DECODE_BLOCK_H``)."""
    cores = int(sms * max(math.log2(keys / 64.0), 1.0))
    most = min(_cdiv(cores, batch * blocks), triton_max_kv_splits(sms))
    return _cdiv(keys, _cdiv(keys, most))


# The rules read: trtllm-gen's MLA generation kernels, FlashAttention-3, SGLang's Triton,
# TensorRT-LLM's FMHA v2 MLA generation and its FlashMLA on Hopper (``kernel_decode_rule``).
DECODE_RULES = ("trtllm_gen", "fa3", "triton", "fmha_v2", "flashmla")
FA3_GPUS = HOPPER  # compute capability 9.0 (``engine_kernels.HOPPER``)


# The ``kernel_source`` labels of tables whose decode kernel is trtllm-gen's MLA generation
# kernel on ``TRTLLM_GEN_GPUS``: SGLang's ``trtllm_mla`` backend, TensorRT-LLM's attention
# (``default``) and vLLM's ``FLASHINFER_MLA`` backend (its module tables' label), whose
# ``FlashInferMLAImpl.forward_mqa`` calls FlashInfer's
# ``trtllm_batch_decode_with_kv_cache_mla`` for the head counts trtllm-gen tiles (every
# power of two; ``vllm/v1/attention/backends/mla/flashinfer_mla.py``, vllm-project/vllm
# main at 002d68e; the backend ``supports_compute_capability`` major 10 only).
TRTLLM_GEN_SOURCES = frozenset({TRTLLM_MLA_SOURCE, "default", "FLASHINFER_MLA"})


def decode_rule(gpu: str, kernel_source: str, kv_e: float) -> str | None:
    """The split rule of the MLA decode kernel a table (or the fit made from it) times:
    trtllm-gen on ``TRTLLM_GEN_GPUS`` (``TRTLLM_GEN_SOURCES``), FlashAttention-3 over a
    bf16 cache on Hopper (``flash_attention``; its fp8 path has no 64 / 512 kernel,
    ``flash_api.cpp`` instantiates that pair for 16-bit elements only), SGLang's Triton
    kernel on any GPU (``TRITON_SOURCE``); None for the rest
    (no rule read: the fit prices the 64-head blocks alone, ``tiles``)."""
    if gpu in TRTLLM_GEN_GPUS and kernel_source in TRTLLM_GEN_SOURCES:
        return "trtllm_gen"
    if gpu in FA3_GPUS and kernel_source == "flash_attention" and kv_e == 2:
        return "fa3"
    if kernel_source == TRITON_SOURCE:
        return "triton"
    return None


# TensorRT-LLM's MLA generation where neither trtllm-gen (SM100) nor FlashMLA runs:
# ``AttentionOp::mlaGeneration`` (``cpp/tensorrt_llm/common/attentionOp.cpp``, NVIDIA/
# TensorRT-LLM 00dbe288, its last branch) runs the FMHA v2 decoder runner with the rank's
# heads packed as query rows (``fmhaParams.qSeqLen = head_num x q_len``, one KV head): one
# CTA per sequence and block of 64 query rows, which streams every key of its sequence
# itself (no split across CTAs). NVIDIA's decode tables (TensorRT-LLM 1.0.0 on A100 and
# L40S, 1.3.0rc20 on the RTX PRO 6000, ``kernel_source`` default) show it: at 131,071 keys
# batches 1-32 of 16 heads take the same time (L40S 10.4-10.8 ms, A100 15.7-16.2, RTX PRO
# 6000 11.9-12.0 over a bf16 cache), 128 heads (two blocks) from half the batch on.
# H100 / H200 are not this kernel (their batch 1 at 131,071 keys takes 74 us: split;
# FlashMLA, ``FLASHMLA_GPUS``), nor the RTX PRO 6000 over an fp8 cache (128 heads 3-4x
# faster than 16 at 131,071 keys: another, split kernel, not read; it keeps no rule).
FMHA_V2_MLA_GPUS = frozenset({"a100-80gb", "l40s", "rtx-pro-6000"})
FMHA_V2_MLA_FP8_GPUS = frozenset({"a100-80gb", "l40s"})
FMHA_V2_MLA_ROWS = 64  # query rows a CTA (the tables: flat to 64 heads, two CTAs at 128)
TRTLLM_DEFAULT_SOURCE = "default"  # TensorRT-LLM's tables' ``kernel_source``

# TensorRT-LLM's MLA generation on Hopper is FlashMLA (``mUseGenFlashMLA``), over a bf16
# and an fp8 cache: the op takes it on SM90 with 64 tokens a KV block, which DeepSeek's
# 576-wide MLA forces there (aiconfigurator 095f58a5 ``collector/trtllm/collect_mla.py``
# ``_mla_tokens_per_block``, citing TensorRT-LLM v1.3.0rc20 ``_torch/model_config.py``,
# ``py_executor_creator.py`` and ``thop/attentionOp.cpp``; its fp8 cache has no other
# generation kernel there). Its launch (NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/common/
# attentionOp.cpp`` ``mlaGeneration``'s ``mUseGenFlashMLA`` branch and ``attentionOp.h``
# ``getFlashMlaNumSmParts``; ``cpp/tensorrt_llm/kernels/flashMLA/
# flash_fwd_mla_metadata.cu`` ``get_mla_metadata_kernel``, stored snapshots, the latter
# at 06f28ae8; ``block_size_m`` 64 in ``getFlashMlaNumSmParts``, ``block_size_n`` 64 and
# ``fixed_overhead_num_blocks`` 5 in the ``thop`` op that launches the latter): the grid is
# ``SMs / ceil(rows / 64)`` SM parts times the 64-row query blocks, one persistent CTA
# each; every sequence costs ``ceil(keys / 64)`` key blocks plus 5 blocks of fixed
# overhead, and each part takes in turn ``ceil(total / parts) + 5`` blocks' payload of the
# sequences in order, splitting a sequence where its payload ends (the split outputs
# reduced by a combine kernel). :func:`flashmla_schedule` replays that loop. NVIDIA's
# tables (H200 TensorRT-LLM 1.3.0rc20): flat in the heads from 1 to 64 and x1.6-2 at 128
# (two blocks), and at short contexts the time grows with the sequences a part takes
# times their heads (batch 256, 1 cached token: 22 us at 1 head, 36 at 64, 68 at 128):
# each sequence segment a CTA runs loads its query rows and writes their output.
FLASHMLA_GPUS = HOPPER
FLASHMLA_BLOCK_M = MLA_DECODE_HEAD_TILE  # ``block_size_m``: query rows a CTA (above)
FLASHMLA_BLOCK_N = 64  # ``block_size_n``: keys a block
FLASHMLA_OVERHEAD_BLOCKS = 5  # ``fixed_overhead_num_blocks``


class FlashMlaSchedule(NamedTuple):
    """FlashMLA's tile schedule of one launch (:func:`flashmla_schedule`)."""

    parts: int  # SM parts: persistent CTAs per query block
    m_blocks: int  # 64-row query blocks a sequence
    work: int  # the most key blocks (overhead blocks included) one part runs
    segments: int  # the most sequence segments one part runs
    split_outputs: int  # partial outputs of the sequences split over parts


def flashmla_schedule(batch: int, keys: int, rows: int, sms: int) -> FlashMlaSchedule:
    """FlashMLA's schedule of ``batch`` sequences of ``keys`` keys and ``rows`` query rows
    each on ``sms`` SMs (``get_mla_metadata_kernel``'s loop, see ``FLASHMLA_GPUS``)."""
    m_blocks = _cdiv(rows, FLASHMLA_BLOCK_M)
    parts = max(1, sms // m_blocks)
    n, extra = _cdiv(keys, FLASHMLA_BLOCK_N), FLASHMLA_OVERHEAD_BLOCKS
    payload = _cdiv(batch * (n + extra), parts) + extra
    idx = done = pieces = 0
    work = segments = split = 0
    for _ in range(parts):
        left, ran, segs = payload, 0, 0
        while idx < batch:
            rest = n - done
            if left >= rest + extra:
                left -= rest + extra
                ran, segs = ran + rest + extra, segs + 1
                split += pieces + 1 if pieces else 0
                idx, done, pieces = idx + 1, 0, 0
            else:
                if left - extra > 0:
                    done += left - extra
                    ran, segs, pieces = ran + left, segs + 1, pieces + 1
                break
        work, segments = max(work, ran), max(segments, segs)
    return FlashMlaSchedule(parts, m_blocks, work, segments, split)


def kernel_decode_rule(gpu: str, kernel_source: str, kv_e: float) -> str | None:
    """:func:`decode_rule` of an ``mla_decode*`` table (or its fit), with TensorRT-LLM's
    FMHA v2 MLA generation (``"fmha_v2"``, ``FMHA_V2_MLA_GPUS``) and its FlashMLA on Hopper
    (``"flashmla"``, ``FLASHMLA_GPUS``) where those run. The
    module tables keep :func:`decode_rule` (their fits were made without this rule)."""
    rule = decode_rule(gpu, kernel_source, kv_e)
    if rule is not None or kernel_source != TRTLLM_DEFAULT_SOURCE:
        return rule
    if gpu in FLASHMLA_GPUS:
        return "flashmla"
    if gpu in (FMHA_V2_MLA_FP8_GPUS if kv_e == 1 else FMHA_V2_MLA_GPUS):
        return "fmha_v2"
    return None


# The query-row block of a decode kernel whose block is wider than
# ``MLA_DECODE_HEAD_TILE``: SGLang's ``flash_attention`` decode over an fp8 cache on Hopper
# (NVIDIA's H100 / H200 decode tables, SGLang 0.5.14 ``kernel_source`` flash_attention,
# ``kv_cache_dtype`` fp8). Its time is flat in the rank's heads from 1 to 128 and grows with
# the sequence's keys times its blocks, not with the FLOPs (``aiconfigurator-core`` 0.12.0,
# H100 SGLang, batch 64, 8,191 cached tokens: 1,143 us at 1 head, 1,144 at 64, 1,163 at 128;
# batch 64 at 131,071 tokens and batch 1,024 at 8,191, the same keys in all, 17.3 and 18.2 ms
# at 16 and 128 heads): every block streams each key through its MMAs at 128 rows whatever
# the heads (the bf16 FA3 path's block is 64 rows, ``FA3_BLOCK_M``). The kernel's fp8 tile
# rule (FlashAttention-3 ``hopper/tile_size.h``, element size 1) was not read; 128 is the
# least block the tables agree with (they stop at 128 heads).
FA3_FP8_BLOCK_ROWS = 128


def decode_block_rows(gpu: str, kernel_source: str, kv_e: float) -> int | None:
    """The query rows one CTA of the decode kernel a table (or its fit) times takes when
    that is read (``FA3_FP8_BLOCK_ROWS``: Hopper's ``flash_attention`` over an fp8 cache);
    None for the rest (their 64-head blocks are the ``tiles`` feature alone)."""
    if gpu in FA3_GPUS and kernel_source == "flash_attention" and kv_e == 1:
        return FA3_FP8_BLOCK_ROWS
    return None


def decode_block_keys(block: int | None, kv_rows: Sums, rows: int) -> Sums:
    """The keys the decode kernel's query-row blocks stream in all (``kv_rows`` latent
    rows, ``rows`` query rows a sequence in blocks of ``block``; :func:`decode_block_rows`),
    a compute-side feature (``formulas``: ``mla_decode``'s ``block_keys``); zero without a
    block read."""
    if not block:
        return 0.0 * kv_rows
    return kv_rows * float(_cdiv(rows, block))


def mla_decode_launch(
    rule: str | None,
    sequences: int,
    kv_rows: int,
    width: int,
    dims: MlaDims,
    kv_e: float,
    sms: int,
) -> LaunchSums:
    """The decode kernel's launch features (``LaunchSums``) under ``rule``
    (:func:`decode_rule`) for ``sequences`` sequences reading ``kv_rows`` latent rows in
    all (each at their mean, ``ceil(kv_rows / sequences)``) with ``width`` query tokens a
    sequence, riding with its heads as more query rows (as the absorbed form packs them);
    zeros without a rule.

    trtllm-gen (:func:`trtllm_gen_launch`): its CTAs, waves, the keys its other head
    CTAs read again, a global-memory reduction's partials (no critical-path term: it
    measured no better). NVIDIA's decode tables show each (``aiconfigurator-core``
    0.12.0, B200 TensorRT-LLM 1.3.0rc20, bf16 KV): at 32 heads (the low-latency kernel,
    two CTAs a sequence, each reading every key) a long context takes longer than at 64
    heads (one high-throughput CTA); a fit without these features missed those series by
    30% and the small-batch 64- and 128-head rows the low-latency kernel takes by 20-50%.
    TensorRT-LLM's FlashMLA on Hopper (``"flashmla"``, :func:`flashmla_schedule`): the
    grid (one wave); in the waves slot the query rows the busiest part loads and writes,
    its sequence segments times the rows (the tables: +14 us at batch 256 from 1 to 64
    heads at one cached key, over a 22 us launch); the second query block's re-read keys;
    the split sequences' partial outputs; the busiest part's key blocks (with the
    scheduler's 5-block overhead a sequence) as keys. NVIDIA's H200 table, bf16 cache,
    held out: 6.0 / 23.5% -> 3.7 / 14.6%, 3.5 / 10.2% with :func:`decode_tiles`
    (docs/decisions.md, issue 34, helper ``mla-kern31``).
    FlashAttention-3 (:func:`fa3_num_splits`): one CTA per sequence, 64 query rows and
    split; each further 64-row block reads the keys again; a split's keys times the
    waves. SGLang's Triton kernel (``TRITON_DECODE_BLOCK_H``): the whole grid's programs,
    empty splits included; the waves of those with keys; each further 16-row block reads
    the keys again; the reduction's programs times the splits each loops over (in
    ``partials``); a split's keys times the waves. NVIDIA's L40S table: held out 14.0 /
    52.7% -> 7.2 / 29.5% (median / P90) with them. vLLM's ``TRITON_MLA`` (``"vllm_triton"``,
    the decode module's rule, :func:`module_decode_rule`): the same, its grid only the
    splits :func:`vllm_triton_num_kv_splits` gives, the reduction's partials each head's
    512-wide partial of every split. NVIDIA's L40S vLLM module table, bf16, fit rows
    (median / P90): 7.8 / 34.4% -> 4.9 / 29.3% with it (docs/decisions.md, issue 34, helper
    ``mla-module``)."""
    if rule is None or sequences <= 0 or not sms:
        return NO_LAUNCH
    seqs = int(sequences)
    keys = max(1, _cdiv(int(kv_rows), seqs))
    rows = dims.heads * width
    latent = kv_e * float(dims.kv_lora + dims.rope)
    if rule == "fmha_v2":  # one CTA a 64-row block streams all its sequence's keys
        blocks = _cdiv(rows, FMHA_V2_MLA_ROWS)
        ctas = seqs * blocks
        waves = _cdiv(ctas, sms)
        repeat = latent * kv_rows * (blocks - 1)
        return float(ctas), float(waves), repeat, 0.0, float(keys * waves)
    if rule == "flashmla":  # one wave of persistent CTAs; its waves slot: segment rows
        sched = flashmla_schedule(seqs, keys, rows, sms)
        repeat = latent * kv_rows * (sched.m_blocks - 1)
        return (
            float(sched.parts * sched.m_blocks),
            float(sched.segments * rows),
            repeat,
            float(sched.split_outputs * rows * dims.kv_lora),
            float(sched.work * FLASHMLA_BLOCK_N),
        )
    if rule == "trtllm_gen":
        launch = trtllm_gen_launch(seqs, keys, rows, sms)
        ctas, splits, passes = launch.ctas, launch.splits, launch.kv_passes(seqs)
        gmem, critical = launch.reduction == "gmem", 0.0
    elif rule in ("triton", "vllm_triton"):
        blocks = _cdiv(rows, TRITON_DECODE_BLOCK_H)
        if rule == "triton":  # SGLang: the grid holds the most splits, empty ones too
            grid = triton_max_kv_splits(sms)
            splits = triton_num_kv_splits(seqs, keys, blocks, sms)
            partials = float(seqs * rows * grid)
        else:  # vLLM's TRITON_MLA: every split has keys; each head's 512-wide partial
            grid = splits = vllm_triton_num_kv_splits(keys, sms)
            partials = float(seqs * rows * splits * dims.kv_lora)
        waves = _cdiv(seqs * blocks * splits, sms)
        repeat = latent * kv_rows * (blocks - 1)
        critical = float(_cdiv(keys, splits) * waves)
        return float(seqs * blocks * grid), float(waves), repeat, partials, critical
    else:
        m_blocks = _cdiv(rows, FA3_BLOCK_M)
        n_blocks = _cdiv(keys, FA3_BLOCK_N)
        splits = fa3_num_splits(seqs * m_blocks, sms, n_blocks, m_blocks, int(keys * latent))
        ctas, passes, gmem = seqs * m_blocks * splits, m_blocks, splits > 1
        critical = float(_cdiv(n_blocks, splits) * FA3_BLOCK_N * _cdiv(ctas, sms))
    repeat = latent * kv_rows * (passes - 1)
    partials = float(seqs * rows * splits * dims.kv_lora) if gmem else 0.0
    return float(ctas), float(_cdiv(ctas, sms)), repeat, partials, critical


# TensorRT-LLM's generation ropes the queries (and over an fp8 cache quantises them) in a
# kernel of its own before the attention kernel, on every GPU: ``mla_rope_generation``
# (``cpp/tensorrt_llm/thop``), which NVIDIA's collector times with the kernel
# (aiconfigurator 095f58a5 ``collector/trtllm/collect_mla.py``: ``kernel_func`` calls
# ``attn_mla.mla_rope_generation`` then ``attn_mla.forward``, TensorRT-LLM 1.3.0rc20).
# Its launch (NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/kernels/mlaKernels.cu``
# ``invokeMLARopeGeneration``, stored snapshot 2423fe2a; the same grid in every stored
# version): ``divUp(acc_q_len, 32)`` x ``head_num + 1 + 8`` blocks of 256 threads, plus
# ``head_num * 8`` rows over an fp8 cache (the query's 512-wide nope part quantised, 8
# blocks a head): a block per 32 query tokens and grid row, flat in the tokens below 32.
TRTLLM_ROPE_TOKENS = 32  # query tokens a block (``divUp(acc_q_len, 32)``)
TRTLLM_ROPE_EXTRA_ROWS = 1 + 8  # grid rows beyond the heads (the latent's and 8 more)
TRTLLM_ROPE_FP8_ROWS = 8  # grid rows a head more over an fp8 cache (the quantise-copy)


# SGLang's ``trtllm_mla`` decode prepares the query row by row before trtllm-gen's kernel
# (sglang 0.5.14, the release of NVIDIA's Blackwell SGLang decode tables:
# ``python/sglang/srt/layers/attention/trtllm_mla_backend.py``
# ``TRTLLMMLABackend.forward_decode``): over an fp8 cache ``mla_quantize_and_rope_for_fp8``
# (``layers/attention/utils.py``: FlashInfer's ``mla_rope_quantize_fp8``) ropes each
# query row's 64-wide part and quantises its 512 + 64 elements into a new
# ``[tokens, heads, 576]`` tensor; over a bf16 cache ``concat_mla_absorb_q_general``
# concatenates each row's nope and rope parts into one (``jit_kernel/concat_mla.py``
# ``concat_mla_absorb_q``); the kernel then writes each row's 512-wide output. Its table
# times that whole ``forward_decode``: aiconfigurator's collector calls the
# ``RadixAttention`` layer with ``q_rope``, ``k_rope`` and ``cos_sin_cache``
# (ai-dynamo/aiconfigurator 095f58a5 ``collector/sglang/collect_mla.py`` ``run_mla``,
# ``kernel_source`` trtllm_mla on SM100 / SM103): work that scales with the query rows
# (queries x heads), not with a sequence's 64-row blocks: :func:`decode_tile_rule` gives
# ``"query_rows"`` for ``TRTLLM_MLA_SOURCE`` on ``TRTLLM_GEN_GPUS``.


def decode_tile_rule(gpu: str, kernel_source: str, kv_e: float) -> str | None:
    """What the ``tiles`` feature of an ``mla_decode*`` table (or its fit) counts
    (:func:`decode_tiles`): ``"query_rows"`` for TensorRT-LLM's FlashMLA on Hopper
    (:func:`kernel_decode_rule` ``"flashmla"``) and for SGLang's ``trtllm_mla`` backend on
    ``TRTLLM_GEN_GPUS`` (both caches: its query preparation row by row before trtllm-gen,
    above), ``"rope_grid"`` for TensorRT-LLM's trtllm-gen
    generation on ``TRTLLM_GEN_GPUS`` (``default`` source, both caches: TensorRT-LLM's
    rope kernel's grid); None for the rest (a sequence's 64-row blocks; vLLM's FlashInfer
    MLA among them)."""
    rule = kernel_decode_rule(gpu, kernel_source, kv_e)
    if rule == "flashmla" or (rule == "trtllm_gen" and kernel_source == TRTLLM_MLA_SOURCE):
        return "query_rows"
    if rule == "trtllm_gen" and kernel_source == TRTLLM_DEFAULT_SOURCE:
        return "rope_grid"
    return None


def trtllm_rope_grid(queries: Sums, heads: int, kv_e: float) -> Sums:
    """The blocks of TensorRT-LLM's generation rope kernel for ``queries`` query tokens in
    all at ``heads`` heads a rank, over a cache of ``kv_e`` bytes an element (the quantise
    rows over an fp8 cache; ``TRTLLM_ROPE_TOKENS``)."""
    rows = heads + TRTLLM_ROPE_EXTRA_ROWS + (TRTLLM_ROPE_FP8_ROWS * heads if kv_e == 1 else 0)
    return -(-queries // TRTLLM_ROPE_TOKENS) * float(rows)


def decode_tiles(rule: str | None, tiles: Sums, queries: Sums, heads: int, kv_e: float) -> Sums:
    """The decode kernel's ``tiles`` feature under ``rule`` (:func:`decode_tile_rule`):
    ``"query_rows"``, the batch's query rows (``queries`` query tokens x ``heads``) for
    TensorRT-LLM's FlashMLA (``FLASHMLA_GPUS``), whose generation ropes each row (and over
    an fp8 cache quantises it) in its rope kernel before the kernel and loads and writes
    each, and for SGLang's ``trtllm_mla`` on ``TRTLLM_GEN_GPUS``, whose ``forward_decode``
    concatenates each row (bf16 cache) or ropes and quantises it (fp8) before trtllm-gen;
    ``"rope_grid"``, that rope kernel's blocks (:func:`trtllm_rope_grid`) before
    trtllm-gen; ``tiles`` (a sequence's 64-row blocks, :func:`mla_absorbed_sums`) for the
    rest. NVIDIA's TensorRT-LLM tables, held out (median / P90 %): H200 with the FlashMLA
    launch, bf16 cache 3.7 / 14.6 -> 3.5 / 10.2 and fp8 4.8 / 19.0 -> 3.8 / 12.6 with the
    rows (the rope grid instead: 3.6 / 12.0 and 4.6 / 15.6; docs/decisions.md, issue 34,
    helper ``mla-kern31``); Blackwell's fp8 cache with the rope grid, fit rows, B200 6.4 /
    20.0 -> 4.5 / 14.2 (the rows instead 5.0 / 13.6; helper ``rope32``). NVIDIA's SGLang
    0.5.14 Blackwell tables with the rows instead of the 64-row blocks, fit rows, every
    family better: B200 bf16 5.1 / 14.5 -> 4.8 / 14.3, fp8 4.5 / 16.1 -> 3.9 / 13.5; B300
    4.2 / 15.1 -> 4.1 / 14.5, 5.7 / 17.0 -> 5.1 / 15.1; GB200 4.6 / 14.9 -> 4.1 / 14.1, 4.9 /
    15.5 -> 4.2 / 13.6; GB300 4.7 / 14.5 -> 4.4 / 14.0, 4.4 / 15.0 -> 3.9 / 13.3 (helper
    ``mla35``)."""
    if rule == "query_rows":
        return queries * float(heads)
    if rule == "rope_grid":
        return trtllm_rope_grid(queries, heads, kv_e)
    return tiles


def mla_decode_sums(
    batch: Sums, keys: Sums, dims: MlaDims, e: int, kv_e: int
) -> tuple[Sums, Sums, Sums, Sums]:
    """(FLOPs, bytes, tiles, keys per sequence) of ``batch`` decode queries over ``keys``
    keys in all, MLA's absorbed form: :func:`mla_absorbed_sums` of one query token a
    sequence. Affine in ``keys`` with no constant FLOPs or score elements (as
    ``features.attn_decode_sums``, which ``decode_pricing.affine_in_keys`` relies on)."""
    return mla_absorbed_sums(batch, batch, keys, keys, 1, dims, e, kv_e)


def mla_absorbed_sums(
    sequences: Sums,
    queries: Sums,
    keys: Sums,
    kv_rows: Sums,
    width: int,
    dims: MlaDims,
    e: int,
    kv_e: float,
) -> tuple[Sums, Sums, Sums, Sums]:
    """(FLOPs, bytes, tiles, keys per sequence) of MLA's absorbed form over ``queries``
    query tokens of ``sequences`` sequences (at most ``width`` a sequence), ``keys``
    query-key pairs in all, each sequence's ``kv_rows`` latent rows read once: per head
    and pair QK^T at ``kv_lora + rope`` and AV at ``kv_lora``; the absorbed query in and
    the latent output out per head and query. A sequence's query tokens ride with its
    heads as query rows (FlashMLA's ``h_q x s_q``), padded to whole blocks of
    ``MLA_DECODE_HEAD_TILE``; a tile is one (sequence, block)."""
    lat, rope = dims.kv_lora, dims.rope
    blocks = decode_head_tiles(dims.heads * width)
    flops = 2.0 * dims.heads * (2 * lat + rope) * keys
    nbytes = e * queries * float(dims.heads * (2 * lat + rope)) + kv_e * float(lat + rope) * kv_rows
    return flops, nbytes, float(blocks) * sequences + 0.0 * keys, kv_rows / sequences


# The attention-kernel tables' replays (``mla_prefill*`` and ``mla_decode*``): the
# collectors time one call captured in a CUDA graph and replayed on the same buffers, with
# no L2 flush between (ai-dynamo/aiconfigurator 095f58a51: ``collector/trtllm/collect_mla.py``
# and ``collector/sglang/collect_mla.py`` call ``collector/helper.py``
# ``benchmark_with_power``, whose ``use_cuda_graph`` defaults to True; 070f5afd's TensorRT-LLM
# ``run_mla`` replays ``g.replay()`` ``test_ite`` times over one ``fused_q`` and
# ``latent_cache``). A working set that fits in ``features.REPLAY_L2_SHARE`` of L2 stays
# there from one replay to the next and is read at L2's rate, as the BMMs' and the
# modules' (:func:`module_replay_l2`). The tables step where it stops: NVIDIA's RTX PRO 6000
# TensorRT-LLM fp8-KV decode table (128 MB L2, 576 bytes a cached token) runs 18-28% over a
# fit without the term at batch x keys = 2^18 (151 MB) and sits on it at 2^17 (75 MB)
# (docs/decisions.md, issue 34, helpers ``mla36`` and ``mla37``); the L40S TensorRT-LLM
# prefill table (96 MB L2) steps 6x for 2x the work from 44 to 177 MB of Q, K, V, O and
# latent (helper ``mlamod37``).
KernelSums = tuple[Sums, Sums, Sums, Sums]


def kernel_replay_l2(sums: KernelSums, l2_bytes: float | None) -> tuple[KernelSums, Sums]:
    """An attention kernel's sums (:func:`mla_prefill_sums` / :func:`mla_decode_sums`:
    FLOPs, bytes, tiles, keys a sequence) with the bytes a kernel table's replays read from
    L2, and those L2 bytes (``formulas.MLA_KERNEL_REPLAY``): where all the kernel's bytes
    fit in an L2 of ``l2_bytes`` (``features.replay_resident``) they are read from L2, its
    HBM bytes zero; else nothing. ``l2_bytes`` None: nothing resident (a serving step:
    between two reads of one layer's cache every other layer's weights and cache stream
    through L2)."""
    flops, nbytes, tiles, seq = sums
    hbm, l2 = replay_l2(nbytes, l2_bytes)
    return (flops, hbm, tiles, seq), l2


def decode_kernel_features(
    sums: KernelSums, block_keys: Sums, launch: LaunchSums, l2: Sums = 0.0
) -> tuple[Sums, ...]:
    """The ``mla_decode*`` families' arguments in their formula's order
    (``formulas``: ``tiles``, ``seq_keys``, ``MLA_DECODE_BLOCK``, ``MLA_DECODE_LAUNCH``,
    ``MLA_KERNEL_REPLAY``, then ``MLA_DECODE_SERIAL``): the kernel's sums, its query-row
    blocks' keys (:func:`decode_block_keys`), its launch (:func:`mla_decode_launch`) and a
    table row's L2 bytes (:func:`kernel_replay_l2`; zero for a serving step)."""
    ctas, waves, repeat, partials, critical = launch
    return (*sums, block_keys, ctas, waves, l2, repeat, partials, critical)


# SGLang's sparse (DeepSeek-sparse-attention) prefill kernel, FlashMLA's
# ``flash_mla_sparse_fwd``, takes a multiple of 64 query heads on Hopper (128 on
# Blackwell): ``_forward_flashmla_sparse`` (``layers/attention/nsa_backend.py``, SGLang
# 0.5.9 and 0.5.10.post1) pads the rank's heads with zeros up to that (8 at tp 8 of
# GLM-5's 64 run as 64 on an H200), so the kernel's work is that of the padded heads.
# The backend runs it for a prefill batch whose longest sequence exceeds the model's
# ``index_topk`` (``set_nsa_prefill_impl``; below it MHA_ONE_SHOT, the dense form) where
# the prefill backend is ``flashmla_sparse``: Hopper's default over a bf16 cache
# (``server_args.py`` ``_set_default_nsa_backends``; an fp8 cache takes ``flashmla_kv``
# there, not read: no padding priced). Blackwell is not priced here: SGLang forces
# GLM-5's prefill onto sparse MLA there at every length, priced from its measured module
# (``KernelLayout.nsa_sparse_module``, ``twin.engine.kernel_layouts.
# SGLANG_DSA_SPARSE_MODULE``); a DSA model not forced keeps the dense form there.
SPARSE_PREFILL_HEAD_MULTIPLE = 64
SPARSE_PREFILL_GPUS = HOPPER


def sparse_prefill_heads(gpu: str, heads: int, kv_e: int) -> int:
    """The query heads SGLang's sparse prefill kernel runs for the rank's ``heads`` on
    ``gpu`` over a cache of ``kv_e`` bytes an element (above): ``heads`` rounded up to
    the kernel's multiple; 0 where the twin does not price that kernel (an fp8 cache,
    GPUs off Hopper)."""
    if gpu not in SPARSE_PREFILL_GPUS or kv_e != 2:
        return 0
    multiple = SPARSE_PREFILL_HEAD_MULTIPLE
    return -(-heads // multiple) * multiple


def mla_bmm_sums(
    rows: Sums, heads: int, k: int, n: int, e: int, act_e: float, w_e: float
) -> tuple[Sums, Sums, float]:
    """(FLOPs, bytes, weight elements) of one absorbed-decode batched GEMM: ``rows``
    tokens, per head a (rows x k) @ (k x n) product (W_UK: nope -> kv_lora; W_UV:
    kv_lora -> v), at the given operand bytes (``twin.precision.gemm_operand_bytes``)."""
    flops, nbytes, weights = gemm_sums_at(rows, k, n, e, act_e, w_e)
    return heads * flops, heads * nbytes, float(heads * weights)


# The absorbed BMMs' launch (``mla_bmm``, ``mla_bmm_fp8``). What NVIDIA's tables time
# (ai-dynamo/aiconfigurator ``collector/{sglang,trtllm,vllm}/collect_mla_bmm.py``): one
# batched GEMM over the rank's heads, ``torch.bmm`` / ``torch.ops.trtllm.bmm_out`` (cuBLAS)
# in bf16, sgl-kernel's ``bmm_fp8`` or TensorRT-LLM's ``fp8_block_scaling_bmm_out`` after
# the activation's quantisation kernel in fp8 (on SM100 TensorRT-LLM runs the bf16 BMM on
# weights dequantised at load), captured in a CUDA graph and replayed on the same buffers
# (``collector/helper.py`` ``benchmark_with_power``). So (a) the output tiles of every
# head run in waves over the SMs, each wave about one tile's time: the tables are
# staircases at small batches (B200 TensorRT-LLM bf16 W_UV, 128 heads: 4.5, 6.4, 8.5,
# 10.6 us as the tokens cross multiples of a wave); (b) a working set (weights, input,
# output) that fits in L2 stays there across the replays and is read at L2's rate, not
# HBM's: the tables step up where it stops fitting (H200 SGLang bf16 W_UV, 32 heads: 11.4
# us at 1,024 tokens, 42 MB, and 22.2 us at 1,536, 63 MB, against a 50 MB L2).
MLA_BMM_TILE = 128  # output rows and columns a CTA computes (cuBLAS's common bf16 tile)
# (c) The library picks the CTA tile by shape, and small or ragged launches run a smaller
# one: cuBLASLt's heuristic chooses among tiles from 64 x 64 up (NVIDIA cuBLAS
# ``cublasLtMatmulTile_t``: ``CUBLASLT_MATMUL_TILE_64x64`` ... ``_128x128``, ``_256x128``);
# 64 rows is one Hopper warpgroup's MMA (PTX ISA ``wgmma.mma_async`` shape m64nNk16); the
# fp8 BMMs run cuBLASLt too (sgl-kernel's ``bmm_fp8``, FlashInfer
# ``include/flashinfer/gemm/bmm_fp8.cuh``) or TensorRT-LLM's DeepGEMM-derived block-scaled
# kernel (``cpp/tensorrt_llm/thop/fp8BlockScalingGemm.cpp`` ``fp8_block_scaling_bmm_out``
# -> ``CutlassFp8BlockScaleGemmRunner::strideBatchGemm``, 1.3.0rc20), whose BLOCK_M is 64
# for small M (DeepGEMM ``get_best_configs``). The tables rise within one step of the
# 128 x 128 staircase: H200 SGLang bf16 W_UK at 128 heads, 512 such tiles (four waves on
# 132 SMs) from 1 to 128 tokens, takes 6.2, 7.7, 10.2 us at 32, 64, 128 tokens (64 x 64
# tiles: 1,024, 1,024, 2,048); L40S SGLang's steps every 32 tokens there (10.3, 18.7,
# 26.9, 34.8 us at 32, 64, 96, 128). Which tile a launch gets is the library's closed
# heuristic, so the form carries the 64 x 64 tiles' waves beside the 128 x 128 ones and
# the fit weighs the two (``small_waves``). On the 40 fits' train rows 64 x 64 and 64 x 128
# tie (27 fits meeting the target each, mean P90 12.49%; 64 x 64 the lower median of
# medians, 64 x 128 the lower median of P90s), 32 x 128 and 64 x 32 are behind; 64 x 64 is
# kept, DeepGEMM's 64-row block (docs/decisions.md, helpers bmm37 and train37).
MLA_BMM_SMALL_TILE = 64
# The share of L2 a working set may fill and still be read from L2 across the replays is
# ``features.REPLAY_L2_SHARE`` (chosen on these BMMs' fit rows, docs/decisions.md issue 34).


def mla_bmm_features(
    rows: Sums,
    heads: int,
    k: int,
    n: int,
    e: int,
    act_e: float,
    w_e: float,
    sms: int,
    l2_bytes: float | None,
) -> tuple[Sums, Sums, Sums, Sums, Sums]:
    """(FLOPs, HBM bytes, waves, L2 bytes, small-tile waves) of one absorbed-decode batched GEMM
    (:func:`mla_bmm_sums`' arguments) on a GPU of ``sms`` SMs and ``l2_bytes`` of L2 (None:
    nothing resident): the ``mla_bmm`` families' features. The working set is read from
    HBM, or, where it fits in ``features.REPLAY_L2_SHARE`` of L2, from L2 (its bytes then on the
    compute side of the smooth maximum, HBM bytes zero); ``waves`` =
    ``ceil(heads x ceil(rows / 128) x ceil(n / 128) / sms)`` and the small-tile waves the
    same over ``MLA_BMM_SMALL_TILE`` square tiles, 0 without an SM count (a profile of a
    GPU ``twin.hardware.SM_COUNTS`` lacks, as :func:`mla_decode_launch`)."""
    flops, nbytes, _ = mla_bmm_sums(rows, heads, k, n, e, act_e, w_e)
    waves = tile_waves(rows, n, sms, heads, MLA_BMM_TILE, MLA_BMM_TILE)
    small_waves = tile_waves(rows, n, sms, heads, MLA_BMM_SMALL_TILE, MLA_BMM_SMALL_TILE)
    hbm, l2 = replay_l2(nbytes, l2_bytes)
    return flops, hbm, waves, l2, small_waves


# TensorRT-LLM's fp8 absorbed BMM on SM120 (the RTX PRO 6000): what NVIDIA's tables time
# there (``kernel_source`` trtllm_fp8_block_scaling_bmm_out; ai-dynamo/aiconfigurator
# ``collector/trtllm/collect_mla_bmm.py`` at 095f58a5, serving's wrapper
# ``tensorrt_llm/_torch/modules/attention.py`` at 1.3.0rc20 as it cites) is the activation's
# quantisation, ``fp8_utils.per_token_quant_and_transform(need_permute102=True)``, then
# ``torch.ops.trtllm.fp8_block_scaling_bmm_out``. The quantisation is a Triton kernel
# (TensorRT-LLM ``tensorrt_llm/quantization/utils/fp8_utils.py``
# ``_per_token_quant_and_transform_kernel``) on a grid of (cdiv(k, 512), 64, heads)
# one-warp programs, each looping over every 64th token of its head in series: its time
# is the tokens a program takes, cdiv(tokens, 64), once per wave of programs over the
# SMs. The table shows it: 1 head of W_UV, 80 tokens 10.7 us against 6.6 at 64 (two
# steps a program, not one), 20,480 tokens 0.47 ms (320 steps), which the GEMM's 2.7
# GFLOP does not explain. SM89 / SM90 quantise with another (CUDA) kernel,
# ``fp8_batched_quantize_1x128_permute102``; SM100 runs a bf16 BMM (no quantisation).
TRTLLM_SM120_GPUS = frozenset({"rtx-pro-6000"})
TRTLLM_FP8_BMM_SOURCE = "trtllm_fp8_block_scaling_bmm_out"
QUANT_PROGRAMS = 64  # ``BLOCK_NUM_PER_EXPERT``: the programs per head (grid axis 1)
QUANT_BLOCK = 512  # ``BLOCK`` = quant_group_size x 4 elements a program's row (grid axis 0)
# Resident blocks per SM at compute capability 12.0 (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability": 32); the programs are one warp each.
SM120_BLOCKS_PER_SM = 32


def bmm_quant_rule(gpu: str, kernel_source: str) -> bool:
    """Whether the absorbed BMM a table (or the fit made from it) times runs the serial
    quantisation kernel first (TensorRT-LLM's fp8 BMM on SM120)."""
    return gpu in TRTLLM_SM120_GPUS and kernel_source == TRTLLM_FP8_BMM_SOURCE


def bmm_quant_steps(quant: bool, rows: Sums, heads: int, k: int, sms: int) -> Sums:
    """The ``quant_steps`` feature of ``mla_bmm*``: the tokens one quantisation program
    takes in series (cdiv(``rows``, ``QUANT_PROGRAMS``)) times the waves of its grid
    over ``sms`` SMs; 0 where ``quant`` is False (:func:`bmm_quant_rule`) or no SM count."""
    if not quant or not sms:
        return 0.0
    programs = -(-k // QUANT_BLOCK) * QUANT_PROGRAMS * heads
    return -(-rows // QUANT_PROGRAMS) * float(-(-programs // (sms * SM120_BLOCKS_PER_SM)))


# The absorbed BMM's reduction on its critical path (``mla_bmm*``'s serial ``k_steps``):
# each CTA of the batched GEMM loops over the reduction dimension ``k`` in steps of a K
# tile, each step waiting on the loads of its A and B slices; the throughput terms (FLOPs,
# bytes, the output tiles' waves at a constant each) do not carry that loop, so a small
# launch of W_UV (k = kv_lora = 512) costs more than one of W_UK (k = nope = 128) at the
# same FLOPs, bytes and fewer tiles. NVIDIA's tables show it at one wave: GB200 SGLang bf16
# (``sglang_torch_bmm``), 1-16 tokens at 8-32 heads: W_UK 4.8-5.3 us, W_UV 5.5-6.6 us;
# L40S TensorRT-LLM bf16, 2-64 tokens at 2-16 heads: W_UK 4.2-4.6 us, W_UV 5.3-5.9 us.
# The K tile: 64 elements of a 16-bit operand (CUTLASS 3.x's Hopper GEMMs, NVIDIA/cutlass
# ``examples/48_hopper_warp_specialized_gemm``: ``TileShape`` 128 x 128 x 64); both
# BMMs' ``k`` are multiples of it, so it only sets the feature's unit (the fit's
# coefficient is a step's time).
MLA_BMM_TILE_K = 64


def bmm_k_steps(k: int) -> float:
    """The ``k_steps`` feature of ``mla_bmm*``: the K-tile steps of one CTA's reduction
    loop, ``cdiv(k, MLA_BMM_TILE_K)`` (above); the same for every token count and head
    count of a BMM shape."""
    return float(-(-k // MLA_BMM_TILE_K))


def _gemms(
    gemms: list[tuple[Sums, int, int]], e: int, act_e: float, w_e: float
) -> tuple[Sums, Sums, float]:
    flops: Sums = 0.0
    nbytes: Sums = 0.0
    weights = 0.0
    for rows, k, n in gemms:
        f, b, w = gemm_sums_at(rows, k, n, e, act_e, w_e)
        flops, nbytes, weights = flops + f, nbytes + b, weights + w
    return flops, nbytes, weights


def _shared_projections(dims: MlaDims, tokens: Sums) -> list[tuple[Sums, int, int]]:
    """q_a + kv_a (one GEMM, replicated on every rank), q_b, o_proj over ``tokens``."""
    h, qk = dims.heads, dims.nope + dims.rope
    latent = dims.kv_lora + dims.rope
    if dims.q_lora:
        q = [(tokens, dims.d_model, dims.q_lora + latent), (tokens, dims.q_lora, h * qk)]
    else:
        q = [(tokens, dims.d_model, latent), (tokens, dims.d_model, h * qk)]
    return [*q, (tokens, h * dims.v, dims.d_model)]


def mla_projection_sums(
    dims: MlaDims, tokens: Sums, e: int, act_e: float, w_e: float
) -> tuple[Sums, Sums, float]:
    """(FLOPs, bytes, weight elements) of the projections every token runs through,
    whatever its phase: q_a and kv_a (vLLM's ``fused_qkv_a_proj``, ``disable_tp=True``:
    whole on every rank), q_b and o_proj (split by heads)."""
    return _gemms(_shared_projections(dims, tokens), e, act_e, w_e)


# What the module families' features are: (FLOPs, bytes, tiles, keys per sequence, the
# attention's KV bytes, the attention's FLOPs). The first two are the module's GEMMs and
# the attention's query/output traffic; the last two are priced after the smooth maximum
# (``formulas.MLA_MODULE_SERIAL``).
ModuleSums = tuple[Sums, Sums, Sums, Sums, Sums, Sums]


def module_attention_split(
    gemm_flops: Sums,
    gemm_bytes: Sums,
    attention: tuple[Sums, Sums, Sums, Sums],
    kv_bytes: Sums,
    tile_flops: Sums,
) -> ModuleSums:
    """The module's features from its GEMMs' sums and its attention kernel's
    (``attention``: FLOPs, bytes, tiles, keys per sequence): the attention's KV stream
    (``kv_bytes``, part of its bytes) and its FLOPs as computed by the tensor cores
    (``tile_flops``) come out of the smooth maximum as serial features.

    The module is a chain of kernels, each a launch of its own (vLLM's MLA common
    implementation, ``vllm/v1/attention/backends/mla/common.py`` in vllm-project/vllm:
    the q/kv projections, W_UK as a batched GEMM, the attention backend over the latent,
    W_UV as a batched GEMM, o_proj; the module collectors time that forward,
    ``collector/{vllm,trtllm}/collect_mla_module.py``), so the attention's time adds to
    the GEMMs' rather than hiding under them; one smooth maximum over the summed FLOPs
    and bytes priced a 64-head decode at a long context as compute-bound when it is
    bound by its KV stream (NVIDIA's module tables, ``aiconfigurator-core`` 0.12.0: B200
    vLLM bf16, 64 heads, batch 64, 65,535 cached tokens: the old form 1.5x the measured
    time). The query/output traffic and the per-tile and per-sequence terms stay in the
    smooth maximum."""
    _, ab, tiles, seq = attention
    return gemm_flops, gemm_bytes + (ab - kv_bytes), tiles, seq, kv_bytes, tile_flops


def mla_module_prefill_sums(
    dims: MlaDims,
    tokens: Sums,
    keys: Sums,
    kv_rows: Sums,
    sequences: Sums,
    e: int,
    act_e: float,
    w_e: float,
    kv_e: int,
) -> ModuleSums:
    """The module's features (``ModuleSums``) over prefill chunks: the projections,
    kv_b_proj over every visible row (the decompression of the cached context too:
    vLLM's chunked-context loop, SGLang's ``MHA_CHUNKED_KV``), the decompressed attention
    (its K and V of every visible row per head the KV stream; a tile is one sequence and
    head, nothing padded)."""
    h = dims.heads
    kv_b = (kv_rows, dims.kv_lora, h * (dims.nope + dims.v))
    gf, gb, _ = _gemms([*_shared_projections(dims, tokens), kv_b], e, act_e, w_e)
    attention = mla_prefill_sums(tokens, keys, kv_rows, sequences, dims, e, kv_e)
    kv_bytes = kv_e * kv_rows * float(h * (dims.nope + dims.rope + dims.v))
    return module_attention_split(gf, gb, attention, kv_bytes, attention[0])


def module_prefill_features(module: ModuleSums, waves: Sums) -> tuple[Sums, ...]:
    """The ``mla_module_prefill`` families' arguments in their formula's order
    (``formulas.MLA_MODULE_PREFILL_SERIAL``): the module's sums
    (:func:`mla_module_prefill_sums`) and, last, its context attention's waves of CTAs
    (:func:`mla_prefill_waves`, the ``mla_prefill`` kernel's feature: the module runs
    that kernel)."""
    return (*module, waves)


def mla_module_decode_sums(
    dims: MlaDims, batch: Sums, keys: Sums, e: int, act_e: float, w_e: float, kv_e: float
) -> ModuleSums:
    """The module's features (``ModuleSums``) over ``batch`` decode tokens reading
    ``keys`` keys in all: :func:`mla_module_absorbed_sums` of one query token a
    sequence."""
    return mla_module_absorbed_sums(dims, batch, batch, keys, keys, 1, e, act_e, w_e, kv_e)


def mla_module_absorbed_sums(
    dims: MlaDims,
    sequences: Sums,
    queries: Sums,
    keys: Sums,
    kv_rows: Sums,
    width: int,
    e: int,
    act_e: float,
    w_e: float,
    kv_e: float,
) -> ModuleSums:
    """The module's features (``ModuleSums``) in its absorbed form
    (:func:`mla_absorbed_sums`' arguments): the projections and the two absorbed BMMs
    over every query token (at the projections' operand bytes), and the attention: its
    KV stream each latent row read once, its FLOPs at whole blocks of
    ``MLA_DECODE_HEAD_TILE`` query rows (a CTA's MMA runs its 64 rows whatever the rank's
    heads: :func:`decode_head_tiles`)."""
    h = dims.heads
    gf, gb, _ = _gemms(_shared_projections(dims, queries), e, act_e, w_e)
    pf, pb, _ = mla_bmm_sums(queries, h, dims.nope, dims.kv_lora, e, act_e, w_e)
    of, ob, _ = mla_bmm_sums(queries, h, dims.kv_lora, dims.v, e, act_e, w_e)
    attention = mla_absorbed_sums(sequences, queries, keys, kv_rows, width, dims, e, kv_e)
    kv_bytes = kv_e * float(dims.kv_lora + dims.rope) * kv_rows
    rows = h * width
    padded = attention[0] * (decode_head_tiles(rows) * MLA_DECODE_HEAD_TILE / rows)
    return module_attention_split(gf + pf + of, gb + pb + ob, attention, kv_bytes, padded)


# vLLM's ``TRITON_MLA`` decode backend (the L40S / RTX PRO 6000 module tables'
# ``kernel_source``; vllm 0.24.0 wheel from PyPI, the tables' release):
# ``vllm/v1/attention/backends/mla/triton_mla.py`` ``TritonMLAImpl.forward_mqa`` splits each
# sequence's keys over ``num_kv_splits = min(next_power_of_2(max(1, max_seq_len // 512)),
# 2 x SMs)`` and calls ``vllm/v1/attention/ops/triton_decode_attention.py``
# ``decode_attention_fwd``: for the grouped heads of MLA's one latent head
# ``_decode_grouped_att_m_fwd``'s grid ``(batch, cdiv(heads, min(16, heads)), splits)``
# (``BLOCK_H`` 16, every program over ``cdiv(seq_len, splits)`` keys), then
# ``_decode_softmax_reducev_fwd``'s grid ``(batch, heads)``, each looping over every split's
# 512-wide partial. One head on the rank (``kv_group_num == 1``) runs
# ``decode_attention_fwd_normal`` over the same grid. Not SGLang's rule (``TRITON_SOURCE``:
# an SM- and batch-dependent split count, a fixed grid of ``MAX_KV_SPLITS``).
VLLM_TRITON_MLA_SOURCE = "TRITON_MLA"
VLLM_TRITON_MIN_WORK_PER_SPLIT = 512  # ``min_work_per_split``
VLLM_TRITON_OCCUPANCY = 2  # ``occupancy_multiplier``: at most 2 x SMs splits


def vllm_triton_num_kv_splits(keys: int, sms: int) -> int:
    """The splits vLLM's ``TRITON_MLA`` gives sequences of ``keys`` keys on ``sms`` SMs."""
    ideal = max(1, keys // VLLM_TRITON_MIN_WORK_PER_SPLIT)
    return min(next_power_of_two(ideal), VLLM_TRITON_OCCUPANCY * sms)


def module_decode_rule(gpu: str, kernel_source: str, kv_e: float) -> str | None:
    """The decode module's attention rule: ``"vllm_triton"`` for vLLM's ``TRITON_MLA``
    (``VLLM_TRITON_MLA_SOURCE``), else the attention kernels' (:func:`decode_rule`)."""
    if kernel_source == VLLM_TRITON_MLA_SOURCE:
        return "vllm_triton"
    return decode_rule(gpu, kernel_source, kv_e)


def module_replay_l2(module: ModuleSums, l2_bytes: float | None) -> tuple[ModuleSums, Sums]:
    """The module's sums (``ModuleSums``) with the bytes NVIDIA's module tables read from
    L2, and those L2 bytes (``formulas.MLA_MODULE_REPLAY``): where the whole module's
    working set (its GEMMs' weights and activations, the attention's query/output traffic
    and KV stream) fits in ``features.REPLAY_L2_SHARE`` of an L2 of ``l2_bytes``, all of it
    is read from L2 (its HBM bytes and KV stream zero); else nothing. ``l2_bytes`` None:
    nothing resident (a serving step: a layer's weights were last read a whole forward
    pass earlier).

    The module collectors time the module forward captured in a CUDA graph and replayed
    on the same buffers (ai-dynamo/aiconfigurator 095f58a51,
    ``collector/vllm/collect_mla_module.py``: ``benchmark_with_power(...,
    use_cuda_graph=True)`` for MLA generation and context; ``collector/helper.py``), so a
    working set that fits stays in L2 from one replay to the next, as for the BMMs and
    the fused MoE (``features.replay_resident``). The tables step where it stops fitting:
    vLLM 0.24.0's L40S decode module (96 MB L2), one sequence, 2 cached tokens: 96 us at
    16 heads (73 MB of bf16 weights) and 201 us at 32 (116 MB), where the HBM bytes alone
    say 85 and 134 us; a fit without the term priced the 16-head series 20-40% high and
    the 32-head one low."""
    flops, nbytes, tiles, seq, kv_bytes, attn_flops = module
    resident = replay_resident(nbytes + kv_bytes, l2_bytes)
    kept = 1 - resident
    return (flops, nbytes * kept, tiles, seq, kv_bytes * kept, attn_flops), (
        nbytes + kv_bytes
    ) * resident


def module_decode_features(
    module: ModuleSums, launch: LaunchSums, l2: Sums = 0.0
) -> tuple[Sums, ...]:
    """The ``mla_module_decode`` families' arguments in their formula's order
    (``formulas.MLA_MODULE_DECODE_EXTRAS``, ``MLA_MODULE_REPLAY``, ``MLA_MODULE_DECODE_SERIAL``):
    the module's sums (:func:`mla_module_absorbed_sums`) with its attention kernel's launch
    (:func:`mla_decode_launch`) beside them. The module runs the same decode kernel as the
    ``mla_decode`` families, so its CTAs and waves sit on the compute side and its re-read keys,
    split partials and critical path after the smooth maximum, as there (NVIDIA's B200 TensorRT-LLM
    module table, bf16: the 32-head long-context series, the low-latency kernel's two CTAs a
    sequence each reading every key, 30-40% above a fit without them; docs/decisions.md, issue 34,
    helper ``kernels``). ``l2``: a table row's bytes read from L2 (:func:`module_replay_l2`; zero
    for a serving step), on the compute side after the launch's (``formulas.MLA_MODULE_REPLAY``)."""
    flops, nbytes, tiles, seq, kv_bytes, attn_flops = module
    ctas, waves, repeat, partials, critical = launch
    return (
        *(flops, nbytes, tiles, seq, ctas, waves, l2),
        *(kv_bytes, attn_flops, repeat, partials, critical),
    )


__all__ = [
    "DECODE_RULES",
    "FA3_FP8_BLOCK_ROWS",
    "FA3_GPUS",
    "FMHA_V2_MLA_GPUS",
    "MLA_BMM_TILE",
    "MLA_BMM_TILE_K",
    "MLA_DECODE_HEAD_TILE",
    "MLA_PREFILL_TILE_Q",
    "NO_LAUNCH",
    "TRITON_DECODE_BLOCK_H",
    "TRITON_MIN_KV_SPLITS",
    "TRITON_SOURCE",
    "TRTLLM_GEN_GPUS",
    "TRTLLM_GEN_SOURCES",
    "TRTLLM_MLA_SOURCE",
    "TRTLLM_ROPE_EXTRA_ROWS",
    "TRTLLM_ROPE_FP8_ROWS",
    "TRTLLM_ROPE_TOKENS",
    "VLLM_TRITON_MIN_WORK_PER_SPLIT",
    "VLLM_TRITON_MLA_SOURCE",
    "VLLM_TRITON_OCCUPANCY",
    "KernelSums",
    "LaunchSums",
    "MlaDims",
    "MlaGenLaunch",
    "ModuleSums",
    "bmm_k_steps",
    "bmm_quant_rule",
    "bmm_quant_steps",
    "decode_block_keys",
    "decode_block_rows",
    "decode_head_tiles",
    "decode_kernel_features",
    "decode_rule",
    "decode_tile_rule",
    "fa3_num_splits",
    "kernel_decode_rule",
    "kernel_replay_l2",
    "mla_absorbed_sums",
    "mla_bmm_features",
    "mla_bmm_sums",
    "mla_decode_launch",
    "mla_decode_sums",
    "mla_module_absorbed_sums",
    "mla_module_decode_sums",
    "mla_module_prefill_sums",
    "mla_prefill_sums",
    "mla_prefill_waves",
    "mla_projection_sums",
    "module_attention_split",
    "module_decode_features",
    "module_decode_rule",
    "module_prefill_features",
    "module_replay_l2",
    "triton_max_kv_splits",
    "triton_num_kv_splits",
    "trtllm_gen_launch",
    "trtllm_rope_grid",
    "vllm_triton_num_kv_splits",
]
