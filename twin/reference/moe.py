"""The reference model's mixture-of-experts FFN (issue 13): routed experts plus a shared one.

One routing rule, Qwen3-Next's (transformers ``models/qwen3_next/modeling_qwen3_next.py``,
``Qwen3NextSparseMoeBlock``, with its config's ``norm_topk_prob: true``; Qwen3.5-MoE keeps
it): the router's logits over every expert go through a softmax (fp32), each token keeps
its ``moe_top_k`` largest probabilities, renormalised to sum to 1, and adds those experts'
outputs weighted by them. Renormalised top-k of a softmax equals a softmax over the top-k
logits, which is how Mixtral (``MixtralSparseMoeBlock``), gpt-oss (``GptOssTopKRouter``)
and Granite-MoE route, so the one rule covers every MoE preset. Each expert is a dense
MLP of width ``moe_d_ff`` (gated when ``mlp_gated``), run only on the tokens routed to it.
When ``moe_shared_d_ff > 0`` every token also goes through a shared expert of that width,
scaled by ``sigmoid(shared_expert_gate(x))`` (Qwen3-Next's ``shared_expert_gate``).

Routing is per token, so a prefill resumed from cached states routes each new token as a
full prefill does: prefix reuse stays exact.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from twin.reference.model import HybridLM

Weights = dict[str, torch.Tensor]
Mlp = Callable[[torch.Tensor, Weights], torch.Tensor]


def moe_weights(lm: HybridLM, depth_scale: float) -> Weights:
    """Router, stacked expert weights and (when the spec has one) the gated shared expert."""
    m, d = lm.spec, lm.spec.d_model
    mats = 2 if m.mlp_gated else 1
    experts = range(m.moe_n_experts)
    w = {
        "router": lm._linear(m.moe_n_experts, d),
        "up": torch.stack([lm._linear(mats * m.moe_d_ff, d) for _ in experts]),
        "down": torch.stack([lm._linear(d, m.moe_d_ff) * depth_scale for _ in experts]),
    }
    if m.moe_shared_d_ff:
        w["shared_up"] = lm._linear(mats * m.moe_shared_d_ff, d)
        w["shared_down"] = lm._linear(d, m.moe_shared_d_ff) * depth_scale
        w["shared_gate"] = lm._linear(1, d)
    return w


def route(h: torch.Tensor, router: torch.Tensor, top_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights, experts)``, each (tokens, top_k): the renormalised top-k of the softmax
    (in fp32 as Qwen3-Next's, or fp64 when the model runs in fp64)."""
    work = torch.float64 if h.dtype == torch.float64 else torch.float32
    probs = F.softmax(F.linear(h, router).to(work), dim=-1)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    return weights / weights.sum(dim=-1, keepdim=True), experts


def moe_forward(h: torch.Tensor, w: Weights, top_k: int, mlp: Mlp) -> torch.Tensor:
    """The MoE FFN of h (1, n, d): each token through its top-k experts (+ the shared one)."""
    x = h[0]
    weights, experts = route(x, w["router"], top_k)
    out = torch.zeros_like(x)
    for e in torch.unique(experts).tolist():  # only the experts some token chose run
        rows, slot = torch.nonzero(experts == e, as_tuple=True)
        y = mlp(x[rows], {"up": w["up"][e], "down": w["down"][e]})
        out.index_add_(0, rows, y * weights[rows, slot, None].to(y.dtype))
    if "shared_up" in w:
        shared = mlp(x, {"up": w["shared_up"], "down": w["shared_down"]})
        out = out + torch.sigmoid(F.linear(x, w["shared_gate"])) * shared
    return out[None]
