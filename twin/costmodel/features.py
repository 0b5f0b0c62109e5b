"""The features each kernel's latency formula reads: FLOPs, bytes and extras of a shape.

Each ``*_features`` function returns ``(flops, bytes, {extra: value})`` for one launch
(the extras named in ``twin.costmodel.formulas.FORMULAS``); each ``*_sums`` function
returns the same quantities summed over the sequences of one batched launch, which is
how the cost model prices a step. ``e`` is bytes per element. Pure Python.
"""

from __future__ import annotations

import math
from typing import Any

from twin.model import keys_upto

# A sum over sequences: a float, or an array of them (one per step of a decode run,
# ``CostModel.decode_steps_s``); the formulas are the same element by element.
Sums = Any

# Each returns (flops, bytes, {extra: value}); ``e`` is bytes per element.
Features = tuple[float, float, dict[str, float]]


def gemm_features(
    m: int, k: int, n: int, e: int, sms: int | None = None, tiles: str = ""
) -> Features:
    """A (m x k) @ (k x n) product: activations in, weights in, output out; its waves of
    output tiles over ``sms`` SMs (``gemm_wave_k`` at the kernel's ``tiles`` rule; 0
    without an SM count)."""
    flops, nbytes, weights = gemm_sums(m, k, n, e)
    return flops, nbytes, {"weight_elems": weights, "wave_k": gemm_wave_k(m, n, k, sms, 1, tiles)}


def gemm_sums(m: float, k: float, n: float, e: int) -> tuple[float, float, float]:
    """(FLOPs, bytes, weight elements) of an (m x k) @ (k x n) product."""
    return 2.0 * m * k * n, float(e * (m * k + k * n + m * n)), float(k * n)


def gemm_sums_at(
    m: float, k: float, n: float, e: int, act_e: float, w_e: float
) -> tuple[float, float, float]:
    """``gemm_sums`` of a quantised product (``twin.precision``): activations in at
    ``act_e`` bytes, weights at ``w_e``, the output out at ``e``."""
    return 2.0 * m * k * n, act_e * m * k + w_e * k * n + float(e * m * n), float(k * n)


def gemm_features_at(
    m: int,
    k: int,
    n: int,
    e: int,
    act_e: float,
    w_e: float,
    sms: int | None = None,
    tiles: str = "",
    quant: str = "",
) -> Features:
    """``gemm_features`` of a quantised product (``gemm_sums_at``), with the activation
    quantisation pass ``quant`` (``act_quant_bytes``: "" none) the call runs first."""
    flops, nbytes, weights = gemm_sums_at(m, k, n, e, act_e, w_e)
    return (
        flops,
        nbytes,
        {
            "weight_elems": weights,
            "wave_k": gemm_wave_k(m, n, k, sms, 1, tiles),
            "act_quant_bytes": act_quant_bytes(m, k, e, quant),
        },
    )


# The output tile of a GEMM's CTA in the wave feature (``gemm_wave_k``): 128 x 128, the
# default tile of CUTLASS's TMA warp-specialised GEMMs the engines' dense kernels build on
# (vLLM 0.24.0 ``csrc/quantization/cutlass_w8a8/c3x/scaled_mm_sm90_fp8_dispatch.cuh``
# ``sm90_fp8_config_default``: ``TileShape = Shape<_128, _128, _128>``; DeepGEMM's
# BLOCK_M 128 above its small-M tiles). Each kernel picks its own tile by shape; one tile
# for every GEMM family is an approximation whose cost a fit's ``c_wave_k`` scales
# (docs/decisions.md, "Issue 34, step: the dense GEMMs' waves", helper gemm36).
GEMM_TILE_M = 128
GEMM_TILE_N = 128


