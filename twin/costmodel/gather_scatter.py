"""The MoE layers' exchange under attention DP as an all-gather and a reduce-scatter
(``twin.costmodel.kernel_layout.KernelLayout.moe_gather_scatter``): TensorRT-LLM's.

With ``enable_attention_dp`` each rank holds its own requests' tokens; TensorRT-LLM's
fused-MoE modules bring every rank's tokens to every expert rank before the experts and
return each rank its own rows after (``tensorrt_llm/_torch/modules/fused_moe/
fused_moe_cutlass.py``, ``CutlassFusedMoE.forward_chunk``, the module ``DeepGemmFusedMoE``
and ``TRTLLMGenFusedMoE`` share it, read in NVIDIA/TensorRT-LLM's stored 1.0-1.2 trees):
``allgather([x, x_sf, token_selected_slots, token_final_scales], mapping, dim=0,
sizes=all_rank_num_tokens)``, the fused MoE over the gathered rows with the rank's own
experts, then ``reducescatter(final_hidden_states, ..., sizes=all_rank_num_tokens)``:

- the all-gather carries each token's hidden state in the format ``quantize_input``
  leaves it (``post_quant_comm``: NVFP4's ``fp4_quantize`` values and block scales, fp8's
  per-tensor ``static_quantize_e4m3_per_tensor``; the fp8 block-scale and weight-only
  formats quantise inside the kernel and gather the model's dtype) and its top-k expert
  ids (int32) and weights (fp32);
- the reduce-scatter sums the ranks' partial outputs at the model's dtype.

This is what runs unless the module selects an all-to-all (``select_alltoall_method_type``):
releases to 1.1 required ``moe_ep_size > top_k`` (and an NVLink-connected node), which no
DeepSeek (top 8) or gpt-oss (top 4) layout on one 8-GPU node meets; from NVIDIA/TensorRT-LLM
PR #8950 (merged 2025-11-12, "Adjust select_alltoall_method_type") ``CutlassFusedMoE`` and
``TRTLLMGenFusedMoE`` choose the one-sided NVLink all-to-all (``NVLinkOneSided``) whenever
``moe_tp_size`` is 1 and ``MnnvlMemory.supports_mnnvl()`` says every NVLink is up, and
``DeepGemmFusedMoE`` never does. That kernel has no table in aiconfigurator-core 0.12.0
(its TensorRT-LLM ``moe_a2a_perf`` tables time the DeepEP path, ``trtllm_deepep_*``, which
TensorRT-LLM runs only with ``TRTLLM_CAN_USE_DEEP_EP``), so no fitted family prices it:
those runs are priced here too, the exchange their module runs without it (docs/decisions.md,
issue 34: TensorRT-LLM's exchange under attention DP).

The dense MLP layers run on each rank's own tokens with full weights
(``modeling_deepseekv3.py`` ``_compute_mlp_tp_size``: "If using attention DP, the MLP also
uses DP instead of TP", ``mlp_tp_size = 1``): no exchange.
"""

from __future__ import annotations

from typing import Any

from twin.model import ModelSpec
from twin.precision import moe_format

# Expert formats TensorRT-LLM's ``quantize_input`` quantises before the all-gather
# (``post_quant_comm``); the others gather the model's dtype.
QUANTISED_BEFORE_GATHER = frozenset({"nvfp4", "fp8"})
# Bytes a top-k slot adds to a gathered token: its expert id (int32) and weight (fp32).
ROUTE_SLOT_BYTES = 8


def gathered_bytes_per_token(model: ModelSpec) -> float:
    """Bytes one token adds to the all-gather before ``model``'s experts."""
    fmt = moe_format(model)
    wire = float(model.dtype_bytes)
    if fmt.name in QUANTISED_BEFORE_GATHER and fmt.act_bytes is not None:
        wire = float(fmt.act_bytes)
    return model.d_model * wire + model.moe_top_k * ROUTE_SLOT_BYTES


class GatherScatterPrice:
    """Seconds of one MoE layer's all-gather and reduce-scatter of all the ranks' tokens,
    on ``ffn`` (a ``twin.costmodel.CostModel`` at the replica's ``tp``: its ``gather_time``
    and ``scatter_time``)."""

    def __init__(self, model: ModelSpec, ffn: Any) -> None:
        self.gather_bytes = gathered_bytes_per_token(model)
        self.scatter_bytes = float(model.d_model * model.dtype_bytes)
        self._gather, self._scatter = ffn.gather_time, ffn.scatter_time

    def seconds(self, tokens: int) -> float:
        """One MoE layer's exchange of ``tokens`` tokens, all the ranks' together."""
        if tokens <= 0:
            return 0.0
        return float(
            self._gather(tokens * self.gather_bytes) + self._scatter(tokens * self.scatter_bytes)
        )


__all__ = [
    "QUANTISED_BEFORE_GATHER",
    "ROUTE_SLOT_BYTES",
    "GatherScatterPrice",
    "gathered_bytes_per_token",
]
