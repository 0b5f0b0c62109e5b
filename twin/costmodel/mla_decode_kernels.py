"""The MLA decode attention kernels (issue 34): which kernel a table or an engine runs, and
its launch.

The rules read (``DECODE_RULES``): trtllm-gen's MLA generation kernels (SM100), FlashAttention-3
over a bf16 cache and TensorRT-LLM's FlashMLA on Hopper, SGLang's Triton kernel, TensorRT-LLM's
FMHA v2 MLA generation, vLLM's ``TRITON_MLA`` (the decode module's rule): each one's split of the
keys over CTAs, its grid and waves (``mla_decode_launch``), the decode kernel's query-row block
and ``tiles`` feature (TensorRT-LLM's rope grid, the query rows), and the ``mla_decode*``
families' arguments (``decode_kernel_features``). The kernels' FLOPs and bytes are
``mla_features``'; per GPU, counts as there. Pure Python.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from twin.costmodel.engine_kernels import BLACKWELL_SM100, HOPPER
from twin.costmodel.features import DECODE_PACKED_ROWS, Sums, next_power_of_two
from twin.costmodel.mla_features import MLA_DECODE_HEAD_TILE, KernelSums, MlaDims

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
    (``"flashmla"``, ``FLASHMLA_GPUS``) where those run. The decode module tables take the
    FMHA v2 launch too, not FlashMLA (:func:`module_decode_rule`)."""
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


# TensorRT-LLM's decode module runs the FMHA v2 MLA generation where its kernel tables do
# (``FMHA_V2_MLA_GPUS``): aiconfigurator's module collector builds TensorRT-LLM's own
# ``DeepseekV3DecoderLayer`` attention on the TensorRT-LLM attention backend
# (ai-dynamo/aiconfigurator ``collector/trtllm/collect_mla_module.py``, stored version
# 0757ab59), whose generation is ``AttentionOp::mlaGeneration``'s last branch there, as for
# the kernel tables. NVIDIA's RTX PRO 6000 module table (TensorRT-LLM 1.3.0rc20, bf16 cache)
# times the kernel table's launch plus the projections: 16 heads at 131,071 cached tokens,
# batches 1-32 12.0 ms (the kernel table 11.9-12.0), 128 heads (two 64-row CTAs a sequence)
# from batch 32 on. Fits without the launch priced its batch-32 and -128 series 10-20% high
# at every head count (docs/decisions.md, issue 34, helper mla44). TensorRT-LLM's Hopper
# modules (FlashMLA) keep no rule: their fits meet issue 34's target without it and feed
# served rows; the RTX PRO 6000's fp8-cache modules keep none (``FMHA_V2_MLA_FP8_GPUS``).
MODULE_KERNEL_RULES = frozenset({"fmha_v2"})


def module_decode_rule(gpu: str, kernel_source: str, kv_e: float) -> str | None:
    """The decode module's attention rule: ``"vllm_triton"`` for vLLM's ``TRITON_MLA``
    (``VLLM_TRITON_MLA_SOURCE``), the kernel tables' rule where it is one the module
    tables take (``MODULE_KERNEL_RULES``: TensorRT-LLM's FMHA v2 generation), else the
    attention kernels' (:func:`decode_rule`)."""
    if kernel_source == VLLM_TRITON_MLA_SOURCE:
        return "vllm_triton"
    rule = kernel_decode_rule(gpu, kernel_source, kv_e)
    if rule in MODULE_KERNEL_RULES:
        return rule
    return decode_rule(gpu, kernel_source, kv_e)


__all__ = [
    "DECODE_RULES",
    "FA3_FP8_BLOCK_ROWS",
    "FA3_GPUS",
    "FMHA_V2_MLA_GPUS",
    "MODULE_KERNEL_RULES",
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
    "LaunchSums",
    "MlaGenLaunch",
    "decode_block_keys",
    "decode_block_rows",
    "decode_kernel_features",
    "decode_rule",
    "decode_tile_rule",
    "fa3_num_splits",
    "kernel_decode_rule",
    "mla_decode_launch",
    "module_decode_rule",
    "triton_max_kv_splits",
    "triton_num_kv_splits",
    "trtllm_gen_launch",
    "trtllm_rope_grid",
    "vllm_triton_num_kv_splits",
]
