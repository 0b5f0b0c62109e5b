"""The reference model's Mamba-1 and Gated DeltaNet layers (issue 13), with real states.

Each layer returns ``(output, state at the end, states at each cut)`` like the Mamba2
layer of :mod:`twin.reference.model`; a state is ``(recurrent state, conv state)``, the
conv state being the last ``kernel - 1`` inputs of the causal conv (what a checkpoint
holds). The recurrences are the exact references of :mod:`twin.torch_ops.recurrent_refs`:

- Mamba-1 (mamba_ssm ``modules/mamba_simple.py``): in_proj -> (x, z), causal conv +
  SiLU, x_proj -> (dt, B, C), dt_proj + softplus, selective scan with the D skip,
  y * silu(z), out_proj. Init as Mamba's: A = -(1..N) per channel (S4D-real), dt in
  [1e-3, 0.1].
- Gated DeltaNet (transformers ``Qwen3NextGatedDeltaNet``): in_proj -> (q, k, v, z,
  beta, a), causal conv + SiLU over q, k, v, L2-normalised q and k shared GQA-style by
  the value heads, q scaled by d_k^-1/2, beta = sigmoid, log-decay
  g = -exp(A_log) softplus(a + dt_bias), the chunked delta rule, per-head gated
  RMSNorm, out_proj.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from twin.mixers import mamba1_dt_rank
from twin.torch_ops.recurrent_refs import gdn_chunked, selective_scan

if TYPE_CHECKING:
    from twin.reference.model import HybridLM, SsmState

EPS = 1e-6
Weights = dict[str, torch.Tensor]


def mamba1_weights(lm: HybridLM, depth_scale: float) -> Weights:
    m, dev = lm.spec, lm.device
    di, n, r, k = m.d_inner, m.ssm_d_state, mamba1_dt_rank(m), m.ssm_conv_kernel
    dt = torch.exp(lm._uniform(di, math.log(1e-3), math.log(0.1)))
    a = torch.arange(1, n + 1, device=dev, dtype=torch.float32).repeat(di, 1)
    return {
        "in_proj": lm._linear(2 * di, m.d_model),
        "conv_w": lm._randn(di, k) / math.sqrt(k),
        "conv_b": lm._randn(di) * 0.1,
        "x_proj": lm._linear(r + 2 * n, di),
        "dt_proj": lm._linear(di, r),
        "dt_bias": dt + torch.log(-torch.expm1(-dt)),  # inverse softplus
        "A_log": torch.log(a),
        "D": torch.ones(di, device=dev, dtype=torch.float32),
        "out_proj": lm._linear(m.d_model, di) * depth_scale,
    }


def gdn_weights(lm: HybridLM, depth_scale: float) -> Weights:
    m, dev = lm.spec, lm.device
    kw, vw, hv = m.gdn_k_heads * m.gdn_head_k_dim, m.gdn_v_heads * m.gdn_head_v_dim, m.gdn_v_heads
    conv_c, k = 2 * kw + vw, m.gdn_conv_kernel
    dt = torch.exp(lm._uniform(hv, math.log(1e-3), math.log(0.1)))
    return {
        "in_proj": lm._linear(2 * kw + 2 * vw + 2 * hv, m.d_model),
        "conv_w": lm._randn(conv_c, k) / math.sqrt(k),
        "conv_b": torch.zeros(conv_c, device=dev, dtype=lm.dtype),  # no conv bias
        "A_log": torch.log(lm._uniform(hv, 1.0, 16.0)),
        "dt_bias": dt + torch.log(-torch.expm1(-dt)),
        "gate_norm": torch.ones(m.gdn_head_v_dim, device=dev, dtype=lm.dtype),
        "out_proj": lm._linear(m.d_model, vw) * depth_scale,
    }


def _conv(
    lm: HybridLM, x: torch.Tensor, w: Weights, prev: SsmState | None, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """SiLU(causal conv) of x (1, n, c) continuing from the conv state; also the padded input."""
    xt = x.transpose(1, 2)
    conv_prev = prev[1] if prev is not None else xt.new_zeros((1, xt.shape[1], k - 1))
    xpad = torch.cat((conv_prev, xt), dim=2)
    return F.silu(lm.ops.conv(xpad, w["conv_w"], w["conv_b"])).transpose(1, 2), xpad


def mamba1_forward(
    lm: HybridLM, h: torch.Tensor, w: Weights, prev: SsmState | None, cuts: list[int]
) -> tuple[torch.Tensor, SsmState, list[SsmState]]:
    m = lm.spec
    n, di, big_n, k = h.shape[1], m.d_inner, m.ssm_d_state, m.ssm_conv_kernel
    x, z = F.linear(h, w["in_proj"]).split((di, di), dim=-1)
    x, xpad = _conv(lm, x, w, prev, k)
    dt_r, B, C = F.linear(x, w["x_proj"]).split((mamba1_dt_rank(m), big_n, big_n), dim=-1)
    work = torch.float64 if lm.dtype == torch.float64 else torch.float32
    delta = F.softplus(F.linear(dt_r, w["dt_proj"]).to(work) + w["dt_bias"])
    A = -torch.exp(w["A_log"])
    state = prev[0] if prev is not None else None
    ys, at = [], []
    for a, b in itertools.pairwise([0, *cuts, n]):
        y, state = selective_scan(x[0, a:b], delta[0, a:b], A, B[0, a:b], C[0, a:b], w["D"], state)
        ys.append(y)
        if b < n:
            at.append((state.clone(), xpad[..., b : b + k - 1].clone()))
    y = torch.cat(ys)[None] * F.silu(z)
    assert state is not None
    return F.linear(y, w["out_proj"]), (state, xpad[..., n:].contiguous()), at


def gdn_forward(
    lm: HybridLM, h: torch.Tensor, w: Weights, prev: SsmState | None, cuts: list[int]
) -> tuple[torch.Tensor, SsmState, list[SsmState]]:
    m = lm.spec
    n, hk, hv, dk, dv = h.shape[1], m.gdn_k_heads, m.gdn_v_heads, m.gdn_head_k_dim, m.gdn_head_v_dim
    kw, vw = hk * dk, hv * dv
    qkv, z, b, a = F.linear(h, w["in_proj"]).split((2 * kw + vw, vw, hv, hv), dim=-1)
    qkv, xpad = _conv(lm, qkv, w, prev, m.gdn_conv_kernel)
    q, k, v = qkv[0].split((kw, kw, vw), dim=-1)
    rep = hv // hk  # each key head serves consecutive value heads
    q = F.normalize(q.view(n, hk, dk), dim=-1).repeat_interleave(rep, dim=1) / math.sqrt(dk)
    k = F.normalize(k.view(n, hk, dk), dim=-1).repeat_interleave(rep, dim=1)
    v = v.view(n, hv, dv)
    work = torch.float64 if lm.dtype == torch.float64 else torch.float32
    beta = torch.sigmoid(b[0].to(work))
    g = -torch.exp(w["A_log"]) * F.softplus(a[0].to(work) + w["dt_bias"])
    state = prev[0] if prev is not None else None
    outs, at = [], []
    taps = m.gdn_conv_kernel
    for s, e in itertools.pairwise([0, *cuts, n]):
        o, state = gdn_chunked(q[s:e], k[s:e], v[s:e], g[s:e], beta[s:e], m.gdn_chunk_size, state)
        outs.append(o)
        if e < n:
            at.append((state.clone(), xpad[..., e : e + taps - 1].clone()))
    o = F.rms_norm(torch.cat(outs), (dv,), w["gate_norm"], EPS)
    o = (o * F.silu(z[0].view(n, hv, dv))).reshape(1, n, vw)
    assert state is not None
    return F.linear(o, w["out_proj"]), (state, xpad[..., n:].contiguous()), at
