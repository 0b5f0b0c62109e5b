"""The MLA absorbed-decode batched GEMMs (``mla_bmm*``, issue 34): W_UK and W_UV per head.

Their FLOPs and bytes, the output tiles' waves at two tile sizes, the bytes a table's
replays read from L2, TensorRT-LLM's serial fp8 quantisation on SM120 and the K loop's steps.
Per GPU (``heads`` the rank's share), counts as in ``twin.costmodel.features``. Pure Python.
"""

from __future__ import annotations

from twin.costmodel.features import Sums, gemm_sums_at, replay_l2, tile_waves


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


# TensorRT-LLM's fp8 block-scale linears run the same loop on SM120: its
# ``FP8BlockScalesLinearMethod.apply`` (NVIDIA/TensorRT-LLM
# ``tensorrt_llm/_torch/modules/linear.py``, stored version 00bbf71e) quantises the activation
# with ``per_token_quant_and_transform`` (a 2-D input: one "head") before
# ``fp8_block_scaling_gemm`` on compute capability 12.0 only (``fp8_quantize_1x128``, a
# CUDA kernel, elsewhere), and the module's absorbed BMMs take the fp8 path above. NVIDIA's
# RTX PRO 6000 module tables (TensorRT-LLM 1.3.0rc20, ``gemm_type`` fp8_block) show it: at
# 8 heads, where the replicated q_a / kv_a GEMM leads, the fp8-block module takes 1.1-1.4x
# the bf16 one at every prompt from 16 tokens up, the fp8 GEMMs' halved bytes and doubled
# peak notwithstanding; fits without the loop priced the fp8-block prefill modules at
# held-out P90 29-31% (docs/decisions.md, issue 34, helper mla44).
TRTLLM_MODULE_SOURCE = "default"  # TensorRT-LLM's module tables' ``kernel_source``
MODULE_QUANT_GEMM = "fp8_block"  # the module tables' ``gemm_type`` whose linears quantise


def module_quant_rule(gpu: str, kernel_source: str, gemm: str) -> bool:
    """Whether the MLA module a table (or the fit made from it) times runs the serial
    quantisation kernel before each linear and absorbed BMM (TensorRT-LLM's fp8 block-scale
    GEMMs on SM120; ``gemm`` the table's ``gemm_type``)."""
    return (
        gpu in TRTLLM_SM120_GPUS
        and kernel_source == TRTLLM_MODULE_SOURCE
        and gemm == MODULE_QUANT_GEMM
    )


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


__all__ = [
    "MLA_BMM_TILE",
    "MLA_BMM_TILE_K",
    "bmm_k_steps",
    "bmm_quant_rule",
    "bmm_quant_steps",
    "mla_bmm_features",
    "mla_bmm_sums",
    "module_quant_rule",
]
