"""How an engine release laid out a row's kernels where it differs from the twin's
default pricing: SGLang's GDN input projection, TensorRT-LLM's norms inside the
all-reduces and its fused q/k norm + RoPE (fields of ``ModelSpec``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from twin.model import ModelSpec
from twin.validate.silicon.harness import INFERENCEMAX, harness_of, model_named

if TYPE_CHECKING:
    from twin.validate.silicon.rows import SiliconRow


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
