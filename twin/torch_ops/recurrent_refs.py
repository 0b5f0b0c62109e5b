"""Exact PyTorch references of the issue-13 mixer kernels (CPU; any dtype).

- ``selective_scan``: Mamba-1's selective scan (Gu & Dao, arXiv 2312.00752, Alg. 2;
  the recurrence of mamba_ssm ``ops/selective_scan_interface.py::selective_scan_ref``),
  one token at a time in fp32 as the CUDA kernel keeps its state.
- ``gdn_recurrent`` and ``gdn_chunked``: the gated delta rule (Yang, Kautz, Hatamizadeh,
  arXiv 2412.06464, eq. 10: S_t = a_t S_{t-1} (I - b_t k_t k_t^T) + b_t v_t k_t^T,
  o_t = S_t q_t), token by token and in chunks of C with the WY form (sec. 3.3; the
  algorithm of flash-linear-attention's ``chunk_gated_delta_rule``). They agree to
  rounding; the chunked form is what the GPU kernels compute.
- ``sliding_window_attention``: causal attention where the query at absolute position
  p sees keys (p - W, p], queries at the end of the keys (bottom-right aligned).

States are what a cache checkpoint holds: Mamba-1 (d_inner, N) per sequence; GDN
(heads, d_k, d_v) per sequence.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor,
    initial: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """u, delta (l, d) (delta after softplus); A (d, n); B, C (l, n); D (d).

    Returns y (l, d) in u's dtype and the final state (d, n) in fp32 (or float64 input).
    """
    work = torch.float64 if u.dtype == torch.float64 else torch.float32
    d, n = A.shape
    state = initial.to(work) if initial is not None else u.new_zeros((d, n), dtype=work)
    u_, dt, A_ = u.to(work), delta.to(work), A.to(work)
    B_, C_ = B.to(work), C.to(work)
    ys = []
    for t in range(u.shape[0]):
        dA = torch.exp(dt[t][:, None] * A_)  # (d, n)
        state = dA * state + (dt[t] * u_[t])[:, None] * B_[t][None, :]
        ys.append(state @ C_[t])
    y = torch.stack(ys) + u_ * D.to(work)
    return y.to(u.dtype), state


def gdn_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    initial: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k (l, h, dk); v (l, h, dv); g (l, h) log-decay; beta (l, h).

    The state S (h, dk, dv) maps keys to values: o_t = q_t S_t. Returns o (l, h, dv)
    and the final state.
    """
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    h, dk, dv = q.shape[1], q.shape[2], v.shape[2]
    S = initial.to(work) if initial is not None else q.new_zeros((h, dk, dv), dtype=work)
    q_, k_, v_, g_, b_ = (x.to(work) for x in (q, k, v, g, beta))
    out = []
    for t in range(q.shape[0]):
        S = S * torch.exp(g_[t])[:, None, None]
        pred = torch.einsum("hk,hkv->hv", k_[t], S)  # what S recalls for k_t
        delta = b_[t][:, None] * (v_[t] - pred)
        S = S + k_[t][:, :, None] * delta[:, None, :]
        out.append(torch.einsum("hk,hkv->hv", q_[t], S))
    return torch.stack(out).to(q.dtype), S


def gdn_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    chunk: int,
    initial: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``gdn_recurrent`` computed chunk by chunk (the WY representation).

    Within a chunk, with cumulative log-decays G_i, the pseudo-values
    U = T (beta V - beta K S_0 decayed) solve (I + A) U = ... where A is strictly
    lower triangular: A_ij = beta_i exp(G_i - G_j) k_i.k_j for j < i. Outputs are the
    carried state's readout plus the intra-chunk attention over U; the state moves on
    by the chunk's decay and K^T U.
    """
    work = torch.float64 if q.dtype == torch.float64 else torch.float32
    length, h, dk = q.shape
    dv = v.shape[2]
    S = initial.to(work) if initial is not None else q.new_zeros((h, dk, dv), dtype=work)
    q_, k_, v_, g_, b_ = (x.to(work) for x in (q, k, v, g, beta))
    outs = []
    for a in range(0, length, chunk):
        e = min(a + chunk, length)
        qc, kc, vc = q_[a:e].transpose(0, 1), k_[a:e].transpose(0, 1), v_[a:e].transpose(0, 1)
        G = torch.cumsum(g_[a:e].transpose(0, 1), dim=-1)  # (h, c)
        bc = b_[a:e].transpose(0, 1)  # (h, c)
        c = e - a
        decay = torch.exp(G[:, :, None] - G[:, None, :])  # (h, i, j): exp(G_i - G_j)
        strict = torch.ones(c, c, dtype=torch.bool).tril(-1)
        kk = torch.einsum("hik,hjk->hij", kc, kc)
        A = torch.where(strict, bc[:, :, None] * decay * kk, torch.zeros((), dtype=work))
        # Right-hand side: beta_i (v_i - exp(G_i) k_i S_0).
        rhs = bc[:, :, None] * (vc - torch.exp(G)[:, :, None] * torch.einsum("hik,hkv->hiv", kc, S))
        eye = torch.eye(c, dtype=work).expand(h, c, c)
        U = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
        causal = torch.ones(c, c, dtype=torch.bool).tril()
        qk = torch.where(causal, decay * torch.einsum("hik,hjk->hij", qc, kc), 0.0)
        o = torch.exp(G)[:, :, None] * torch.einsum("hik,hkv->hiv", qc, S)
        o = o + torch.einsum("hij,hjv->hiv", qk, U)
        outs.append(o.transpose(0, 1))
        tail = torch.exp(G[:, -1:] - G)  # exp(G_last - G_j)
        S = torch.exp(G[:, -1])[:, None, None] * S + torch.einsum(
            "hjk,hjv->hkv", kc * tail[:, :, None], U
        )
    return torch.cat(outs).to(q.dtype), S


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int
) -> torch.Tensor:
    """q (1, h, n, d) over k, v (1, h, t, d), t >= n, queries at the end; each query sees
    the ``window`` keys ending at its own position."""
    n, t = q.shape[2], k.shape[2]
    qpos = torch.arange(t - n, t)[:, None]
    kpos = torch.arange(t)[None, :]
    mask = (kpos <= qpos) & (kpos > qpos - window)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