def tile_waves(
    m: Sums,
    n: float,
    sms: int | None,
    groups: float = 1,
    tile_m: int = GEMM_TILE_M,
    tile_n: int = GEMM_TILE_N,
) -> Sums:
    """Waves of ``groups`` independent (m x n) outputs' ``tile_m x tile_n`` tiles, one CTA
    each, over ``sms`` SMs: ``ceil(groups x ceil(m / tile_m) x ceil(n / tile_n) / sms)``; 0
    without an SM count. The one wave count of the GEMM families (:func:`gemm_wave_k`) and
    the absorbed BMMs' two tile sizes (``mla_features.mla_bmm_features``)."""
    if not sms:
        return 0
    tiles = groups * -(-m // tile_m) * -(-n // tile_n)
    return -(-tiles // sms)


# Each GEMM kernel's own output tiles, where its dispatch source was read and the fit's
# train rows take the reading (docs/decisions.md, "Issue 34, step: each GEMM kernel's own
# tile", helper gemm38): a rule name of ``GEMM_TILE_RULES``, chosen by the family's kernel
# source and the table's device (:func:`gemm_tile_rule`); "" is ``GEMM_TILE_M x
# GEMM_TILE_N`` at every shape. The fit reader (``aic_dense.gemm_rows``) and serving
# (``DensePricing``: the quantised fits' projections and experts-as-GEMMs) both take the
# rule from the same two strings (the fit's ``provenance``).
#
# vLLM's per-tensor fp8 CUTLASS GEMM (``CutlassFP8ScaledMMLinearKernel`` ->
# ``ops.cutlass_scaled_mm``) on Hopper: ``csrc/quantization/cutlass_w8a8/c3x/
# scaled_mm_sm90_fp8_dispatch.cuh`` (vllm-project/vllm as stored at 44d638a8)
# ``cutlass_gemm_sm90_fp8_dispatch``: m in [1, 64] ``sm90_fp8_config_M64`` (TileShape 64 x
# 64), m in (64, 128] ``sm90_fp8_config_M128`` (64 x 128), above ``sm90_fp8_config_default``
# (128 x 128). The tables are vLLM 0.24.0's; a later copy of the same file (the
# ``libtorch_stable`` one) swaps A and B below 64 rows (16 x 64 tiles of the output) and
# takes 256 x 128 at m >= 8192, k >= 6144: read too, and the train rows took the first
# (``gemm38-s38/sweep_area.txt``). The Blackwell dispatch (``scaled_mm_sm100_fp8_
# dispatch.cuh``: swap-AB 32 / 64-row tiles to 64 rows, 128 x 128 to 256, 256 x 128 above,
# 2-SM clusters) was read and lost the train median on all four Blackwell profiles, so
# those keep the one tile.
VLLM_CUTLASS_FP8_SOURCE = "CutlassFP8ScaledMMLinearKernel"
HOPPER_DEVICES = frozenset({"NVIDIA H100 80GB HBM3", "NVIDIA H200"})
VLLM_SM90_FP8_TILES = "vllm_sm90_fp8"
# (rows up to, tile rows, tile columns), the last bucket open-ended.
GEMM_TILE_RULES: dict[str, tuple[tuple[float, int, int], ...]] = {
    VLLM_SM90_FP8_TILES: ((64, 64, 64), (128, 64, 128), (math.inf, GEMM_TILE_M, GEMM_TILE_N)),
}


def gemm_tile_rule(kernel_source: str, device: str) -> str:
    """The tile rule (a key of ``GEMM_TILE_RULES``, "" for the one default tile) of a GEMM
    family timed with ``kernel_source`` on ``device`` (a fit's ``provenance``)."""
    if kernel_source == VLLM_CUTLASS_FP8_SOURCE and device in HOPPER_DEVICES:
        return VLLM_SM90_FP8_TILES
    return ""


# The per-tensor fp8 linear layer's activation quantisation: a memory-bound pass of its
# own before the GEMM that reads the (m x k) activations at the model's element size and
# writes them as fp8 (1 byte), ``gemm_fp8``'s serial feature ``act_quant_bytes``
# (``formulas.GEMM_FP8_SERIAL``), priced at the HBM peak, not fitted
# (``formulas.GEMM_FP8_FIXED``). aiconfigurator's vLLM collector at the commit that
# collected the 0.24.0 tables (ai-dynamo/aiconfigurator d5bad971c,
# ``collector/vllm/collect_gemm.py``) builds its ``fp8`` rows with
# ``Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="dynamic",
# weight_block_size=None)`` and times ``RowParallelLinear.forward`` of a bf16 input under
# a CUDA graph. vLLM's ``Fp8LinearMethod.__init__`` (``layers/quantization/fp8.py``, as
# stored): a dynamic activation scheme on a CUTLASS-capable GPU takes
# ``kFp8DynamicTokenSym``, "per-token quantization for better perf if dynamic and cutlass",
# so the kernel's ``QuantFP8`` (``kernels/linear/scaled_mm/ScaledMMLinearKernel.py``,
# ``input_quant_fp8.py`` ``forward_cuda``) calls ``_custom_ops.scaled_fp8_quant(x, None,
# use_per_token_if_dynamic=True)``: one ``dynamic_per_token_scaled_fp8_quant`` kernel (its
# output and scales ``torch.empty``: no other launch), a block a token that reads the row
# for its max and again to quantise it, then ``cutlass_scaled_mm``. One kernel is what the
# tables show: fp8 less bf16 at m <= 8 is 1.6-3.4 us a call (the native ``forward_native``
# would be ~10 kernels). Bytes: ``(2 e + 1) m k`` (the m float scales left out). Its one
# launch is a constant per call, carried by the fit's ``t0_s``: the floor above the bf16
# GEMM's (1.3-2.6 us) that ``KernelLayout.fp8_static_activation`` takes off. The same
# collection times that kernel alone (``quantize/vllm/0.24.0``, ``compute_scale`` +
# ``scale_matrix``): 2.2-3.1 us at m <= 8, and at m k >= 2^25 5.6-7.0 bytes an element's
# time at the HBM peak on H200 / Blackwell, 3.2-3.9 on L40S / RTX PRO 6000 (the second
# read cached), so the peak rate over ``5 m k`` is the pass's lower bound on the first.
# Static (``static_scaled_fp8_quant``, one ``scaled_fp8_quant_kernel``): read and write,
# ``(e + 1) m k``. Its ``fp8_block`` rows quantise per token group in the GEMM's own op:
# not this feature.
ACT_QUANT_STATIC = "static"
ACT_QUANT_DYNAMIC = "dynamic"
FP8_BYTES = 1.0


def act_quant_scheme(kernel_source: str) -> str:
    """The activation quantisation a GEMM table with ``kernel_source`` (a fit's
    ``provenance``) timed inside each call: ``ACT_QUANT_DYNAMIC`` (per token) for vLLM's
    per-tensor-weight fp8 rows (aiconfigurator's collector, above), "" (none priced) for
    every other table."""
    return ACT_QUANT_DYNAMIC if kernel_source == VLLM_CUTLASS_FP8_SOURCE else ""


def act_quant_bytes(m: Sums, k: float, e: float, scheme: str) -> Sums:
    """Bytes of the activation quantisation pass of an (m x k) input at ``e`` bytes an
    element: static ``(e + 1) m k`` (read, write fp8); dynamic ``(2 e + 1) m k`` (the
    scale's max reads the input once more: vLLM's per-token kernel reads each row twice,
    its per-tensor one runs a reduction kernel first); "" none, 0."""
    if scheme == ACT_QUANT_STATIC:
        return (e + FP8_BYTES) * m * k
    if scheme == ACT_QUANT_DYNAMIC:
        return (2.0 * e + FP8_BYTES) * m * k
    if scheme:
        raise ValueError(f"unknown activation quantisation {scheme!r}")
    return 0.0 * m


def gemm_wave_k(
    m: Sums, n: float, k: float, sms: int | None, groups: float = 1, tiles: str = ""
) -> Sums:
    """K-steps on the busiest SM of ``groups`` independent (m x k) @ (k x n) products
    (a batched or grouped GEMM; 1: one GEMM): the output's ``GEMM_TILE_M x GEMM_TILE_N``
    tiles, one CTA each, run in ``ceil(tiles / sms)`` waves over the ``sms`` SMs, and each
    wave's CTAs loop over all of ``k`` whatever the other SMs do: ``waves x k``. The
    tables' steps where m crosses a tile multiple (128 -> 129 rows) and their few-CTA
    launches (n = 1024 at one row: 8 CTAs on 132 SMs stream their weights slower than
    the whole GPU) (``formulas``: the GEMM families' ``wave_k`` extra). ``tiles``, a rule
    of ``GEMM_TILE_RULES``: the kernel's own tile for the bucket of m, its waves weighted
    by the tile's area in default tiles (a 64 x 64 tile's k-step is a quarter of a 128 x
    128 one's), so one fitted cost a k-step holds across the buckets. Non-decreasing in m.
    0 where the SM count is not known (``twin.hardware.SM_COUNTS``) or m is 0."""
    if not sms:
        return 0.0
    if not tiles:
        return tile_waves(m, n, sms, groups) * k
    total: Sums = 0.0
    low = 0.0
    for high, tile_m, tile_n in GEMM_TILE_RULES[tiles]:
        area = tile_m * tile_n / (GEMM_TILE_M * GEMM_TILE_N)
        waves = tile_waves(m, n, sms, groups, tile_m, tile_n)
        total = total + ((m > low) & (m <= high)) * waves * (area * k)
        low = high
    return total


def attn_prefill_features(
    n: int,
    c: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    e: int,
    window: int | None = None,
    kv_e: int | None = None,
) -> Features:
    """Causal attention of ``n`` new queries after ``c`` cached keys (bottom-right aligned)."""
    keys = keys_upto(c + n, window) - keys_upto(c, window)
    kv_rows = c + n if window is None else min(c + n, window + n)
    flops, nbytes, scores, tiles = attn_prefill_sums(
        n, keys, kv_rows, 1, heads, kv_heads, head_dim, e, kv_e
    )
    return flops, nbytes, {"score_elems": scores, "tiles": tiles}


def attn_prefill_sums(
    queries: float,
    keys: Sums,
    kv_rows: Sums,
    sequences: float,
    heads: int,
    kv_heads: int,
    head_dim: int,
    e: int,
    kv_e: int | None = None,
) -> tuple[Sums, Sums, Sums, Sums]:
    """(FLOPs, bytes, score elements, tiles) of prefill chunks batched in one launch.

    ``queries``, ``keys`` (query-key pairs) and ``kv_rows`` (K/V rows read) are
    summed over the ``sequences`` chunks. QK^T and AV cost 4 x head_dim FLOPs per
    score; Q in and O out are read/written once, K and V of the visible context
    once. A tile is one (sequence, KV head): varlen kernels set up each sequence's
    K/V for each KV head, the query heads sharing it packed together (FA3's
    PackGQA, FlashInfer's grouped heads); NVIDIA's tables show this fixed cost
    (~20 ns a tile on H100) dominating many short sequences. ``kv_e``: bytes per K/V
    element when the cache holds another width than the queries (fp8: 1).
    """
    flops = 4.0 * heads * head_dim * keys
    if kv_e is None or kv_e == e:
        nbytes = e * (2.0 * queries * heads * head_dim + 2.0 * kv_rows * kv_heads * head_dim)
    else:
        nbytes = e * 2.0 * queries * heads * head_dim + kv_e * 2.0 * kv_rows * kv_heads * head_dim
    # float(heads) * keys, not float(heads * keys): equal for counts below 2^53, and
    # ``keys`` may be an array (a run of decode steps, ``attn_decode_sums``).
    return flops, nbytes, float(heads) * keys, float(kv_heads * sequences)


def attn_decode_features(
    batch: int,
    keys: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    e: int,
    kv_e: int | None = None,
    sms: int | None = None,
    rule: str = "",
) -> Features:
    """``batch`` single-token queries, each over ``keys`` keys (KV read dominates)."""
    flops, nbytes, scores, tiles, waves = attn_decode_sums(
        batch, batch * keys, heads, kv_heads, head_dim, e, kv_e, sms, rule
    )
    return flops, nbytes, {"score_elems": scores, "tiles": tiles, "waves_d": waves}


# The attention decode families' third extra is the launch of the kernel each table times
# (``decode_launch_rule``, from the fit's ``provenance``; docs/decisions.md, "the decode launch
# extra per kernel", helper attnfix39). The kernels, their grids as read:
# - FlashAttention-3 (vLLM ``vllm_flash_attn_fa3``, SGLang ``fa3``: Hopper): one CTA per
#   (sequence, KV head, 64 packed query rows), the KV head's query heads packed into one
#   m-block (Dao-AILab/flash-attention ``hopper/flash_api.cpp`` ``get_num_splits``,
#   ``heuristics.h`` ``should_pack_gqa``, commits 07602adc / 13d0fd9c; the 64-row block
#   ``mla_features.FA3_BLOCK_M``). ``FA3_GRID_RULE``.
# - FlashAttention-2 (vLLM ``vllm_flash_attn_fa2`` / ``vllm_flash_attn``: A100, L40S, RTX PRO
#   6000): ``mha_varlen_fwd`` with one query a sequence swaps the group into the query rows
#   (``seqlenq_ngroups_swapped``: ``max_seqlen_q = ngroups``, ``num_heads = num_heads_k``;
#   vllm-project/flash-attention ``csrc/flash_attn/flash_api.cpp`` 04325b67) and runs the
#   split-KV kernel, ``kBlockM = 64`` "fixed for all head dimensions", grid
#   ``(ceil(seqlen_q / 64), b, h)`` (``src/flash_fwd_launch_template.h`` fcc8a217
#   ``run_flash_splitkv_fwd`` / ``run_mha_fwd_splitkv_dispatch``): the same CTAs as FA3's.
#   ``FA2_GRID_RULE``, priced as FA3's.
# - FlashInfer (SGLang ``flashinfer``: Blackwell, L40S, RTX PRO 6000): SGLang decodes with
#   FlashInfer's tensor-core (prefill) kernel for an fp8 KV cache and for a group of 4 or
#   more, else its decode kernel (sgl-project/sglang ``python/sglang/srt/layers/attention/
#   flashinfer_backend.py`` 0005834c ``should_use_tensor_core``). The decode kernel's grid is
#   ``(padded_batch_size, num_kv_heads)``, the whole group in one CTA (flashinfer-ai/flashinfer
#   ``include/flashinfer/attention/decode.cuh`` 9ca04e4d); the tensor-core kernel's one CTA
#   per (sequence, KV head, ``cta_tile_q`` packed rows), ``FA2DetermineCtaTileQ``: 128 above
#   64 packed rows, 64 above 16, else 16 (``include/flashinfer/utils.cuh`` 0d618712). Both
#   plans (``attention/scheduler.cuh`` 24fd9fc7) run that grid unsplit where ``batch x
#   kv_heads >= max_grid_size = num_blocks_per_sm x num_sm`` (the occupancy API's blocks a
#   SM), else split the KV into at most ``max_grid_size`` CTAs: the unsplit grid's waves are
#   over ``num_blocks_per_sm`` CTAs a SM, not one. ``FLASHINFER_GRID_RULE``
#   (``flashinfer_decode_waves``); the blocks a SM, which the occupancy API answers at run
#   time, chosen on the train rows (``FLASHINFER_BLOCKS_PER_SM``).
# - TensorRT-LLM on Hopper, bf16 KV: XQA or the masked MHA (``TRTLLM_XQA_RULE`` below).
# - Not read, the FA3 grid's feature kept (``UNREAD_GRID_RULE``): TensorRT-LLM's other tables
#   (A100, L40S, RTX PRO 6000: XQA / masked MHA, whose ``mayHavePerfGain`` was confirmed on
#   Hopper only; Blackwell: trtllm-gen FMHA cubins; the Hopper fp8-KV table, whose train rows
#   kept the FA3 grid, xqa38), vLLM's ``vllm_flashinfer_trtllmdecode`` (FlashInfer's
#   trtllm-gen decode cubins: no launch source), SGLang 0.5.10's ``flash_attention`` (A100),
#   and every fit without a provenance (datasheets).
DECODE_PACKED_ROWS = 64
FA3_GRID_RULE = "fa3_grid"
FA2_GRID_RULE = "fa2_grid"
FLASHINFER_GRID_RULE = "flashinfer_grid"
UNREAD_GRID_RULE = ""
FA3_SOURCES = frozenset({"vllm_flash_attn_fa3", "fa3"})  # the tables' ``kernel_source``
FA2_SOURCES = frozenset({"vllm_flash_attn_fa2", "vllm_flash_attn"})
FLASHINFER_SOURCES = frozenset({"flashinfer"})  # SGLang's lane (vLLM's are trtllm-gen's)
SGLANG_FRAMEWORK = "SGLang"
VLLM_FRAMEWORK = "vLLM"
# FlashInfer's blocks a SM (``num_blocks_per_sm``), one for both kernels and every GPU: 1, 2,
# 4, 8 ranked on the six SGLang FlashInfer profiles' train rows
# (``benchmarks/results/attnfix39-s39/variants_flashinfer.txt``).
FLASHINFER_BLOCKS_PER_SM = 2


def attn_decode_waves_d(
    batch: float, heads: int, kv_heads: int, head_dim: int, sms: int | None
) -> float:
    """The FA3 (and FA2) unsplit decode grid's waves over the SMs times the head dim:
    ``ceil(batch x kv_heads x ceil(gqa / DECODE_PACKED_ROWS) / sms) x head_dim``, one CTA per
    (sequence, KV head, block of packed query rows). A wave's per-CTA fixed work (the query
    tile, the first K/V block, the output) scales with the head dim; the ``tiles`` term,
    linear in the batch, misses that the time is flat up to a wave (the attention decode
    families' ``waves_d`` extra; docs/decisions.md, "the decode launch's waves x head dim",
    helpers attn36 / attn38). Constant in the keys (the affine decode runs stay affine,
    ``decode_pricing.affine_in_keys``), non-decreasing in the batch; 0 where the SM count
    is not known (``twin.hardware.SM_COUNTS``: a datasheet profile prices as without it)."""
    if not sms or batch <= 0:
        return 0.0
    blocks = -(-(heads // kv_heads) // DECODE_PACKED_ROWS)
    ctas = int(batch) * kv_heads * blocks
    return float(-(-ctas // sms) * head_dim)


def flashinfer_cta_tile_q(group: int) -> int:
    """FlashInfer's ``FA2DetermineCtaTileQ`` at one query a sequence (packed rows = the
    group; Ampere or newer, head dim under 256): 128 above 64 rows, 64 above 16, else 16."""
    return 128 if group > 64 else (64 if group > 16 else 16)


def flashinfer_decode_waves(
    batch: float, heads: int, kv_heads: int, head_dim: int, sms: int | None
) -> float:
    """FlashInfer's unsplit decode grid's waves times the head dim (``FLASHINFER_GRID_RULE``):
    ``ceil(batch x kv_heads x ceil(group / cta_tile_q) / (FLASHINFER_BLOCKS_PER_SM x sms)) x
    head_dim``; at every group of 64 or less one CTA a (sequence, KV head), as the decode
    kernel's grid. Constant in the keys, non-decreasing in the batch, 0 without an SM count."""
    if not sms or batch <= 0:
        return 0.0
    group = heads // kv_heads
    ctas = int(batch) * kv_heads * -(-group // flashinfer_cta_tile_q(group))
    return float(-(-ctas // (FLASHINFER_BLOCKS_PER_SM * sms)) * head_dim)


# TensorRT-LLM's decode attention on Hopper is two kernels (docs/decisions.md, "the XQA /
# masked-MHA kernel choice", helper xqa38; attn36's point (2)). The generation step runs the
# JIT XQA kernel only where it supports the shape and "may have perf gain", else the masked
# multi-head attention kernel. Read in NVIDIA/TensorRT-LLM as stored (the tables are 1.3.0rc20's;
# the stored snapshots are of the 1.2 / 1.3 line, ``TRTLLM_NAMESPACE_BEGIN``):
# ``cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/decoderXQAImplJIT/
# decoderXQAImplJIT.cpp`` (000a01de) ``shouldUse`` = ``supportConfig`` and ``mayHavePerfGain``:
# ``num_kv_heads x batch_size x max(1, max_past_kv_length / kMinHistoryTokensPerBlock) x
# kEnableMinBlockFactor >= multiProcessorCount`` (multi-block mode on, the engines' default);
# ``decoderXQAConstants.h`` (12453212) ``kMinHistoryTokensPerBlock`` 128,
# ``kEnableMinBlockFactor`` 4; ``decoderXQAImplJIT/kernelUtils.cpp`` (029e0a7c)
# ``supportConfigCommon``: never for vanilla MHA (query heads = KV heads) at beam width 1,
# ``supportConfigQGMMA`` / ``HMMA``: a group of at most 32 query heads, head dim a multiple of
# 16 in [16, 256]. The fit's third extra on such a table is the XQA side's (sequence, KV head)
# CTAs (``attn_decode_launch``): XQA and the masked MHA cost differently per CTA (attn36: ~36-40
# ns grouped, ~11 ns ungrouped at one key on H100), and chosen on the train rows over the FA3
# grid's ``waves_d`` and seven other forms (``benchmarks/results/xqa38-s38/variants_*.txt``).
# The bf16-KV family only: on the fp8-KV tables the train rows kept the FA3 grid (every XQA
# form fitted no better), so ``XQA_RULE_FAMILIES``. The coefficient of an XQA fit is
# ``c_xqa_ctas`` (``launch_coefficient``; a fit written as ``c_waves_d`` reads as it,
# ``profile._upgrade``).
TRTLLM_XQA_RULE = "trtllm_xqa"
XQA_MIN_HISTORY_TOKENS_PER_BLOCK = 128  # kMinHistoryTokensPerBlock
XQA_ENABLE_MIN_BLOCK_FACTOR = 4  # kEnableMinBlockFactor
XQA_MAX_GROUP = 32  # supportConfigQGMMA / HMMA: head_grp_size x beam_width <= 32
TRTLLM_FRAMEWORK = "TensorRT-LLM"  # a fit's ``provenance`` ``framework``
XQA_RULE_FAMILIES = frozenset({"attn_decode"})


def decode_launch_rule(family: str, framework: str, device: str, kernel_source: str = "") -> str:
    """The launch rule of attention decode fit ``family`` timed with ``framework``'s
    ``kernel_source`` on ``device`` (its ``provenance``): ``TRTLLM_XQA_RULE`` for
    TensorRT-LLM's bf16-KV table on Hopper, ``FA3_GRID_RULE`` / ``FA2_GRID_RULE`` for vLLM's
    and SGLang's FlashAttention tables, ``FLASHINFER_GRID_RULE`` for SGLang's FlashInfer ones,
    else ``UNREAD_GRID_RULE`` (the FA3 grid's feature kept: no launch source read). The fit
    reader and every serving path take it from these strings."""
    if family in XQA_RULE_FAMILIES and framework == TRTLLM_FRAMEWORK and device in HOPPER_DEVICES:
        return TRTLLM_XQA_RULE
    if framework in (VLLM_FRAMEWORK, SGLANG_FRAMEWORK) and kernel_source in FA3_SOURCES:
        return FA3_GRID_RULE
    if framework == VLLM_FRAMEWORK and kernel_source in FA2_SOURCES:
        return FA2_GRID_RULE
    if framework == SGLANG_FRAMEWORK and kernel_source in FLASHINFER_SOURCES:
        return FLASHINFER_GRID_RULE
    return UNREAD_GRID_RULE


# The third coefficient's name by launch rule: what it prices (``profile._upgrade`` reads an
# XQA fit written with the FA3 grid's name).
XQA_COEFFICIENT = "c_xqa_ctas"
WAVES_COEFFICIENT = "c_waves_d"


def launch_coefficient(rule: str) -> str:
    """The name of the decode fit's third coefficient under launch ``rule``: ``c_xqa_ctas``
    (the XQA side's CTAs) under ``TRTLLM_XQA_RULE``, else ``c_waves_d`` (a grid's waves x
    head dim)."""
    return XQA_COEFFICIENT if rule == TRTLLM_XQA_RULE else WAVES_COEFFICIENT


def launch_code(rule: str) -> int:
    """The compiled step's integer for ``rule`` (``compiled.LAUNCH``): 1 XQA, 2 FlashInfer's
    grid, 0 the FA3 / FA2 grid (and the unread tables, which keep it)."""
    return {TRTLLM_XQA_RULE: 1, FLASHINFER_GRID_RULE: 2}.get(rule, 0)


def xqa_from_keys(batch: int, heads: int, kv_heads: int, head_dim: int, sms: int | None) -> float:
    """The fewest keys in all (one new key per sequence included) at which TensorRT-LLM's
    Hopper decode of ``batch`` sequences runs XQA (see ``TRTLLM_XQA_RULE``); ``math.inf``
    where it never does (vanilla MHA, a group above 32, an unsupported head dim, no SM count).
    Each sequence's history is the even spread's, ``keys // batch - 1`` (the tables' cached
    tokens; TensorRT-LLM reads the longest): ``max(1, history // 128) >= m``, ``m =
    ceil(sms / (4 x kv_heads x batch))``, holds from ``batch x (128 m + 1)`` keys when m > 1."""
    group = heads // kv_heads
    if (
        not sms
        or batch <= 0
        or group <= 1
        or group > XQA_MAX_GROUP
        or head_dim % 16
        or not 16 <= head_dim <= 256
    ):
        return math.inf
    blocks = -(-sms // (XQA_ENABLE_MIN_BLOCK_FACTOR * kv_heads * int(batch)))
    if blocks <= 1:
        return 0.0
    return float(int(batch) * (XQA_MIN_HISTORY_TOKENS_PER_BLOCK * blocks + 1))


def attn_decode_launch(
    batch: float,
    keys: Sums,
    heads: int,
    kv_heads: int,
    head_dim: int,
    sms: int | None,
    rule: str = "",
) -> tuple[float, float]:
    """``(z, from_keys)``: the attention decode families' third extra is ``z`` where the keys
    in all reach ``from_keys``, else 0, by the fit's ``rule`` (``decode_launch_rule``):
    ``FLASHINFER_GRID_RULE``: FlashInfer's grid's waves x head dim from no keys
    (``flashinfer_decode_waves``); ``TRTLLM_XQA_RULE``: the XQA kernel's (sequence, KV head)
    CTAs from ``xqa_from_keys`` on (the masked MHA below); any other: the FA3 / FA2 grid's
    waves x head dim from no keys (``attn_decode_waves_d``)."""
    if rule == TRTLLM_XQA_RULE:
        start = xqa_from_keys(int(batch), heads, kv_heads, head_dim, sms)
        return (0.0, 0.0) if start == math.inf else (float(kv_heads * batch), start)
    if rule == FLASHINFER_GRID_RULE:
        return flashinfer_decode_waves(batch, heads, kv_heads, head_dim, sms), 0.0
    return attn_decode_waves_d(batch, heads, kv_heads, head_dim, sms), 0.0


def attn_decode_sums(
    batch: float,
    keys: Sums,
    heads: int,
    kv_heads: int,
    head_dim: int,
    e: int,
    kv_e: int | None = None,
    sms: int | None = None,
    rule: str = "",
) -> tuple[Sums, Sums, Sums, Sums, Sums]:
    """(FLOPs, bytes, score elements, tiles, the launch extra) of ``batch`` decode queries
    over ``keys`` keys in all: a prefill of one query per sequence, every key's K/V row read
    once; the launch extra of the fit's ``rule`` (``attn_decode_launch``: the FA3 / FA2 or
    FlashInfer grid's waves over ``sms`` SMs, or TensorRT-LLM Hopper's XQA CTAs; 0 without an
    SM count)."""
    flops, nbytes, scores, tiles = attn_prefill_sums(
        batch, keys, keys, batch, heads, kv_heads, head_dim, e, kv_e
    )
    z, start = attn_decode_launch(batch, keys, heads, kv_heads, head_dim, sms, rule)
    if not start:
        return flops, nbytes, scores, tiles, z
    import numpy as np  # late, as the rest of this module needs none

    if np.ndim(keys) == 0:
        return flops, nbytes, scores, tiles, z if keys >= start else 0.0
    return flops, nbytes, scores, tiles, np.where(np.asarray(keys) >= start, z, 0.0)


def ssm_scan_features(
    batch: int,
    seqlen: int,
    nheads: int,
    headdim: int,
    d_state: int,
    ngroups: int,
    chunk: int,
    e: int,
) -> Features:
    """SSD chunked scan over ``batch`` sequences of ``seqlen`` tokens."""
    n_chunks = batch * -(-seqlen // chunk)
    flops, nbytes, x = ssm_scan_sums(
        batch * seqlen, n_chunks, nheads, headdim, d_state, ngroups, chunk, e
    )
    return flops, nbytes, {"chunks": x}


def ssm_scan_sums(
    tokens: float,
    n_chunks: float,
    nheads: int,
    headdim: int,
    d_state: int,
    ngroups: int,
    chunk: int,
    e: int,
) -> tuple[float, float, float]:
    """(FLOPs, bytes, chunks x heads) of a scan over ``tokens`` in ``n_chunks`` chunks.

    FLOPs per token as ``ModelSpec.prefill_flops`` counts them (C.B^T within a
    chunk, the masked mixing, chunk states and outputs), over whole chunks: a
    sequence's last, partial chunk is computed in full. Bytes: x, dt, B, C in and
    y out per token, plus one fp32 chunk state per chunk written and read back.
    """
    channels = nheads * headdim
    padded = n_chunks * chunk
    flops = padded * (2.0 * channels * (2 * d_state + chunk) + 2.0 * chunk * d_state * ngroups)
    nbytes = (
        e * tokens * (2.0 * channels + 2.0 * ngroups * d_state + nheads)
        + 8.0 * n_chunks * channels * d_state
    )
    return float(flops), float(nbytes), float(n_chunks * nheads)


def ssm_step_features(
    batch: int, nheads: int, headdim: int, d_state: int, ngroups: int, e: int, state_e: int
) -> Features:
    """One decode token per sequence: read and write each recurrent state once."""
    sc = nheads * headdim
    flops = 6.0 * batch * sc * d_state  # decay, outer product update, C.h readout
    nbytes = float(
        batch * (2 * sc * d_state * state_e + e * (2 * sc + 2 * ngroups * d_state + 2 * nheads))
    )
    return flops, nbytes, {}


# The causal conv1d's launches (TensorRT-LLM 1.3.0rc20's copy of Dao-AILab causal-conv1d,
# ``cpp/tensorrt_llm/kernels/causalConv1d/causalConv1d.cu``, read at NVIDIA/TensorRT-LLM
# 0c8de69; the same code as sgl-kernel's CUDA copy, which SGLang serves). vLLM serves its
# own Triton port instead (``vllm/model_executor/layers/mamba/ops/causal_conv1d.py``
# ``_causal_conv1d_fwd_kernel``, vllm-project/vllm as stored), whose launch this does not
# read: its prices take this kernel's fit and terms, as every engine's conv did before
# (review38, session 38; left to the lead). The prompt pass:
# ``causal_conv1d_fwd_launch`` grid ``(batch, dim)``, one CTA of 128 threads per (sequence,
# channel), 8 bf16 elements a thread, so 1,024 tokens a loop iteration; vectorised loads
# only when ``seqlen % 8 == 0`` and the call is not varlen (``kIsVecLoad``), else cub's
# warp-transposed loads and stores through shared memory. The decode update:
# ``causal_conv1d_update_launch`` grid ``(batch, ceil(dim / 64))``, 64 threads, a thread
# per channel.
CONV_VEC_ELEMS = 8
CONV_UPDATE_THREADS = 64
# Resident 64-thread CTAs an SM holds: 32 (the block limit of compute capability 8.0, 9.0
# and 10.0, 2,048 threads; sm_89 / sm_120 hold 24, an approximation the fit's
# ``c_cta_waves`` scales; NVIDIA's CUDA C++ Programming Guide, "Technical Specifications
# per Compute Capability": maximum resident blocks and threads per SM).
CONV_UPDATE_RESIDENT = 32


def conv1d_features(
    batch: int,
    seqlen: int,
    channels: int,
    kernel: int,
    e: int,
    with_state: bool = False,
    sms: int | None = None,
    sequences: int | None = None,
    l2_bytes: float | None = None,
) -> Features:
    """Causal depthwise conv; ``with_state`` adds the decode conv-state read + write.

    A prompt pass (``with_state=False``) counts its CTAs, one per sequence x channel
    (``seq_channels``; ~1 ns each on H100), and those of them that run the kernel's
    unvectorised load path (``unaligned_ctas``: every CTA of a varlen call, else of a
    length not a multiple of 8; NVIDIA's tables: 1-4 token prompts ~1.3x the cost of 8-512
    token ones, which cost the same). ``sequences``: a varlen call (the engines' serving
    call, ``query_start_loc`` set) of that many sequences packed into ``batch x seqlen``
    tokens. A decode update counts the waves of its 64-thread CTAs over ``sms`` SMs
    (``cta_waves``; 0 without an SM count), and the bytes a kernel table's replays read
    from an L2 of ``l2_bytes`` (``l2_bytes``, on the compute side; the HBM bytes then 0):
    NVIDIA's collector (ai-dynamo/aiconfigurator ``collector/trtllm/collect_mamba2.py``,
    ``run_mamba2_generation_benchmark``, through ``collector/helper.py``
    ``benchmark_with_power``, read at 9a0cf44d) captures one ``causal_conv1d_update`` call
    in a CUDA graph (its input pool's index is read once, at capture) and replays it, so
    the same ``x``, output, weight and ``conv_state`` every replay; where those buffers
    (the state, read and written in place, counted once) fit (``replay_l2``, the rule of
    ``mla_features.kernel_replay_l2``) every byte comes from L2. ``l2_bytes`` None (a
    serving step: a layer's state was last touched a forward pass earlier): 0, the HBM
    bytes as before.
    """
    flops = 2.0 * batch * seqlen * channels * kernel
    nbytes = e * (2 * batch * seqlen * channels + channels * kernel)
    if with_state:
        nbytes += e * 2 * batch * channels * kernel
        resident = sms * CONV_UPDATE_RESIDENT if sms else None
        waves = tile_waves(batch, channels, resident, tile_m=1, tile_n=CONV_UPDATE_THREADS)
        buffers = e * (2 * batch * channels + channels * kernel + batch * channels * (kernel - 1))
        hbm, l2 = replay_l2(float(nbytes), l2_bytes, float(buffers))
        return flops, hbm, {"cta_waves": float(waves), "l2_bytes": l2}
    ctas = float((batch if sequences is None else sequences) * channels)
    unaligned = sequences is not None or seqlen % CONV_VEC_ELEMS != 0
    return flops, float(nbytes), {"seq_channels": ctas, "unaligned_ctas": ctas * unaligned}


def elementwise_features(rows: int, width: int, e: int, passes: float = 2.0) -> Features:
    """An element-wise pass over rows x width touching ``passes`` tensors (RMSNorm: 2)."""
    return 4.0 * rows * width, float(e * (passes * rows * width + width)), {}


def moe_sums(
    rows: float,
    active: float,
    d: int,
    width: int,
    up_mats: int,
    e: int,
    act_e: float,
    w_e: float,
) -> tuple[float, float, float]:
    """(FLOPs, bytes, weight elements) of one rank's routed experts in one fused MoE
    launch: ``rows`` token x top-k rows routed to the rank, ``active`` of its experts hit,
    each expert ``d`` -> ``up_mats`` x ``width`` -> ``d`` (``width`` the expert's
    intermediate size over the MoE TP). Up and down projections as two grouped GEMMs:
    activations in at ``act_e`` bytes, the touched experts' weights at ``w_e``, outputs
    out at ``e`` (``gemm_sums_at`` per projection, the weights only of the experts hit)."""
    wide = up_mats * width
    flops = 2.0 * rows * d * (wide + width)
    weights = active * d * (wide + width)
    nbytes = act_e * rows * (d + width) + w_e * weights + float(e) * rows * (wide + d)
    return flops, nbytes, weights


# The width of one CTA's output tile in the fused-MoE GEMMs: vLLM 0.24.0's default Triton
# config (``vllm/model_executor/layers/fused_moe/fused_moe.py`` ``get_default_config``:
# BLOCK_SIZE_N 128 above 64 tokens); the same width stands for the other engines' kernels,
# whose tile is picked per shape (an assumption the fit's coefficient absorbs).
MOE_TILE_N = 128


def moe_tile_bytes(d: int, width: int, up_mats: int, w_e: float) -> float:
    """Weight bytes one CTA streams in the fused MoE's longer GEMM: a tile of
    ``MOE_TILE_N`` output columns over the whole reduction (up: ``d`` x ``up_mats x width``,
    down: ``width`` x ``d``). With fewer tiles than SMs the weights cannot stream at the
    device's bandwidth and a CTA's own stream is the floor (NVIDIA's tables: TP 32's narrow
    experts and EP 128/256's one or two local experts run up to 2x slower than the
    roofline)."""
    up = d * min(up_mats * width, MOE_TILE_N)
    down = width * min(d, MOE_TILE_N)
    return w_e * float(max(up, down))


# NVIDIA's collectors time a kernel by replaying it on the same buffers (a CUDA graph
# replayed, or one call looped: aiconfigurator's ``collector/helper.py``
# ``benchmark_with_power``; ``collector/sglang/collect_moe.py`` loops ``fused_moe`` five
# times a replay on one ``w1``/``w2``, ai-dynamo/aiconfigurator 006afd78), so a working
# set that fits in L2 stays there across the replays and is read at L2's rate, not HBM's.
# The share of L2 it may fill and still stay (the rest holds other lines): chosen on the
# absorbed BMMs' fit rows' training error over 0.4-1.2, flat from 0.8 to 1.0
# (docs/decisions.md, issue 34, helper ``mla-fit``); the fused MoE takes the same rule.
REPLAY_L2_SHARE = 0.8


def next_power_of_two(n: int) -> int:
    """The least power of two at least ``n`` (1 for ``n`` <= 1): CUDA's and Triton's
    ``nextPowerOfTwo`` / ``next_power_of_2``, which the launch rules below and in
    ``mla_features`` round their counts to (each rounds its count to an integer as its
    source does before)."""
    return 1 << max(0, n - 1).bit_length()


def replay_resident(nbytes: Sums, l2_bytes: float | None) -> Sums:
    """Whether a launch's working set of ``nbytes`` stays in an L2 of ``l2_bytes`` across
    a table's replays (``REPLAY_L2_SHARE``; None: no L2 tabulated, nothing resident). A
    serving step passes None: a layer's weights were last read a whole forward pass
    earlier, so they come from HBM."""
    return nbytes <= REPLAY_L2_SHARE * (l2_bytes or 0.0)


def replay_l2(
    nbytes: Sums, l2_bytes: float | None, footprint: Sums | None = None
) -> tuple[Sums, Sums]:
    """A launch's ``nbytes`` split into those read from HBM and those a table's replays
    read from L2: all of them from L2 where its buffers fit in an L2 of ``l2_bytes``
    (:func:`replay_resident` on ``footprint``, the bytes its buffers occupy; None: the
    bytes it moves, each read once), else all from HBM. ``l2_bytes`` None (a serving
    step): ``(nbytes, 0)``. The one rule of the attention kernels
    (``mla_features.kernel_replay_l2``) and the conv update (``conv1d_features``)."""
    held = nbytes if footprint is None else footprint
    resident = l2_bytes is not None and replay_resident(held, l2_bytes)
    return nbytes * (1 - resident), nbytes * resident


def moe_features(
    rows: float,
    routed: float,
    active: float,
    d: int,
    width: int,
    up_mats: int,
    e: int,
    act_e: float,
    w_e: float,
    l2_bytes: float | None = None,
    large_m: bool = False,
    tile: int = 0,
    grid_flops: float = 0.0,
    clamped: float = 0.0,
    routed_passes: float = 0.0,
) -> Features:
    """``moe_sums`` as a fitting row's features, with ``routed`` (every token x top-k row of
    the step, all ranks' together, times the hidden width) as the ``routed_elems`` extra,
    the bytes one CTA streams (``moe_tile_bytes``) as ``tile_bytes``, and ``active`` (the
    rank's experts the launch touches) as the serial ``active_experts``
    (``formulas.KernelFormula.serial``: each expert hit is a grouped-GEMM
    problem of its own, whose set-up, scales and pipeline fill and drain do not overlap
    the math: vLLM's ``fused_moe`` Triton kernel walks ``expert_ids`` block by block,
    CUTLASS's grouped GEMM takes one problem per expert):
    each rank aligns and sorts the whole routing table, launches blocks for rows other
    ranks compute and sums the top-k outputs of every token (vLLM's
    ``moe_align_block_size``, its expert map and ``moe_sum``). The tables show it: at
    ``ep`` 256 the H200 time still grows by ~0.1 ms per 1,000 tokens when the rank's own
    rows are a 256th. Tried and dropped: the routed rows without the width (held-out
    median 12.8% against 9.7% on H200 vLLM bf16).

    ``l2_bytes``: the L2 of the GPU a table row was timed on. Where the launch's working
    set (its bytes: the touched experts' weights, the activations in and out) stays in
    it across the table's replays (``replay_resident``), the whole set is read from L2:
    its bytes are the ``l2_bytes`` extra on the compute side, and the HBM bytes and the
    weight stream's ``weight_elems`` are zero (NVIDIA's L40S SGLang bf16 table, 2,048 x
    768 experts, TP 8, EP 4: 19.7 us at 1 token, 23.4 us at 8, while the experts touched
    grow from 2 to 16, 2.4 to 19 MB, against a 96 MB L2 and 864 GB/s of GDDR6). A serving
    step passes None: every byte from HBM, the features as before.

    ``large_m``: the launch runs SGLang's large-M default Triton config
    (``sglang_large_m``): the weights it streams are the ``large_m_weights`` extra too
    (zero where the set is read from L2), a second rate for the weight stream of that
    tile (NVIDIA's A100 SGLang 0.5.10 bf16 table, 2,048 x 768 experts, 128 of them, TP 1:
    752 us at 128 tokens, 1,121 us at 160, the same experts' weights streamed).

    ``tile``: the token tile the kernel takes each expert's rows in (``moe_token_tile``;
    0: none read): the padded rows' FLOPs are the extra ``pad_flops``, the weights each
    further tile of an expert streams again the extra ``restream_weights``
    (``moe_tile_extras``).

    ``grid_flops``: the FLOPs the kernel's grid runs as whole waves of its tiles
    (``sglang_grid_flops``; 0 for a kernel whose grid was not read), the extra
    ``grid_flops``.

    ``routed_passes``: the elements the kernel moves for every routed row beyond the
    rank's GEMMs (``vllm_triton_routed_elems``; 0 for a kernel whose passes were not read),
    the extra ``routed_passes``.

    ``clamped``: rows one of the ``active`` experts computes on top of ``rows`` (the
    SGLang collector's rank-0 rows of the slots it masked, ``collector_routing.
    sglang_clamped_rows``): counted in the FLOPs and bytes as rows, and in that expert's
    tiles (0 in a serving step)."""
    flops, nbytes, weights = moe_sums(rows + clamped, active, d, width, up_mats, e, act_e, w_e)
    resident = replay_resident(nbytes, l2_bytes)
    pad, restream = moe_tile_extras(rows, active, tile, d, width, up_mats, clamped)
    extras = {
        "weight_elems": 0.0 if resident else weights,
        "routed_elems": float(routed),
        "tile_bytes": moe_tile_bytes(d, width, up_mats, w_e),
        "l2_bytes": nbytes if resident else 0.0,
        "large_m_weights": weights if large_m and not resident else 0.0,
        "pad_flops": pad,
        "restream_weights": restream,
        "grid_flops": grid_flops,
        "routed_passes": routed_passes,
        "active_experts": active,
    }
    return flops, 0.0 if resident else nbytes, extras


# SGLang's fused-MoE Triton kernel without a tuned config file runs ``get_default_config``
# (sglang 0.5.10 ``srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py``, 0.5.14
# ``srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py``, the same
# function): unquantised experts take BLOCK_SIZE_M 16 / N 32 / K 64 while the tokens are
# at most the local experts (``M <= E``), BLOCK_SIZE_M 64 / N 64 / K 32 / GROUP_SIZE_M 8
# above. aiconfigurator's collector takes that path (``collector/sglang/collect_moe.py``,
# ai-dynamo/aiconfigurator 095f58a51: ``get_default_config`` where ``get_moe_configs``
# finds no file).
SGLANG_TRITON_SOURCE = "sglang_fused_moe_triton"


def sglang_default_config(source: str, unquantised: bool) -> bool:
    """Whether a fused-MoE launch (kernel source ``source``; ``unquantised``: bf16 experts)
    runs SGLang's Triton kernel at ``get_default_config``'s bf16 tiles (above)."""
    return source == SGLANG_TRITON_SOURCE and unquantised


# SGLang's Triton runner with mxfp4 experts (``Mxfp4MoEMethod`` on the ``triton`` runner
# backend, the label ``SGLANG_TRITON_SOURCE`` with table mode ``mxfp4``: the H100, H200 and
# L40S 0.5.14 tables) does not run them as mxfp4: ``process_weights_after_loading`` upcasts
# both expert weights to bf16 (``triton_kernels.numerics_details.mxfp.upcast_from_mxfp(...,
# target_dtype=torch.bfloat16)``) and ``apply`` hands them to the Triton runner as
# ``TritonMoeQuantInfo`` without a quantisation flag: the bf16 fused-MoE kernel at bf16
# bytes, ``get_default_config``'s bf16 tiles (sglang 0.5.14 wheel, sha256 4fe16056b45c...,
# ``srt/layers/quantization/mxfp4.py``). aiconfigurator's collector asks for that backend
# (``collector/sglang/collect_moe.py`` ``source_by_backend``: ``triton`` ->
# ``sglang_fused_moe_triton``, ai-dynamo/aiconfigurator 095f58a51). SGLang serving gpt-oss on
# Hopper at EP 1 picks ``triton_kernel`` instead (``server_args.py``); the fit prices the
# kernel its table timed (docs/decisions.md, issue 34, helper ``moe37b``, session 37).
SGLANG_UPCAST_MODES = frozenset({"mxfp4"})


def sglang_upcast_experts(source: str, table_mode: str, grid_fitted: bool) -> bool:
    """Whether a fused-MoE launch (kernel source ``source``, experts of table mode
    ``table_mode``) runs SGLang's Triton kernel on experts upcast to bf16 (above), for a fit
    that reads SGLang's Triton grid (``grid_fitted``: ``reads_sglang_grid``; a fit written
    before was fitted on the experts' own bytes and keeps them)."""
    return grid_fitted and source == SGLANG_TRITON_SOURCE and table_mode in SGLANG_UPCAST_MODES


def reads_sglang_grid(params: dict[str, float]) -> bool:
    """Whether a fused-MoE fit was fitted on rows with SGLang's Triton grid
    (``sglang_grid_flops``) and the SGLang collector's rank 0
    (``collector_routing.sglang_rank0_row``): a positive ``c_grid_flops``; one written
    before reads 0 (``profile._upgrade``) and was fitted on the mean rank without it."""
    return params.get("c_grid_flops", 0.0) > 0.0


def sglang_large_m(source: str, unquantised: bool, tokens: float, local_experts: float) -> bool:
    """Whether a fused-MoE launch of ``tokens`` runs SGLang's large-M default Triton config
    (kernel source ``source``; ``unquantised`` bf16 experts; ``local_experts`` experts on
    the rank): SGLang's Triton kernel, unquantised experts, more tokens than experts."""
    return sglang_default_config(source, unquantised) and tokens > local_experts


# SGLang's fused-MoE Triton kernel runs a 1-D grid of ``cdiv(EM, BLOCK_SIZE_M) *
# cdiv(N, BLOCK_SIZE_N)`` programs (sglang 0.5.14 ``srt/layers/moe/moe_runner/
# triton_utils/fused_moe_triton_kernels.py`` ``invoke_fused_moe_kernel``, the same in
# 0.5.10 ``fused_moe_triton/fused_moe.py``), once for the gate-and-up GEMM (N = 2 x the
# expert width, K = hidden) and once for the down GEMM (N = hidden, K = the width):
# ``moe_align_block_size`` pads each expert's rows to whole BLOCK_SIZE_M blocks, a program
# past ``num_tokens_post_padded`` returns at once, and every other computes one
# BLOCK_SIZE_M x BLOCK_SIZE_N tile over the whole K, one program an SM at a time. The
# default config's tiles (``get_default_config``, bf16 experts): 16 x 32 while the tokens
# are at most the rank's experts, 64 x 64 above (``sglang_large_m``). Where the programs
# are few the time goes by waves of them, not by bytes or FLOPs: NVIDIA's L40S SGLang 0.5.14
# bf16 table (142 SMs), 2,048 x 768 experts, 128 of them, top 8, EP 32 (four on the
# collector's rank 0, ``collector_routing``): 115 us at 1,024 tokens (64 rows an expert,
# 4 x 24 = 96 gate-and-up programs, one wave), 239 us at 1,536 (96 rows, two blocks an
# expert: 192 programs, two waves).
SGLANG_DEFAULT_TILES = {False: (16, 32), True: (64, 64)}  # large-M -> (BLOCK_M, BLOCK_N)


def sglang_grid_flops(
    rows: float,
    active: float,
    d: int,
    width: int,
    up_mats: int,
    large_m: bool,
    sms: int | None,
    hot: float = 0.0,
) -> float:
    """The FLOPs SGLang's Triton fused MoE runs for ``rows`` routed rows over ``active``
    experts of width ``width`` (hidden ``d``) with its default config's tiles
    (``large_m``: the large-M config), counted as whole waves of programs over ``sms``
    SMs: each wave's programs times one tile's FLOPs over the GEMM's K, both GEMMs; 0
    where the SMs are not tabulated or no row is routed. ``hot``: rows one expert holds
    on top of ``rows`` (``collector_routing.sglang_clamped_rows``)."""
    bm, bn = SGLANG_DEFAULT_TILES[large_m]
    blocks = moe_expert_tiles(rows, active, bm, hot)
    if not blocks or not sms:
        return 0.0
    up = blocks * math.ceil(up_mats * width / bn)  # gate-and-up programs, K = d
    down = blocks * math.ceil(d / bn)  # down programs, K = width
    return 2.0 * bm * bn * sms * (math.ceil(up / sms) * d + math.ceil(down / sms) * width)


# The same kernel's config where a tuned file exists (bf16 experts without one: the default
# tiles above, ``SGLANG_DEFAULT_TILES``). SGLang's Triton fused MoE (``SGLANG_TRITON_SOURCE``)
# takes each expert's rows in tiles of the BLOCK_SIZE_M its config lookup resolves (sglang
# 0.5.9 / 0.5.10 ``srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py``, 0.5.14
# ``moe_runner/triton_utils/``, the same files, sha256-equal): ``get_moe_configs(E, N, dtype,
# 128, 128)`` with ``E`` the rank's experts (``w1.shape[0]``) and ``N`` the expert width on
# the rank, reads ``configs/triton_<running Triton>/E=<E>,N=<N>,device_name=NVIDIA_H200,
# dtype=fp8_w8a8,block_shape=[128, 128].json``,
# else the first found in ``triton_3_4_0``, ``3_3_1``, ``3_2_0``, ``3_1_0``, and takes the entry
# whose key is nearest the launch's tokens; without a file ``get_default_config``'s block-fp8
# config is BLOCK_SIZE_M 64 (per-tensor fp8, a width not a multiple of 128: 64 while the
# tokens are at most ``E``, else 128). ``moe_align_block_size`` pads each expert's rows to
# whole blocks. aiconfigurator's collector (``collector/sglang/collect_moe.py``,
# ai-dynamo/aiconfigurator af05a670a) asks for ``E = num_experts // moe_ep`` and times the
# config under ``override_config`` (both GEMMs); SGLang 0.5.9 (torch 2.9.1, Triton 3.5.1) serving
# DeepSeek-V3/R1 or GLM-5 with the shared expert fused looks up ``E=257`` and finds the
# ``triton_3_5_1`` file (its ``_down`` file takes the same BLOCK_SIZE_M at every key). The H200
# fp8_w8a8 files' BLOCK_SIZE_M by key (keys 1-4096; a range shares one value):
# (E, N, block_shape [128, 128]): (key up to which, BLOCK_SIZE_M), ...
SGLANG_H200_FP8_TILES: dict[tuple[int, int, bool], tuple[tuple[int, int], ...]] = {
    # triton_3_1_0: 16 at 1-2, 64 at 4-8, 16 at 16, 64 at 24-2048, 128 at 3072, 64 at 4096
    (256, 256, True): ((2, 16), (8, 64), (16, 16), (2048, 64), (3072, 128), (4096, 64)),
    (64, 512, True): ((1024, 64), (1536, 128), (4096, 64)),  # triton_3_1_0
    (128, 384, True): ((128, 16), (4096, 64)),  # triton_3_2_0
    (128, 768, True): ((2, 64), (128, 16), (4096, 64)),  # triton_3_2_0
    (160, 640, True): ((256, 16), (512, 32), (4096, 64)),  # triton_3_3_1
    (384, 128, True): ((512, 16), (1024, 32), (4096, 64)),  # triton_3_3_1
    (257, 256, True): ((256, 16), (512, 32), (1024, 64)),  # triton_3_5_1, up and _down
    (257, 128, True): ((512, 16), (4096, 64)),  # triton_3_3_1 (DeepSeek at TP 16, fused)
    (128, 192, False): ((256, 16), (1024, 64), (1536, 128), (2048, 64), (4096, 128)),  # 3_4_0
}
SGLANG_H200_FP8_KEYS: tuple[int, ...] = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512)
SGLANG_H200_FP8_KEYS += (1024, 1536, 2048, 3072, 4096)  # the files' token keys
SGLANG_H200_DEVICE = "NVIDIA H200"


def sglang_triton_block_m(
    source: str, device: str, table_mode: str, tokens: float, local_experts: float, width: int
) -> int:
    """SGLang's Triton fused-MoE BLOCK_SIZE_M for a launch of ``tokens`` tokens over
    ``local_experts`` experts of width ``width`` (``SGLANG_H200_FP8_TILES``): fp8 experts
    (``table_mode`` ``fp8_block``) on ``SGLANG_H200_DEVICE``; 0 for any other kernel,
    format or GPU (their files were not read)."""
    if source != SGLANG_TRITON_SOURCE or device != SGLANG_H200_DEVICE:
        return 0
    if table_mode != "fp8_block":
        return 0
    e, block = round(local_experts), width % 128 == 0
    ranges = SGLANG_H200_FP8_TILES.get((e, width, block))
    if ranges is None:  # get_default_config
        return 64 if block or tokens <= e else 128
    keys = [k for k in SGLANG_H200_FP8_KEYS if k <= ranges[-1][0]]
    key = min(keys, key=lambda k: abs(k - tokens))
    return next(m for upto, m in ranges if key <= upto)


# vLLM's Marlin MoE (the table label 0.24.0 writes for ``MarlinExperts``, the kernel
# ``engine_kernels.MARLIN_WNA16``: Kimi-K2.5's int4 experts) picks its row block per launch
# (vllm 0.24.0 wheel, PyPI sha256 2d2831ae..., ``model_executor/layers/fused_moe/experts/
# marlin_moe.py`` ``fused_marlin_moe``): ``for block_size_m in [8, 16, 32, 48, 64]: if M *
# topk / E / block_size_m < 0.9: break`` (64 when none breaks), ``M`` the launch's tokens and
# ``E = w1.size(0)`` the experts on the rank (the local experts under EP, where the rank's
# rows per expert are the global ones: the block is then EP times too large);
# ``moe_align_block_size`` pads each expert's rows to whole blocks and
# ``ops.moe_wna16_marlin_gemm`` computes every block's ``block_size_m`` rows over the
# expert's whole width (both GEMMs). aiconfigurator's collector times vLLM 0.24.0's
# ``FusedMoE`` module (``collector/vllm/collect_moe.py``, ai-dynamo/aiconfigurator
# 095f58a51: ``enable_expert_parallel`` when moe_ep > 1). The tables step where the rule
# does (B200, 7,168 x 2,048 experts, 384, top 8, EP 2: 1,220 us at 160 tokens, 1,320 at
# 192 (block 8 -> 16), 1,338 at 320, 1,985 at 384 (16 -> 32); EP 1: 7.3 ms at 3,072 tokens
# (64 rows an expert, one block), 14.2 at 4,096 (85, two blocks), 21.6 at 8,192 (171, three)).
# The same ``MarlinExperts`` (the label's last part) runs vLLM 0.24.0's mxfp4 experts where
# Marlin is their backend (the checkpoints' w4a4 mxfp4 and gpt-oss's mxfp4 tables, and the
# Marlin mxfp4 price ``Profile.with_marlin_experts`` derives from the int4 fit): one rule.
VLLM_MARLIN_SOURCES = frozenset(
    {
        "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts",
        "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts",
        "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu",
        "vllm_gptossmxfp4moe_marlin_marlinexperts",
    }
)
# SGLang's Marlin MoE picks its row block by the same loop (sglang 0.5.14 wheel, PyPI sha256
# 4fe16056b45c..., and 0.5.10, ac8855a5d57d..., ``srt/layers/moe/fused_moe_triton/
# fused_marlin_moe.py`` ``fused_marlin_moe``: ``for block_size_m in [8, 16, 32, 48, 64]: if
# M * topk / E / block_size_m < 0.9: break``, ``E = w1.shape[0]``, the rank's experts), and
# pads each expert's rows to whole blocks through ``moe_align_block_size``. aiconfigurator's
# collector times it through SGLang's ``FusedMoE`` layer with every token on the rank
# (``collector/sglang/collect_moe.py`` ``_benchmark_framework_quantized_moe``, ai-dynamo/
# aiconfigurator 095f58a51: the label ``sglang_marlin_moe``, int4 and w4a16 mxfp4 experts),
# the layer built as EP rank 0 (``collector_routing.sglang_rank0_row``; the 0.5.10 int4
# tables, cb4d907c7, call ``fused_marlin_moe`` on rank 0's tokens instead).
# NVIDIA's H200 SGLang 0.5.14 int4 table steps there as vLLM's does (7,168 x 2,048 experts,
# 384, top 8: 64 rows an expert at 3,072 tokens, one block; two blocks at 4,096).
SGLANG_MARLIN_SOURCES = frozenset({"sglang_marlin_moe"})
MARLIN_MOE_SOURCES = VLLM_MARLIN_SOURCES | SGLANG_MARLIN_SOURCES
MARLIN_BLOCKS_M = (8, 16, 32, 48, 64)
MARLIN_BLOCK_SLACK = 0.9


def marlin_block_m(source: str, tokens: float, top_k: int, local_experts: float) -> int:
    """vLLM's or SGLang's Marlin MoE row block (``MARLIN_MOE_SOURCES``) for a launch of
    ``tokens`` tokens, ``top_k`` experts each, ``local_experts`` experts on the rank; 0 for
    any other kernel source."""
    if source not in MARLIN_MOE_SOURCES:
        return 0
    per_expert = tokens * top_k / local_experts
    for block in MARLIN_BLOCKS_M:
        if per_expert / block < MARLIN_BLOCK_SLACK:
            return block
    return MARLIN_BLOCKS_M[-1]


# FlashInfer's TRT-LLM-gen MXFP4 fused MoE with bf16 activations (the table label vLLM
# 0.24.0 writes for ``TrtLlmMxfp4ExpertsMonolithic``, ``engine_kernels.
# FLASHINFER_TRTLLM_MXFP4``: gpt-oss's experts on SM100) picks its token tile per launch
# (flashinfer-python 0.6.12, vLLM 0.24.0's pin, PyPI sha256 0c7a01e5...,
# ``data/csrc/trtllm_fused_moe_kernel_launcher.cu``): without a tuned tactic (the collector
# runs no autotuning; aiconfigurator ``collector/vllm/collect_moe.py`` 095f58a51)
# ``resolveMoeTileAndConfig`` takes ``selectDefaultTileN``: ``computeSelectedTileN`` centres
# on ``nextPowerOfTwo(num_tokens * top_k / num_local_experts)`` clamped to the supported
# tiles (bf16 activations: 8, 16, 32, 64, ``FP4BlockScaleLauncher::getSupportedTileNums``)
# and returns it with its neighbours (-1, +1, +2) as a sorted set, whose first is taken:
# one tile below the centre. Each tile of an expert's rows streams the expert's weights.
FLASHINFER_TRTLLM_MXFP4_SOURCES = frozenset(
    {"vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic"}
)
FLASHINFER_BF16_TILES = (8, 16, 32, 64)


def trtllm_gen_centre_tile(
    tokens: float, top_k: int, local_experts: float, tiles: tuple[int, ...]
) -> int:
    """The TRT-LLM-gen launchers' centre tile for a launch of ``tokens`` tokens, ``top_k``
    experts each, ``local_experts`` on the rank: ``nextPowerOfTwo(tokens x top_k /
    local_experts)`` clamped to ``tiles`` (``computeSelectedTileN``'s centre)."""
    centre = next_power_of_two(math.ceil(tokens * top_k / local_experts))
    return min(max(centre, tiles[0]), tiles[-1])


def flashinfer_default_tile(
    tokens: float, top_k: int, local_experts: float, tiles: tuple[int, ...] = FLASHINFER_BF16_TILES
) -> int:
    """FlashInfer's untuned TRT-LLM-gen token tile for a launch of ``tokens`` tokens,
    ``top_k`` experts each, ``local_experts`` on the rank, over the launcher's ``tiles``
    (bf16 activations' by default; ``FLASHINFER_MXINT4_TILES``): one below the centre."""
    centre = trtllm_gen_centre_tile(tokens, top_k, local_experts, tiles)
    return tiles[max(0, tiles.index(centre) - 1)]


# SGLang 0.5.14's int4 experts on SM100 (the table label ``sglang_flashinfer_trtllm_moe``, mode
# ``int4_wo``: Kimi-K2.5's experts) run FlashInfer's TRT-LLM-gen MxInt4 MoE without a tactic
# (sglang wheel sha256 4fe16056b45c..., ``srt/layers/quantization/compressed_tensors/schemes/
# compressed_tensors_w4a4_mxint4_moe.py`` ``apply_weights``: ``trtllm_mxint4_block_scale_moe``
# with ``tune_max_num_tokens`` only; flashinfer-python 0.6.12, SGLang 0.5.14's pin,
# ``trtllm_mxint4_block_scale_moe`` -> ``resolveMoeTileAndConfig`` -> ``selectDefaultTileN``)
# over ``MxInt4BlockScaleLauncher::mSupportedTileNums`` = 8, 16, 32, 64, 128: one tile below
# ``nextPowerOfTwo`` of the rows an expert, as above. The collector times SGLang's
# ``FusedMoE`` layer with every token on the rank (``collector/sglang/collect_moe.py``
# ``_benchmark_framework_quantized_moe``, ai-dynamo/aiconfigurator 095f58a51). NVIDIA's GB200
# SGLang 0.5.14 int4 table steps there (7,168 x 2,048 experts, 384, top 8, EP 1: 64 rows an
# expert at 3,072 tokens in two tiles of 32, 85 at 4,096 in two of 64: the shipped fit +0.15
# log too slow at 3,072 and -0.13 too fast at 4,096 on the held-out rows).
SGLANG_FLASHINFER_TRTLLM_SOURCE = "sglang_flashinfer_trtllm_moe"
FLASHINFER_MXINT4_MODE = "int4_wo"
FLASHINFER_MXINT4_TILES = (8, 16, 32, 64, 128)


# TensorRT-LLM's mxfp4 experts with mxfp8 activations on SM100 (``TRTLLMGenFusedMoE`` ->
# ``MxE4m3MxE2m1BlockScaleMoERunner``; the table label ``moe_torch_flow``, mode
# ``w4a8_mxfp4_mxfp8``: ``calibration.aic_moe.TRTLLM_MXFP8_ACTIVATION_SOURCE``). Without a tuned
# tactic (``[-1, -1]``) the runner takes the centre tile itself, not the one below it:
# ``tileN = clamp(nextPowerOfTwo(num_tokens * top_k / local_num_experts))`` over its MxFp8
# tiles 8, 16, 32, 64, 128, 256, with that tile's default config (NVIDIA/TensorRT-LLM
# ``cpp/tensorrt_llm/thop/mxFp4BlockScaleMoe.cpp`` ``MxE4m3MxE2m1BlockScaleMoeRunner::run``,
# as stored at 03853d11; the 1.3.0rc20 text the table was collected with was not read). The
# autotuner, where it ran, picks among ``computeSelectedTileN``'s centre and neighbours; of
# those four the fit rows identify the centre (helper moe37, session 37, ``benchmarks/results/
# moe37-s37/vmxfp8.txt``). Its ``num_tokens`` is every token of the launch (the collector gives
# the rank all of them), so under EP the tile is ``ep`` times the rows an expert holds.
# The label is TensorRT-LLM's for its fused-MoE tables whatever kernel runs (TRT-LLM-gen
# on SM100, Triton on Hopper: ``trtllm_triton_block_m``), so its rules also key on the mode
# and the device.
TRTLLM_MOE_SOURCE = "moe_torch_flow"
MXFP8_ACTIVATION_MODE = "w4a8_mxfp4_mxfp8"
TRTLLM_MXFP8_TILES = (8, 16, 32, 64, 128, 256)


# vLLM 0.24.0's nvfp4 experts on SM100 (``TrtLlmNvFp4ExpertsMonolithic``, vllm wheel sha256
# 2d2831aeba31..., ``model_executor/layers/fused_moe/experts/trtllm_nvfp4_moe.py``: the table
# label below) call FlashInfer's ``trtllm_fp4_block_scale_moe`` without a tactic, and the
# collector runs no autotuning (aiconfigurator ``collector/vllm/collect_moe.py`` 095f58a51):
# flashinfer-python 0.6.12 (vLLM 0.24.0's pin, ``data/csrc/trtllm_fused_moe_kernel_launcher.cu``)
# ``resolveMoeTileAndConfig`` -> ``selectDefaultTileN`` as above, over
# ``FP4BlockScaleLauncher::getSupportedTileNums`` for non-bf16 activations: 8, 16, 32, 64,
# 128, 256 (helper moe-tile30 read it, session 30; helper moe37 built it, session 37). The
# same launcher with mxfp8 activations times vLLM's mxfp4 x mxfp8 family (SGLang 0.5.14's
# ``sglang_flashinfer_trtllm_moe`` rows of mode ``w4a8_mxfp4_mxfp8``, ``calibration.aic_moe.
# MXFP8_ACTIVATION_SOURCE``: ``trtllm_fp4_block_scale_moe``, no tactic, as SGLang's int4 call
# above; SGLang's own mxfp4 call was not re-read in session 37): the same one-below tile over
# these tiles, which the fit rows identify against the centre (``moe37-s37/vmxfp8.txt``).
FLASHINFER_TRTLLM_NVFP4_SOURCES = frozenset(
    {"vllm_compressedtensorsw4a4nvfp4moe_flashinfer_trtllm_trtllmnvfp4expertsmonolithic"}
)
FLASHINFER_FP4_TILES = (8, 16, 32, 64, 128, 256)


# FlashInfer's CUTLASS fused MoE (``cutlass_fused_moe``; the table label vLLM 0.24.0 writes for
# ``FlashInferExperts`` under ModelOpt per-tensor fp8, ``experts/flashinfer_cutlass_moe.py``:
# no tactic passed) runs the TMA warp-specialised grouped GEMM with each expert's rows as a
# problem's M. Without a tuned tactic (the collector runs no autotuning: flashinfer-python
# 0.6.12 ``autotuner.py`` returns the fallback tactic -1 outside ``autotune()``) the runner
# takes ``mAllProfiles.front()`` (flashinfer ``csrc/fused_moe/cutlass_backend/
# flashinfer_cutlass_fused_moe_binding.cu``: "Fallback tactic is set to be 0"), the first of
# ``get_candidate_configs_sm90``: ``get_candidate_tiles_sm90``'s first grouped-GEMM tile,
# ``CtaShape128x16x128B`` (``csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/
# cutlass_heuristic.cpp``, flashinfer-ai/flashinfer 052b8940; the 0.6.12 wheel JIT-builds it
# and ships no copy): 128 rows of an expert a CTA, each M tile streaming the expert's
# weights through its N tiles. The tables step where an expert's rows cross 128 (H200,
# 1,024 x 2,688 experts, 512, top 22, EP 1: 3.71 ms at 2,048 tokens, 88 rows an expert; 7.56
# at 3,072, 132 rows, two tiles; 10.7 at 6,144, three).
FLASHINFER_CUTLASS_SM90_SOURCES = frozenset(
    {"vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts"}
)
FLASHINFER_CUTLASS_SM90_TILE_M = 128


# vLLM's Triton fused MoE (``TritonExperts``: the table labels vLLM 0.24.0 writes for its
# unquantised, ModelOpt per-tensor fp8 and block-fp8 experts on the Triton backend) passes
# over every routed row of the launch, not only the rank's (vllm 0.24.0 wheel, PyPI sha256
# 2d2831aeba31..., ``model_executor/layers/fused_moe/experts/triton_moe.py``
# ``TritonExperts.apply``): ``intermediate_cache1`` is ``(num_tokens, top_k, N)``, the
# activation (``silu_and_mul``: reads the gate-and-up row, writes the width) runs over all
# ``num_tokens x top_k`` of its rows, and ``moe_sum`` reads all of ``intermediate_cache3``.
# Under expert parallelism ``_prepare_expert_assignment`` calls ``moe_align_block_size``
# with the expert map and ``ignore_invalid_experts`` False (``fused_moe.py``): every global
# expert's rows keep their blocks, a remote expert's block gets expert id -1, and
# ``fused_moe_kernel`` writes zeros for it (``write_zeros_to_output``) in both GEMMs, so
# each remote row writes the gate-and-up width and the hidden width as zeros. The
# collector times that module (aiconfigurator ``collector/vllm/collect_moe.py``,
# ai-dynamo/aiconfigurator 095f58a51: one rank, ``enable_expert_parallel`` when moe_ep >
# 1, every token routed over the global experts). NVIDIA's L40S vLLM bf16 table, 2,048 x
# 768 experts, 128 of them, top 8, EP 128 (one local expert): 94 us at 1,024 tokens, 229
# at 2,048, 469 at 3,072, where the rank's own rows are 64, 128 and 192.
VLLM_TRITON_SOURCES = frozenset(
    {
        "vllm_unquantizedfusedmoe_triton_tritonexperts",
        "vllm_modeloptfp8moe_triton_tritonexperts",
        "vllm_fp8moe_triton_tritonexperts",
    }
)


def vllm_triton_routed_elems(
    source: str, routed: float, rows: float, d: int, width: int, up_mats: int
) -> float:
    """The elements vLLM's Triton fused MoE (``VLLM_TRITON_SOURCES``) moves for every
    routed row of a launch beyond the rank's GEMMs: the activation over all ``routed``
    token x top-k rows (reads ``up_mats x width``, writes ``width``) and the zeros the
    remote experts' blocks write (``routed - rows`` rows: ``up_mats x width`` in the first
    GEMM, ``d`` in the second; ``rows`` the rank's own); 0 for any other kernel source."""
    if source not in VLLM_TRITON_SOURCES:
        return 0.0
    remote = max(0.0, routed - rows)
    return routed * (up_mats + 1) * width + remote * (up_mats * width + d)


def moe_token_tile(
    source: str, tokens: float, top_k: int, local_experts: float, table_mode: str
) -> int:
    """The token tile a fused-MoE kernel pads each expert's rows to and streams the
    expert's weights once for (``marlin_block_m``, ``flashinfer_default_tile`` over the
    launcher's tiles, ``trtllm_gen_centre_tile``, ``FLASHINFER_CUTLASS_SM90_TILE_M``);
    ``table_mode``: the experts' format (the tables' mode), where one label times several
    kernels (``SGLANG_FLASHINFER_TRTLLM_SOURCE``, ``TRTLLM_MOE_SOURCE``; required, so
    no caller loses that rule by leaving it out);
    0 for a kernel whose tile was not read."""
    if source in FLASHINFER_TRTLLM_MXFP4_SOURCES:
        return flashinfer_default_tile(tokens, top_k, local_experts)
    if source in FLASHINFER_TRTLLM_NVFP4_SOURCES:
        return flashinfer_default_tile(tokens, top_k, local_experts, FLASHINFER_FP4_TILES)
    if source == TRTLLM_MOE_SOURCE and table_mode == MXFP8_ACTIVATION_MODE:
        return trtllm_gen_centre_tile(tokens, top_k, local_experts, TRTLLM_MXFP8_TILES)
    if source == SGLANG_FLASHINFER_TRTLLM_SOURCE and table_mode == MXFP8_ACTIVATION_MODE:
        return flashinfer_default_tile(tokens, top_k, local_experts, FLASHINFER_FP4_TILES)
    if source == SGLANG_FLASHINFER_TRTLLM_SOURCE and table_mode == FLASHINFER_MXINT4_MODE:
        return flashinfer_default_tile(tokens, top_k, local_experts, FLASHINFER_MXINT4_TILES)
    if source in FLASHINFER_CUTLASS_SM90_SOURCES:
        return FLASHINFER_CUTLASS_SM90_TILE_M
    return marlin_block_m(source, tokens, top_k, local_experts)


# TensorRT-LLM's mxfp4 experts on Hopper (``W4A16_MXFP4``: ``TritonFusedMoE``, the table label
# ``moe_torch_flow``, mode ``mxfp4``, on the H100 / H200 tables) run triton_kernels'
# ``matmul_ogs`` over the ``RoutingData`` of ``TritonEPRouter`` (NVIDIA/TensorRT-LLM
# ``tensorrt_llm/_torch/modules/fused_moe/fused_moe_triton.py``, as stored at 00131d71): under
# EP the router prunes the gates to the rank's experts and builds the routing over
# ``n_expts_local`` experts, while the gate count stays every token's ``t x top_k``; the
# routing's row block is ``max(16, min(next_power_of_2(max(1, gates // experts)), 128))``
# (triton_kernels ``routing``; the same derivation in ROCm/aiter's port, whose comment says it
# overstates the rows an expert holds under EP). So under EP the block is ``ep`` times the
# rows an expert holds, as in the TRT-LLM-gen rules above. The triton_kernels release
# TensorRT-LLM 1.3.0rc20 pins was not read (a risk); the fit rows identify the local count
# against the global one (helper moe37, session 37, ``moe37-s37/vhopper.txt``).
TRTLLM_TRITON_MOE_DEVICES = HOPPER_DEVICES
TRTLLM_TRITON_BLOCKS_M = (16, 128)


def trtllm_triton_block_m(
    source: str, device: str, table_mode: str, tokens: float, top_k: int, local_experts: float
) -> int:
    """TensorRT-LLM's Triton MoE row block on Hopper (above) for a launch of ``tokens``
    tokens, ``top_k`` experts each, ``local_experts`` on the rank, on the table's ``device``;
    0 for any other kernel, format or device."""
    if (
        source != TRTLLM_MOE_SOURCE
        or table_mode != "mxfp4"
        or device not in TRTLLM_TRITON_MOE_DEVICES
    ):
        return 0
    per_expert = max(1, math.floor(tokens * top_k / local_experts))  # gates // experts
    low, high = TRTLLM_TRITON_BLOCKS_M
    return max(low, min(next_power_of_two(per_expert), high))


def expert_token_tile(
    source: str,
    device: str,
    tile_mode: str,
    expert_mode: str,
    tokens: float,
    launch_tokens: float,
    top_k: int,
    local_experts: float,
    width: int,
) -> int:
    """The token tile of a fused-MoE launch on ``device`` (kernel source ``source``), the
    one rule each kernel has: :func:`moe_token_tile` (``tile_mode``: the experts' table mode,
    or the mxfp8-activation kernel's), :func:`sglang_triton_block_m` (``expert_mode``: the
    experts' format; ``launch_tokens``: the tokens the launch sees, rank 0's in SGLang's
    collector, every token's in serving) or :func:`trtllm_triton_block_m`; 0 where no rule
    names the kernel. The fit reader and serving both call this, so a new rule is read and
    priced alike."""
    return (
        moe_token_tile(source, tokens, top_k, local_experts, tile_mode)
        or sglang_triton_block_m(source, device, expert_mode, launch_tokens, local_experts, width)
        or trtllm_triton_block_m(source, device, tile_mode, tokens, top_k, local_experts)
    )


def moe_expert_tiles(rows: float, active: float, tile: int, hot: float = 0.0) -> float:
    """The tiles of ``tile`` rows ``active`` experts take for ``rows`` routed rows spread
    evenly over them (each ``floor`` or ``ceil`` of the mean), one of them (one of the
    ``floor`` ones) holding ``hot`` rows more (``collector_routing.sglang_clamped_rows``);
    0 where ``tile`` is 0 or no expert is reached."""
    if not tile or active <= 0.0 or rows <= 0.0:
        return 0.0
    n = max(1, round(active))
    low = math.floor(rows / n)
    high = min(n, max(0, round(rows - low * n)))  # experts with one row more
    tiles = (n - high) * math.ceil(low / tile) + high * math.ceil((low + 1) / tile)
    if hot > 0.0:  # that expert's further tiles
        base = low if high < n else low + 1
        tiles += math.ceil((base + hot) / tile) - math.ceil(base / tile)
    return float(tiles)


def moe_tile_extras(
    rows: float, active: float, tile: int, d: int, width: int, up_mats: int, hot: float = 0.0
) -> tuple[float, float]:
    """(``pad_flops``, ``restream_weights``) of a fused-MoE launch whose kernel takes each
    expert's rows in tiles of ``tile`` (``moe_token_tile``): the FLOPs of the rows the
    tiles pad (both GEMMs, ``moe_sums``' FLOPs a row) and the weight elements the tiles
    past an expert's first stream again; (0, 0) where ``tile`` is 0. ``hot``: rows one
    expert holds on top of ``rows`` (``moe_expert_tiles``)."""
    tiles = moe_expert_tiles(rows, active, tile, hot)
    if not tiles:
        return 0.0, 0.0
    expert_elems = d * (up_mats * width + width)  # one expert's weights; a row's FLOPs / 2
    pad = 2.0 * max(0.0, tiles * tile - rows - hot) * expert_elems
    return pad, max(0.0, tiles - max(1, round(active))) * expert_elems


def allreduce_features(nbytes: float, n_gpus: int) -> Features:
    """A ring all-reduce of ``nbytes`` per GPU: each GPU sends and receives 2 (n-1)/n of it."""
    return 0.0, 2.0 * (n_gpus - 1) / n_gpus * float(nbytes), {}


def gather_features(nbytes: float, n_gpus: int) -> Features:
    """A ring all-gather or reduce-scatter of a buffer of ``nbytes`` (all the GPUs'
    shares together): each GPU sends and receives (n-1)/n of it."""
    return 0.0, (n_gpus - 1) / n_gpus * float(nbytes), {}


def copy_features(nbytes: float, kernel: str) -> Features:
    """A copy of ``nbytes``; device-to-device counts the read and the write."""
    moved = 2.0 * nbytes if kernel == "copy_d2d" else float(nbytes)
    return 0.0, moved, {}


__all__ = [
    "FLASHINFER_BF16_TILES",
    "FLASHINFER_CUTLASS_SM90_SOURCES",
    "FLASHINFER_CUTLASS_SM90_TILE_M",
    "FLASHINFER_FP4_TILES",
    "FLASHINFER_MXINT4_MODE",
    "FLASHINFER_MXINT4_TILES",
    "FLASHINFER_TRTLLM_MXFP4_SOURCES",
    "FLASHINFER_TRTLLM_NVFP4_SOURCES",
    "MARLIN_BLOCKS_M",
    "MARLIN_BLOCK_SLACK",
    "MARLIN_MOE_SOURCES",
    "MXFP8_ACTIVATION_MODE",
    "REPLAY_L2_SHARE",
    "SGLANG_DEFAULT_TILES",
    "SGLANG_FLASHINFER_TRTLLM_SOURCE",
    "SGLANG_H200_DEVICE",
    "SGLANG_H200_FP8_KEYS",
    "SGLANG_H200_FP8_TILES",
    "SGLANG_MARLIN_SOURCES",
    "SGLANG_TRITON_SOURCE",
    "SGLANG_UPCAST_MODES",
    "TRTLLM_MOE_SOURCE",
    "TRTLLM_MXFP8_TILES",
    "TRTLLM_TRITON_BLOCKS_M",
    "TRTLLM_TRITON_MOE_DEVICES",
    "VLLM_MARLIN_SOURCES",
    "VLLM_TRITON_SOURCES",
    "Features",
    "act_quant_bytes",
    "act_quant_scheme",
    "allreduce_features",
    "attn_decode_features",
    "attn_decode_sums",
    "attn_decode_waves_d",
    "attn_prefill_features",
    "attn_prefill_sums",
    "conv1d_features",
    "copy_features",
    "decode_launch_rule",
    "elementwise_features",
    "expert_token_tile",
    "flashinfer_cta_tile_q",
    "flashinfer_decode_waves",
    "flashinfer_default_tile",
    "gather_features",
    "gemm_features",
    "gemm_features_at",
    "gemm_sums",
    "gemm_sums_at",
    "gemm_tile_rule",
    "gemm_wave_k",
    "launch_code",
    "launch_coefficient",
    "marlin_block_m",
    "moe_expert_tiles",
    "moe_features",
    "moe_sums",
    "moe_tile_bytes",
    "moe_tile_extras",
    "moe_token_tile",
    "next_power_of_two",
    "reads_sglang_grid",
    "replay_l2",
    "replay_resident",
    "sglang_default_config",
    "sglang_grid_flops",
    "sglang_large_m",
    "sglang_triton_block_m",
    "sglang_upcast_experts",
    "ssm_scan_features",
    "ssm_scan_sums",
    "ssm_step_features",
    "tile_waves",
    "trtllm_gen_centre_tile",
    "trtllm_triton_block_m",
    "vllm_triton_routed_elems",
]
