"""Exact PyTorch Mamba2 SSD scan: the chunked algorithm, and the sequential recurrence it equals.

The recurrence of one head (state ``h`` of shape headdim x d_state)::

    h_t = exp(dt_t * A) * h_{t-1} + dt_t * x_t (outer) B_t
    y_t = h_t . C_t + D * x_t

``ssd_chunked`` computes the same thing the way ``mamba_ssm``'s
``mamba_chunk_scan_combined`` does (Dao & Gu 2024, arXiv 2405.21060, sec. 6):
within each chunk of Q tokens a masked quadratic (attention-like) product, a
state per chunk, then the states passed sequentially from chunk to chunk. The
passing is a loop over chunks, as in the Triton kernel, so cost stays linear
in the sequence. It is the scan the harness times wherever the Triton kernel
cannot be imported (CPU, or a GPU without ``mamba_ssm``).

Shapes follow ``mamba_chunk_scan_combined``: x (b, l, h, p), dt (b, l, h),
A (h,), B and C (b, l, g, n) with g dividing h, D (h,), dt_bias (h,),
initial_states (b, h, p, n). This module needs torch; import it lazily.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _f(t: torch.Tensor) -> torch.Tensor:
    """Compute in float32, or float64 when given float64 (the exactness tests)."""
    return t if t.dtype == torch.float64 else t.float()


def _prepare_dt(dt: torch.Tensor, dt_bias: torch.Tensor | None, dt_softplus: bool) -> torch.Tensor:
    dt = _f(dt)
    if dt_bias is not None:
        dt = dt + _f(dt_bias)
    return F.softplus(dt) if dt_softplus else dt


def _heads(t: torch.Tensor, nheads: int) -> torch.Tensor:
    """Broadcast (b, l, g, n) group tensors to (b, l, h, n): heads h*g/ngroups share a group."""
    return t.repeat_interleave(nheads // t.shape[2], dim=2)


def _output(y: torch.Tensor, x: torch.Tensor, D: torch.Tensor | None) -> torch.Tensor:
    """The scan's output ``y`` plus the skip term ``D x`` (per head, where ``D`` is given),
    in ``x``'s dtype."""
    if D is not None:
        y = y + _f(x) * _f(D)[:, None]
    return y.to(x.dtype)


def _group_chunks(t: torch.Tensor, nc: int, q: int) -> torch.Tensor:
    """(b, l, g, n) -> (b, chunks, q, g, n)."""
    return t.reshape(t.shape[0], nc, q, t.shape[2], t.shape[3])


def ssd_sequential(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The naive token-by-token recurrence, :func:`ssd_step` a token: (y, final_state).
    The ground truth."""
    b, _, h, p = x.shape
    state = (
        _f(initial_states).clone()
        if initial_states is not None
        else _f(x).new_zeros((b, h, p, B.shape[-1]))
    )
    dt = _prepare_dt(dt, dt_bias, dt_softplus)  # once: softplus of a slice may round apart
    ys = [ssd_step(state, x[:, t], dt[:, t], A, B[:, t], C[:, t], D) for t in range(x.shape[1])]
    return torch.stack(ys, dim=1), state


def ssd_chunked(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunked SSD scan: (y, final_state), equal to ``ssd_sequential``."""
    b, length, h, p = x.shape
    n = B.shape[-1]
    q = chunk_size
    dt = _prepare_dt(dt, dt_bias, dt_softplus)
    pad = (-length) % q
    xf, Bp, Cp = _f(x), _f(B), _f(C)
    if pad:  # dt = 0 on padding: no decay and no input, so the state passes unchanged
        xf = F.pad(xf, (0, 0, 0, 0, 0, pad))
        dt = F.pad(dt, (0, 0, 0, pad))
        Bp = F.pad(Bp, (0, 0, 0, 0, 0, pad))
        Cp = F.pad(Cp, (0, 0, 0, 0, 0, pad))
    Bh, Ch = _heads(Bp, h), _heads(Cp, h)
    nc = (length + pad) // q
    xs = (xf * dt[..., None]).reshape(b, nc, q, h, p)  # discretised input dt * x
    Bc = Bh.reshape(b, nc, q, h, n)
    Cc = Ch.reshape(b, nc, q, h, n)
    da = (dt * _f(A)).reshape(b, nc, q, h).permute(0, 3, 1, 2)  # (b, h, c, q)
    cum = torch.cumsum(da, dim=-1)

    # Within a chunk: y_i = sum_{j <= i} C_i.B_j exp(cum_i - cum_j) dt_j x_j. C.B^T is
    # computed once per group (as the Triton kernel does) and shared by its heads.
    g = B.shape[2]
    seg = cum[..., :, None] - cum[..., None, :]  # (b, h, c, i, j)
    causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
    decay = torch.exp(seg.masked_fill(~causal, float("-inf")))
    cb = torch.einsum("bcign,bcjgn->bgcij", _group_chunks(Cp, nc, q), _group_chunks(Bp, nc, q))
    scores = (decay.reshape(b, g, h // g, nc, q, q) * cb[:, :, None]).reshape(b, h, nc, q, q)
    y = torch.einsum("bhcij,bcjhp->bcihp", scores, xs)

    # Each chunk's own contribution to the state at its end.
    to_end = torch.exp(cum[..., -1:] - cum)  # (b, h, c, q)
    chunk_states = torch.einsum("bcjhn,bhcj,bcjhp->bchpn", Bc, to_end, xs)

    # Pass states from chunk to chunk (sequential, linear in the number of chunks).
    state = _f(initial_states) if initial_states is not None else xf.new_zeros((b, h, p, n))
    chunk_decay = torch.exp(cum[..., -1])  # (b, h, c)
    entering = []
    for c in range(nc):
        entering.append(state)
        state = chunk_decay[:, :, c, None, None] * state + chunk_states[:, c]
    prev = torch.stack(entering, dim=1)  # state entering each chunk: (b, c, h, p, n)

    # The entering state's contribution, decayed to each position in the chunk.
    y = y + torch.einsum("bcihn,bchpn,bhci->bcihp", Cc, prev, torch.exp(cum))
    y = y.reshape(b, nc * q, h, p)[:, :length]
    return _output(y, x, D), state


def ssd_step(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    dt_bias: torch.Tensor | None = None,
    dt_softplus: bool = False,
) -> torch.Tensor:
    """One decode token: update ``state`` (b, h, p, n) in place and return y (b, h, p).

    x (b, h, p), dt (b, h), B and C (b, g, n): one step of ``ssd_sequential``.
    """
    h = x.shape[1]
    dtp = _prepare_dt(dt, dt_bias, dt_softplus)
    Bh = _f(B.repeat_interleave(h // B.shape[1], dim=1))
    Ch = _f(C.repeat_interleave(h // C.shape[1], dim=1))
    decay = torch.exp(dtp * _f(A))[:, :, None, None]
    inp = (dtp[..., None] * _f(x))[..., None] * Bh[:, :, None, :]
    state.mul_(decay.to(state.dtype)).add_(inp.to(state.dtype))
    y = torch.einsum("bhpn,bhn->bhp", _f(state), Ch)
    return _output(y, x, D)
