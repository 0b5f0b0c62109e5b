"""How an engine release lays out a model's kernels, where that differs from the twin's
default pricing: a fact about the engine's modules, not about the model, so it is an
input of the cost model of its own (``CostModel(..., layout=...)``), next to the model.

The engine mode's rule chooses it from the model, the engine build and the parallel
layout (``twin.engine.mode_base.EngineMode.kernel_layout``: SGLang's
``twin.engine.modes_sglang.sglang_kernel_layout``, TensorRT-LLM's
``twin.engine.modes_trtllm.trtllm_kernel_layout``), for ``twin simulate --engine`` and the
silicon scorer alike; the default (:data:`DEFAULT_LAYOUT`) is what every other engine
and the paper's world run.
"""

from __future__ import annotations

from dataclasses import dataclass

from twin.errors import TwinError


@dataclass(frozen=True)
class KernelLayout:
    """An engine build's kernel layout (module docstring); each field's pricing is in
    ``twin.costmodel.dense_pricing.DensePricing`` unless its comment names another."""

    # GEMM launches a GDN layer's input projection runs as (how the engine lays out the
    # checkpoint's matrices, ``DensePricing._gdn_in_proj``): 1, one GEMM of the whole
    # width; 4, Qwen3.5's q/k/v, z, b and a matrices apart. A model without GDN layers
    # prices none either way.
    gdn_in_proj_gemms: int = 1
    # The engine runs each layer's residual add and RMSNorm inside the tensor-parallel
    # all-reduce before it (TensorRT-LLM's Llama-3.1-70B and gpt-oss under TP), and, with
    # ``allreduce_quantises_input``, writes the next GEMM's input in the linear layers'
    # nvfp4 format there too (its Llama): ``DensePricing._norm_in_allreduce``.
    norm_in_allreduce: bool = False
    allreduce_quantises_input: bool = False
    # Per-head q/k RMSNorms run as a pass of their own over q and k before attention,
    # RoPE inside it (TensorRT-LLM's Qwen3 ``fused_qk_norm_rope``): one element-wise pass
    # an attention layer (``DensePricing._qk_norm``).
    qk_norm_rope_pass: bool = False
    # A DeepSeek-sparse-attention model's prefill (``ModelSpec.index_topk``) leaves the
    # dense (decompressed) MLA form for the absorbed sparse kernel, its query heads padded,
    # in a batch whose longest sequence exceeds the top-k (SGLang's NSA backend:
    # ``MlaPricing._mla_sparse_prefill``).
    nsa_sparse_prefill: bool = False
    # The experts run as DeepGEMM's contiguous grouped GEMM at every step size, each
    # expert a launch reaches padded to this many rows (its M alignment); 0: the fused-MoE
    # fit's rows as routed (vLLM 0.12.0's block-fp8 experts on a GPU DeepGEMM supports,
    # ``twin.engine.kernel_layouts.vllm_kernel_layout``: ``DensePricing._moe_padded_rows``).
    moe_rows_per_expert: int = 0
    # Under attention DP the MoE layers bring the ranks' tokens together by an all-gather
    # (in the experts' activation format where the engine quantises before it) and return
    # them by a reduce-scatter, and the dense MLP layers run on each rank's own tokens with
    # no exchange (TensorRT-LLM without its all-to-all): priced by
    # ``twin.costmodel.gather_scatter.GatherScatterPrice`` in
    # ``twin.engine.dp_attention.DPStepPricer.comm_time``; False: SGLang's gather/scatter.
    moe_gather_scatter: bool = False

    def __post_init__(self) -> None:
        if self.moe_rows_per_expert < 0:
            raise TwinError(
                "kernel layout: moe_rows_per_expert must be >= 0 "
                f"(got {self.moe_rows_per_expert!r})"
            )
        if self.gdn_in_proj_gemms not in (1, 4):
            raise TwinError(
                f"kernel layout: gdn_in_proj_gemms must be 1 or 4 (got {self.gdn_in_proj_gemms!r})"
            )


DEFAULT_LAYOUT = KernelLayout()

__all__ = ["DEFAULT_LAYOUT", "KernelLayout"]
