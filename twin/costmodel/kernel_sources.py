"""Whose kernels a profile prices: the serving engines NVIDIA's tables cover.

``--engine NAME`` is looked up here and nowhere else. A shipped measured profile
is ``twin/calibration/profiles/<gpu>-<engine>.json``; issue #14's engine modes can map
a mode onto one of these names without touching the profiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.errors import TwinError


@dataclass(frozen=True)
class KernelSource:
    """One serving engine whose kernels a profile can be fitted to."""

    name: str  # the --engine value and the profile file suffix
    display: str  # as people write it
    attention: str  # its default attention backend, as the profiles record it
    # Its measured attention rows include the rotary embedding of Q and K, so a step
    # priced from them runs no RoPE pass of its own (``DensePricing._setup_rope``).
    # TensorRT-LLM's attention op applies RoPE in its QKV preprocessing kernel
    # (TensorRT-LLM 1.x ``_torch/modules/attention.py`` ``Attention.__init__``:
    # ``rope_fusion`` defaults to the backend's ``support_fused_rope()``, true for its
    # TRTLLM backend, and no ``RotaryEmbedding`` module is built), and aiconfigurator's
    # collector times that op with RoPE on (``collector/trtllm/collect_attn.py``:
    # ``create_attention(..., pos_embd_params=PositionalEmbeddingParams(rope_gpt_neox))``
    # over the unrotated QKV). vLLM and SGLang run RoPE as a kernel of its own before
    # their attention backend.
    rope_in_attention: bool = False


KERNEL_SOURCES: dict[str, KernelSource] = {
    s.name: s
    for s in (
        KernelSource("vllm", "vLLM", "FlashAttention 3 on Hopper, FlashInfer on Blackwell"),
        KernelSource("sglang", "SGLang", "fa3 on Hopper, FlashInfer elsewhere"),
        KernelSource(
            "trtllm",
            "TensorRT-LLM",
            "its attention op (RoPE and KV write fused)",
            rope_in_attention=True,
        ),
    )
}
DEFAULT_ENGINE = "vllm"  # the most deployed open engine; --engine picks another
DATASHEET = "datasheet"  # suffix of the shipped datasheet profiles: <gpu>-datasheet


def get_kernel_source(name: str) -> KernelSource:
    """The engine called ``name``; a ``TwinError`` listing the valid ones otherwise."""
    try:
        return KERNEL_SOURCES[name.lower()]
    except KeyError:
        raise TwinError(f"--engine {name!r}: expected one of {', '.join(KERNEL_SOURCES)}") from None


def profile_names(gpu: str, engine: str | None) -> tuple[str, ...]:
    """Shipped profile names ``--gpu gpu [--engine engine]`` may mean, best first."""
    name = gpu.lower()
    if engine is not None:
        return (f"{name}-{get_kernel_source(engine).name}",)
    return (name, f"{name}-{DEFAULT_ENGINE}", f"{name}-{DATASHEET}")


__all__ = [
    "DATASHEET",
    "DEFAULT_ENGINE",
    "KERNEL_SOURCES",
    "KernelSource",
    "get_kernel_source",
    "profile_names",
]
