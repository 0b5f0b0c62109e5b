"""The features each kernel's latency formula reads: FLOPs, bytes and extras of a shape.

Each ``*_features`` function returns ``(flops, bytes, {extra: value})`` for one launch
(the extras named in ``twin.costmodel.formulas.FORMULAS``); each ``*_sums`` function
returns the same quantities summed over the sequences of one batched launch, which is
how the cost model prices a step. ``e`` is bytes per element. Pure Python.
"""

from __future__ import annotations

import math
from typing import Any

from twin.mixers import chunk_keys, chunk_kv_rows

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
    the absorbed BMMs' two tile sizes (``mla_bmm.mla_bmm_features``)."""
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
# A static scale's pass (``static_scaled_fp8_quant``: read and write, ``(e + 1) m k``) is
# timed by no table and priced nowhere: a served static checkpoint fuses it
# (``KernelLayout.fp8_static_activation``). The ``fp8_block`` rows quantise per token group
# in the GEMM's own op: not this feature.
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
    element: dynamic ``(2 e + 1) m k`` (read, write fp8, and the scale's max reads the input
    once more: vLLM's per-token kernel reads each row twice); "" none, 0."""
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
        return tile_wave_k(m, n, k, sms, groups)
    total: Sums = 0.0
    low = 0.0
    for high, tile_m, tile_n in GEMM_TILE_RULES[tiles]:
        area = tile_m * tile_n / (GEMM_TILE_M * GEMM_TILE_N)
        waves = tile_waves(m, n, sms, groups, tile_m, tile_n)
        total = total + ((m > low) & (m <= high)) * waves * (area * k)
        low = high
    return total


def tile_wave_k(m: Sums, n: float, k: float, sms: int | None, groups: float) -> Sums:
    """:func:`gemm_wave_k` at the one default tile (``GEMM_TILE_M x GEMM_TILE_N``): waves
    x ``k`` (0 without an SM count). The compiled step's LM head
    (``twin.costmodel.compiled``) compiles this function."""
    return tile_waves(m, n, sms, groups, GEMM_TILE_M, GEMM_TILE_N) * k


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
    keys, kv_rows = chunk_keys(n, c, window), chunk_kv_rows(n, c, window)
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
#   ``mla_decode_kernels.FA3_BLOCK_M``). ``FA3_GRID_RULE``.
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
    return decode_grid_waves(batch, kv_heads, blocks, 1, sms, head_dim)


def decode_grid_waves(
    batch: float, kv_heads: int, row_blocks: int, ctas_per_sm: int, sms: int, head_dim: int
) -> float:
    """The one rule of the unsplit decode grids (FA3 / FA2's, FlashInfer's): one CTA per
    (sequence, KV head, block of packed query rows), ``row_blocks`` blocks a KV head, in waves
    of ``ctas_per_sm x sms`` resident CTAs, times the head dim."""
    ctas = int(batch) * kv_heads * row_blocks
    return float(-(-ctas // (ctas_per_sm * sms)) * head_dim)


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
    blocks = -(-group // flashinfer_cta_tile_q(group))
    return decode_grid_waves(batch, kv_heads, blocks, FLASHINFER_BLOCKS_PER_SM, sms, head_dim)


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
# ``fit_upgrade.upgrade_fit``).
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


# The third coefficient's name by launch rule: what it prices
# (``fit_upgrade.name_launch_coefficient`` reads an XQA fit written with the FA3 grid's name).
# FlashInfer's grid has its own name since
# session 40 (review39's first item): its ``c_waves_d`` had been fitted to FA3's grid before
# attnfix39 and to FlashInfer's after, so a file carrying that name is ambiguous and is refused
# (``fit_upgrade.stale_launch_coefficient``); a fit made now is written ``c_flashinfer_waves``.
XQA_COEFFICIENT = "c_xqa_ctas"
FLASHINFER_COEFFICIENT = "c_flashinfer_waves"
WAVES_COEFFICIENT = "c_waves_d"


def launch_coefficient(rule: str) -> str:
    """The name of the decode fit's third coefficient under launch ``rule``: ``c_xqa_ctas``
    (the XQA side's CTAs) under ``TRTLLM_XQA_RULE``, ``c_flashinfer_waves`` (FlashInfer's
    grid's waves x head dim) under ``FLASHINFER_GRID_RULE``, else ``c_waves_d`` (the FA3 / FA2
    grid's waves x head dim)."""
    if rule == TRTLLM_XQA_RULE:
        return XQA_COEFFICIENT
    return FLASHINFER_COEFFICIENT if rule == FLASHINFER_GRID_RULE else WAVES_COEFFICIENT


# The launch rules as integers (:func:`launch_code`), which compiled code takes.
GRID_LAUNCH, XQA_LAUNCH, FLASHINFER_LAUNCH = 0, 1, 2
_LAUNCH_CODES = {TRTLLM_XQA_RULE: XQA_LAUNCH, FLASHINFER_GRID_RULE: FLASHINFER_LAUNCH}


def launch_code(rule: str) -> int:
    """The integer of ``rule`` (``decode_launch``'s ``code``, the compiled step's
    ``compiled.LAUNCH``): 1 XQA, 2 FlashInfer's grid, 0 the FA3 / FA2 grid (and the unread
    tables, which keep it)."""
    return _LAUNCH_CODES.get(rule, GRID_LAUNCH)


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
    return decode_launch(launch_code(rule), batch, heads, kv_heads, head_dim, sms)


def decode_launch(
    code: int, batch: float, heads: int, kv_heads: int, head_dim: int, sms: int | None
) -> tuple[float, float]:
    """:func:`attn_decode_launch` by the rule's :func:`launch_code` ``code``: the one
    implementation, which the compiled step (``twin.costmodel.compiled``) compiles."""
    if code == XQA_LAUNCH:
        start = xqa_from_keys(int(batch), heads, kv_heads, head_dim, sms)
        return (0.0, 0.0) if start == math.inf else (float(kv_heads * batch), start)
    if code == FLASHINFER_LAUNCH:
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
    return decode_sums(batch, keys, heads, kv_heads, head_dim, e, kv_e, sms, launch_code(rule))


def decode_sums(
    batch: float,
    keys: Sums,
    heads: int,
    kv_heads: int,
    head_dim: int,
    e: int,
    kv_e: int | None,
    sms: int | None,
    code: int,
) -> tuple[Sums, Sums, Sums, Sums, Sums]:
    """:func:`attn_decode_sums` by the rule's :func:`launch_code` ``code``: the one
    implementation, which the compiled step (``twin.costmodel.compiled``) compiles. The
    launch extra from ``start`` keys on: ``z x (keys >= start)``, ``z`` or 0.0 exactly
    (``z`` >= 0), element by element where ``keys`` is an array (a decode run's steps)."""
    flops, nbytes, scores, tiles = attn_prefill_sums(
        batch, keys, keys, batch, heads, kv_heads, head_dim, e, kv_e
    )
    z, start = decode_launch(code, batch, heads, kv_heads, head_dim, sms)
    if not start:
        return flops, nbytes, scores, tiles, z
    return flops, nbytes, scores, tiles, z * (keys >= start)


def head_bytes(tokens: int, d: int, e: int) -> tuple[float, float]:
    """The bytes of a step's two element-wise passes around the layers over ``tokens``
    rows of width ``d``: the embedding gather (each row's ``d`` elements read and
    written) and the final norm (the same, and its ``d`` weights read)."""
    return e * 2.0 * tokens * d, e * (2.0 * tokens * d + d)


def elementwise_features(rows: int, width: int, e: int, passes: float = 2.0) -> Features:
    """An element-wise pass over rows x width touching ``passes`` tensors (RMSNorm: 2)."""
    return 4.0 * rows * width, float(e * (passes * rows * width + width)), {}


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
    ``nextPowerOfTwo`` / ``next_power_of_2``, which the launch rules in ``moe_features``
    and ``mla_decode_kernels`` round their counts to (each rounds its count to an integer as its
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
    (``mla_features.kernel_replay_l2``) and the conv update (``ssm_features.conv1d_features``)."""
    held = nbytes if footprint is None else footprint
    resident = l2_bytes is not None and replay_resident(held, l2_bytes)
    return nbytes * (1 - resident), nbytes * resident


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
    "REPLAY_L2_SHARE",
    "Features",
    "act_quant_bytes",
    "act_quant_scheme",
    "allreduce_features",
    "attn_decode_features",
    "attn_decode_sums",
    "attn_decode_waves_d",
    "attn_prefill_features",
    "attn_prefill_sums",
    "copy_features",
    "decode_grid_waves",
    "decode_launch",
    "decode_launch_rule",
    "decode_sums",
    "elementwise_features",
    "flashinfer_cta_tile_q",
    "flashinfer_decode_waves",
    "gather_features",
    "gemm_features",
    "gemm_features_at",
    "gemm_sums",
    "gemm_sums_at",
    "gemm_tile_rule",
    "gemm_wave_k",
    "launch_code",
    "launch_coefficient",
    "next_power_of_two",
    "replay_l2",
    "replay_resident",
    "tile_wave_k",
    "tile_waves",
]
