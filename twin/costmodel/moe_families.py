"""The fused-MoE families' names (issue 34): the tables' quantisation modes and the peak
each runs against (``PRECISION_GEMMS``, the quantised GEMMs', and ``MOE_MODES``, the expert
formats': those and int4), the fused MoE's features, and the profile key of each fused-MoE
kernel: the default one, TensorRT-LLM's min-latency and TRTLLM-gen kernels, and the
mxfp8-activation kernel of the mxfp4 experts. Their formulas are in the registry,
``twin.costmodel.formulas``.
"""

from __future__ import annotations

# Quantised GEMM modes (the tables' names, ``twin.precision.WeightFormat.table_mode``)
# and the peak each runs against: FP8 and FP4 tensor-core rates (GpuSpec.fp8_flops,
# fp4_flops) where the activations are quantised too; the bf16 rate for a weight-only
# format (mxfp4 is W4A16: aiconfigurator-core 0.12.0 ``sdk/common.py``,
# ``w4a16_mxfp4`` has ``compute_dtype`` bfloat16).
PRECISION_GEMMS = {
    "fp8": "fp8_flops",
    "fp8_block": "fp8_flops",
    "nvfp4": "fp4_flops",
    "mxfp4": "flops",
}
# Weight-only formats the tables time as fused MoE only (no GEMM rows on the GPUs the
# twin prices): int4 (W4A16, ``int4_wo``: ``compute_dtype`` bfloat16, ibid.).
MOE_ONLY_MODES = {"int4_wo": "flops"}

# Expert formats of the fused-MoE families: ``moe`` (bf16) and ``moe_<mode>``, the
# tables' quant mode of ``twin.precision.WeightFormat.table_mode``.
MOE_MODES = {"bfloat16": "flops", **PRECISION_GEMMS, **MOE_ONLY_MODES}


# The fused MoE's terms (every fused-MoE family's: the default kernel, TensorRT-LLM's
# min-latency one, the mxfp8-activation one): its extras and its serial feature.
# ``l2_bytes``: a table row's working set read from L2 across the collector's replays
# (``moe_features.moe_features``); zero in a serving step, so a fit written before it reads
# with ``c_l2_bytes`` 0 and prices as it did (``fit_upgrade.upgrade_fit``). ``large_m_weights``:
# the weights SGLang's large-M default Triton config streams (``moe_features.sglang_large_m``;
# zero for every other kernel); a fit written before it reads ``c_large_m_weights`` 0.
# ``pad_flops`` / ``restream_weights``: the FLOPs of the rows a kernel pads each expert's
# rows with to its token tile, and the weights each further tile of an expert streams
# again (``moe_features.moe_token_tile``: vLLM's Marlin MoE, FlashInfer's TRT-LLM-gen mxfp4;
# zero for every other kernel); a fit written before them reads ``c_pad_flops`` and
# ``c_restream_weights`` 0. ``grid_flops``: the FLOPs SGLang's Triton kernel runs as whole
# waves of its default config's tiles (``moe_features.sglang_grid_flops``; zero for every
# other kernel); a fit written before it reads ``c_grid_flops`` 0. ``routed_passes``: the
# elements vLLM's Triton kernel moves for every routed row beyond the rank's GEMMs (its
# activation over all of them, the remote experts' zero writes under EP: ``moe_features.
# vllm_triton_routed_elems``; zero for every other kernel); a fit written before it reads
# ``c_routed_passes`` 0.
MOE_EXTRAS = (
    "weight_elems",
    "routed_elems",
    "tile_bytes",
    "l2_bytes",
    "large_m_weights",
    "pad_flops",
    "restream_weights",
    "grid_flops",
    "routed_passes",
)
MOE_SERIAL = ("active_experts",)


def moe_kernel(mode: str) -> str:
    """The profile key of the fused-MoE fit of table mode ``mode`` (``moe`` for bf16)."""
    return "moe" if mode == "bfloat16" else f"moe_{mode}"


