"""How each engine's builds lay out a model's kernels where that differs from the twin's
default pricing (``twin.costmodel.kernel_layout.KernelLayout``): one rule an engine, the
engine mode's ``kernel_layout`` (``twin.engine.mode_base.EngineMode``). The run chooses
the layout from the engine mode, its build (``EngineModeConfig.engine_build``, else the
kernel tables' release, else the engine's release) and the replica's GPUs
(``twin.engine.run_pricing.kernel_layout_of``), for ``twin simulate --engine`` and the silicon
scorer alike.

A model is recognised by its name (a preset's, or the Hugging Face id a config was read
under), as the engines' own modules are chosen by architecture.

Here: what the engines' rules share (a model recognised by its name, Qwen3's
architecture, DeepGEMM's block-fp8 experts). The rules are ``kernel_layouts_sglang``',
``kernel_layouts_trtllm``' and ``kernel_layouts_vllm``'.
"""

from __future__ import annotations

from twin import precision as px
from twin.model import ModelSpec


def _named(model: ModelSpec, stem: str) -> bool:
    return stem in model.name.lower()


# TensorRT-LLM's Qwen3 and Qwen3-MoE attention (``Qwen3Attention``, the one module both
# ``models/modeling_qwen3.py`` and ``models/modeling_qwen3_moe.py`` build; NVIDIA/
# TensorRT-LLM at 5dedf53b) is a ``QKNormRoPEAttention`` with ``fuse_qk_norm_rope``
# true: one ``fused_qk_norm_rope`` launch an attention layer, the per-head q/k norms and
# RoPE over the fused QKV. Those two architectures: :func:`_qwen3_architecture`.
QWEN3_STEM = "qwen3-"


def _qwen3_architecture(model: ModelSpec) -> bool:
    """Whether ``model`` is Qwen3 or Qwen3-MoE (``model_type`` ``qwen3`` / ``qwen3_moe``)
    by name: ``Qwen3-<size>``, not Qwen3.5 (``qwen3_5_moe``) nor a hybrid with GDN layers
    (Qwen3-Next, ``qwen3_next``: modules of its own)."""
    base = model.name.lower().rsplit("/", 1)[-1]
    return base.startswith(QWEN3_STEM) and not model.mixer_counts.get("gdn")


# DeepGEMM's M alignment and the experts' format its block-fp8 MoE kernels take, which
# the rules of vLLM 0.12.0 (``kernel_layouts_vllm``) and TensorRT-LLM 1.1
# (``kernel_layouts_trtllm``) read; the sources are cited there.
DEEPGEMM_M_ALIGNMENT = 128
DEEPGEMM_FORMAT = "fp8-block"  # block-quantised fp8 experts (``block_quant``)


def _block_fp8_experts(model: ModelSpec) -> bool:
    """Whether ``model`` has MoE layers whose experts are block-quantised fp8 (the format
    DeepGEMM's and FlashInfer's block-fp8 MoE kernels take)."""
    return bool(model.n_moe_layers) and px.moe_format(model).name == DEEPGEMM_FORMAT


__all__ = [
    "DEEPGEMM_FORMAT",
    "DEEPGEMM_M_ALIGNMENT",
    "QWEN3_STEM",
]
