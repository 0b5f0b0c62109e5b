"""Features of the fused-MoE kernel families and the launch rules each engine's kernel takes.

``moe_features`` is a fused-MoE launch's row of the fit (``moe_sums``: FLOPs, bytes and
the weight elements of one rank's routed experts, with the extras the ``moe*`` formulas
of ``twin.costmodel.formulas`` read); the rest are the rules by which each engine's MoE
kernel lays out a launch, read from its source: SGLang's Triton configs and grid, vLLM's
and SGLang's Marlin row blocks, FlashInfer's TRT-LLM-gen and CUTLASS tiles, TensorRT-LLM's
Triton row block, vLLM's Triton passes over every routed row (``expert_token_tile``, the
one entry the fit reader and serving both call). The shared shape helpers (``Features``,
``next_power_of_two``, ``replay_resident``) are ``twin.costmodel.features``'. Pure Python.
"""

from __future__ import annotations

import math

from twin.costmodel.features import HOPPER_DEVICES, Features, next_power_of_two, replay_resident

# Bytes an element of vLLM's fp8 group quantisation writes: its fp8 value and a share of its
# group's fp32 scale (``per_token_group_quant_fp8`` at DeepGEMM's group of 128, vLLM 0.12.0
# ``DeepGemmExperts.apply``).
FP8_GROUP_BYTES = 1.0 + 4.0 / 128


def moe_sums(
    rows: float,
    active: float,
    d: int,
    width: int,
    up_mats: int,
    e: int,
    act_e: float,
    w_e: float,
    streamed: float = 0.0,
    tile_m: int = 1,
) -> tuple[float, float, float]:
    """(FLOPs, bytes, weight elements) of one rank's routed experts in one fused MoE
    launch: ``rows`` token x top-k rows routed to the rank, ``active`` of its experts hit,
    each expert ``d`` -> ``up_mats`` x ``width`` -> ``d`` (``width`` the expert's
    intermediate size over the MoE TP). Up and down projections as two grouped GEMMs:
    activations in at ``act_e`` bytes, the touched experts' weights at ``w_e``, outputs
    out at ``e`` (``gemm_sums_at`` per projection, the weights only of the experts hit).
    ``streamed`` rows more, in blocks of ``tile_m``, go through the launch's loads and
    stores without their MMAs (padding blocks priced uncomputed,
    ``MoePricing._moe_padded_rows``): their activations in and outputs out, for each
    block one expert's weights (the B tiles its block loads across the output), and the
    activation between the two GEMMs, which the engine runs as kernels of their own over
    every row of the buffer (vLLM 0.12.0 ``DeepGemmExperts.apply``: the gated activation
    reads the up projection's ``wide`` outputs and writes ``width``, the fp8 group
    quantisation reads those and writes ``width`` fp8 values and a scale a group:
    :data:`FP8_GROUP_BYTES` an element); no FLOPs."""
    wide = up_mats * width
    flops = 2.0 * rows * d * (wide + width)
    weights = active * d * (wide + width)
    moved = rows + streamed
    nbytes = act_e * moved * (d + width) + w_e * weights + float(e) * moved * (wide + d)
    if streamed:
        nbytes += w_e * (streamed / tile_m) * d * (wide + width)
        nbytes += streamed * (float(e) * (wide + 2 * width) + FP8_GROUP_BYTES * width)
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
    (``kernel_formula.KernelFormula.serial``: each expert hit is a grouped-GEMM
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
    before reads 0 (``fit_upgrade.upgrade_fit``) and was fitted on the mean rank without it."""
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


__all__ = [
    "FLASHINFER_BF16_TILES",
    "FLASHINFER_CUTLASS_SM90_SOURCES",
    "FLASHINFER_CUTLASS_SM90_TILE_M",
    "FLASHINFER_FP4_TILES",
    "FLASHINFER_MXINT4_MODE",
    "FLASHINFER_MXINT4_TILES",
    "FLASHINFER_TRTLLM_MXFP4_SOURCES",
    "FLASHINFER_TRTLLM_NVFP4_SOURCES",
    "FP8_GROUP_BYTES",
    "MARLIN_BLOCKS_M",
    "MARLIN_BLOCK_SLACK",
    "MARLIN_MOE_SOURCES",
    "MXFP8_ACTIVATION_MODE",
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
    "expert_token_tile",
    "flashinfer_default_tile",
    "marlin_block_m",
    "moe_expert_tiles",
    "moe_features",
    "moe_sums",
    "moe_tile_bytes",
    "moe_tile_extras",
    "moe_token_tile",
    "reads_sglang_grid",
    "sglang_default_config",
    "sglang_grid_flops",
    "sglang_large_m",
    "sglang_triton_block_m",
    "sglang_upcast_experts",
    "trtllm_gen_centre_tile",
    "trtllm_triton_block_m",
    "vllm_triton_routed_elems",
]