# TensorRT-LLM's min-latency fused MoE: a second kernel of the nvfp4 experts, timed by
# NVIDIA's collector as kernel source ``moe_torch_flow_min_latency`` (TensorRT-LLM's
# TRTLLM-gen backend, ``TRTLLMGenFusedMoE``, at every token count: ai-dynamo/aiconfigurator
# ``collector/trtllm/collect_moe.py``, ``moe_backend = 'cutlass' if not min_latency_mode
# else 'trtllm'``, "trtllm gen", from its first commit efcae124c to 095f58a51; B200 and
# GB200 tables of TensorRT-LLM 1.3.0rc20), which
# aiconfigurator 0.12.0 prices a step with when it routes at most 128 tokens, nvfp4,
# gated (its Rust core's ``MoeOp`` silicon query, ``operators/moe.rs``: ``num_tokens <=
# 128 && quant == Nvfp4 && is_gated``, the token count after attention-DP gathering),
# falling back to the default kernel where the table lacks the shape. TensorRT-LLM
# takes its min-latency MoE path on the same kind of step: ``hidden_states.size(0) <=
# 128`` with the post-MoE all-reduce fusion, on Blackwell, quantised (Llama-4,
# ``tensorrt_llm/_torch/models/modeling_llama.py``), and for DeepSeek-V3 the TRTLLM
# backend's nvfp4 MoE with its finalize fused into the all-reduce while the step's tokens
# fit ``MoEAllReduce``'s workspace (``modeling_deepseekv3.py`` ``forward_MoE``, "the two
# min-latency MoE backends"; NVIDIA/TensorRT-LLM at commit 000561df).
MOE_MIN_LATENCY_SOURCE = "moe_torch_flow_min_latency"
MOE_MIN_LATENCY_MODES = {"nvfp4": "fp4_flops"}
MOE_MIN_LATENCY_MAX_TOKENS = 128


def moe_min_latency_kernel(mode: str) -> str:
    """The profile key of the min-latency fused-MoE fit of table mode ``mode``."""
    return f"{moe_kernel(mode)}_min_latency"


# The same TRTLLM-gen rows fitted over every token count the collector timed (up to
# 16,384): the kernel TensorRT-LLM runs at every step when ``moe_config.backend`` is
# ``TRTLLM`` (``twin.engine.modes_trtllm.TRTLLM_MOE``; ``get_moe_cls`` ->
# ``TRTLLMGenFusedMoE``), prefills included. The min-latency fit above, fitted on the
# steps of at most 128 tokens it prices, extrapolates 2-4x slow past 1,024 tokens
# (B200, DeepSeek's shape at MoE TP 8: 0.30 ms a layer at 1,024 tokens and 1.83 at 8,192
# against the table's 0.155 and 0.421).
def moe_trtllm_gen_kernel(mode: str) -> str:
    """The profile key of the TRTLLM-gen fused-MoE fit over every token count of
    table mode ``mode``."""
    return f"{moe_kernel(mode)}_trtllm_gen"


# The mxfp4 experts with their activations quantised to mxfp8 on the way in (FlashInfer's
# TRT-LLM-gen ``trtllm_fp4_block_scale_moe`` fed ``mxfp8_quantize``'s output: vLLM's
# ``SM100_FI_MXFP4_MXFP8_TRTLLM`` / ``FLASHINFER_TRTLLM_MXFP4_MXFP8`` backend on Blackwell,
# the tables' ``w4a8_mxfp4_mxfp8``, ``moe_features.MXFP8_ACTIVATION_MODE``): a second kernel
# of the same weight format, which a run takes only when asked (``twin.engine.modes_vllm``
# ``moe_backend``). Its fit keeps the weight format's features and peak (the bf16 rate, as
# ``mxfp4``'s), so it stands in for that format's fit (``Profile.with_experts_fit``); the
# faster MMAs are in its efficiency.
# Its peak is the weight format's own (``MOE_MODES``), which ``Profile.with_experts_fit``
# relies on.
MOE_MXFP8_ACTIVATION_MODES = {mode: MOE_MODES[mode] for mode in ("mxfp4",)}


def moe_mxfp8_activation_kernel(mode: str) -> str:
    """The profile key of the fused-MoE fit of weight mode ``mode`` with mxfp8
    activations."""
    return f"{moe_kernel(mode)}_mxfp8"


__all__ = [
    "MOE_EXTRAS",
    "MOE_MIN_LATENCY_MAX_TOKENS",
    "MOE_MIN_LATENCY_MODES",
    "MOE_MIN_LATENCY_SOURCE",
    "MOE_MODES",
    "MOE_MXFP8_ACTIVATION_MODES",
    "MOE_ONLY_MODES",
    "MOE_SERIAL",
    "PRECISION_GEMMS",
    "moe_kernel",
    "moe_min_latency_kernel",
    "moe_mxfp8_activation_kernel",
    "moe_trtllm_gen_kernel",
]
