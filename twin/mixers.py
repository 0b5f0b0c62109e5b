"""Sequence-mixer kinds: what one layer of each kind holds, weighs and computes.

A layer's mixer is one of (or, for parallel hybrids such as Falcon-H1, several of):

- ``attention``: full causal self-attention, GQA, optional output gate (Qwen3-Next's
  gated attention doubles the query projection: query + gate).
- ``swa``: the same attention limited to the last ``sliding_window`` keys.
- ``mamba1``: the selective scan of Gu & Dao (arXiv 2312.00752, Alg. 2; mamba_ssm
  ``modules/mamba_simple.py``): in_proj d -> 2 d_inner, depthwise conv, x_proj
  d_inner -> dt_rank + 2N, dt_proj dt_rank -> d_inner, a diagonal state of
  d_inner x N, out_proj. Its scan runs on CUDA cores in fp32 (selective_scan_cuda).
- ``mamba2``: the SSD layer of Dao & Gu (arXiv 2405.21060; mamba_ssm
  ``modules/mamba2.py``), the formulas ``ModelSpec`` always had.
- ``gdn``: Gated DeltaNet (Yang, Kautz, Hatamizadeh, ICLR 2025, arXiv 2412.06464;
  transformers ``Qwen3NextGatedDeltaNet``): in_proj to q, k (``gdn_k_heads`` x
  ``gdn_head_k_dim``), v, z (``gdn_v_heads`` x ``gdn_head_v_dim``) and the beta/decay
  gates (one each per value head), a depthwise conv over q, k, v, the chunked
  delta rule with a state of head_k_dim x head_v_dim per value head (q and k are
  shared GQA-style across value heads), gated RMSNorm, out_proj.

Every function takes the ``ModelSpec`` and returns a Python int, per layer, so
FLOPs over many layers stay exact (see ``twin.model``). FLOPs count 2 per
multiply-add and are linear in the new tokens except attention's key sum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from twin.model import ModelSpec

MIXER_KINDS = ("attention", "swa", "mamba1", "mamba2", "gdn")
KV_KINDS = frozenset({"attention", "swa"})  # hold per-token KV
RECURRENT_KINDS = frozenset({"mamba1", "mamba2", "gdn"})  # hold one state per sequence
FFN_KINDS = ("mlp", "moe", "none")
SHORT = {"attention": "attn", "swa": "swa", "mamba1": "mamba1", "mamba2": "mamba2", "gdn": "gdn"}


def keys_upto(m: int, window: int | None) -> int:
    """Sum of min(k, window) for k = 1..m: keys attended by the first m causal tokens."""
    if window is None or m <= window:
        return m * (m + 1) // 2
    return window * (window + 1) // 2 + (m - window) * window


def window_of(m: ModelSpec, kind: str) -> int | None:
    """The attention window of ``kind`` (None: full causal)."""
    return m.sliding_window if kind == "swa" else None


# ------------------------------------------------------------------ widths
def q_proj_width(m: ModelSpec) -> int:
    """Query projection outputs; a gated attention also projects its output gate."""
    return m.n_heads * m.head_dim * (2 if m.attn_output_gate else 1)


def mamba1_dt_rank(m: ModelSpec) -> int:
    """Mamba-1 dt rank; 0 means mamba_ssm's default ceil(d_model / 16)."""
    return m.ssm_dt_rank or -(-m.d_model // 16)


def gdn_key_width(m: ModelSpec) -> int:
    """q (and k) width of a GDN layer: key heads x key head dim."""
    return m.gdn_k_heads * m.gdn_head_k_dim


def gdn_value_width(m: ModelSpec) -> int:
    """v (and z, and the output) width of a GDN layer: value heads x value head dim."""
    return m.gdn_v_heads * m.gdn_head_v_dim


def gdn_conv_channels(m: ModelSpec) -> int:
    """Channels of the GDN causal conv: q, k and v."""
    return 2 * gdn_key_width(m) + gdn_value_width(m)


# ------------------------------------------------------------------ bytes
def kv_bytes_per_token(m: ModelSpec, kind: str) -> int:
    """K and V of one token in one layer of ``kind`` (0 for recurrent kinds)."""
    if kind in KV_KINDS:
        return 2 * m.n_kv_heads * m.head_dim * kv_elem_bytes(m)
    return 0


def kv_elem_bytes(m: ModelSpec) -> int:
    """Bytes of one K or V element: ``dtype_bytes``, or 1 in an fp8 cache (``twin.precision``)."""
    from twin.precision import kv_elem_bytes as of

    return of(m)


def state_bytes(m: ModelSpec, kind: str) -> int:
    """Recurrent state plus conv state of one layer of ``kind`` (0 for attention kinds).

    Conv states keep the full kernel width per channel, as mamba_ssm's and
    transformers' inference caches do.
    """
    if kind == "mamba2":
        ssm = m.state_channels * m.ssm_d_state * m.state_dtype_bytes
        return ssm + m.conv_channels * m.ssm_conv_kernel * m.dtype_bytes
    if kind == "mamba1":
        ssm = m.d_inner * m.ssm_d_state * m.state_dtype_bytes
        return ssm + m.d_inner * m.ssm_conv_kernel * m.dtype_bytes
    if kind == "gdn":
        ssm = m.gdn_v_heads * m.gdn_head_k_dim * m.gdn_head_v_dim * m.state_dtype_bytes
        return ssm + gdn_conv_channels(m) * m.gdn_conv_kernel * m.dtype_bytes
    return 0


# ------------------------------------------------------------------ parameters
def params(m: ModelSpec, kind: str) -> int:
    """Parameters of one mixer of ``kind``, its pre-norm included."""
    d = m.d_model
    if kind in KV_KINDS:
        q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
        return d * (q_proj_width(m) + 2 * kv) + q * d + d  # QKV (GQA), O, pre-norm
    if kind == "mamba2":
        h, n_g = m.n_ssm_heads, m.ssm_groups * m.ssm_d_state
        return (
            d * (2 * m.d_inner + 2 * n_g + h)  # in_proj -> z, x, B, C, dt
            + m.conv_channels * (m.ssm_conv_kernel + 1)  # conv weight + bias
            + 3 * h  # A_log, D, dt_bias
            + m.d_inner  # gated RMSNorm before out_proj
            + m.d_inner * d  # out_proj
            + d  # pre-norm
        )
    if kind == "mamba1":
        di, r, n = m.d_inner, mamba1_dt_rank(m), m.ssm_d_state
        return (
            d * 2 * di  # in_proj -> x, z
            + di * (m.ssm_conv_kernel + 1)  # conv weight + bias
            + di * (r + 2 * n)  # x_proj -> dt, B, C
            + r * di
            + di  # dt_proj weight + bias
            + di * n
            + di  # A_log, D
            + di * d  # out_proj
            + d  # pre-norm
        )
    if kind == "gdn":
        kw, vw, hv = gdn_key_width(m), gdn_value_width(m), m.gdn_v_heads
        return (
            d * (2 * kw + 2 * vw + 2 * hv)  # in_proj -> q, k, v, z and beta, decay
            + gdn_conv_channels(m) * m.gdn_conv_kernel  # conv weight (no bias in Qwen3-Next)
            + 2 * hv  # A_log, dt_bias
            + m.gdn_head_v_dim  # gated RMSNorm (shared across heads)
            + vw * d  # out_proj
            + d  # pre-norm
        )
    raise ValueError(kind)


def linear_params(m: ModelSpec, kind: str) -> int:
    """The part of :func:`params` in projections the cost model prices as GEMMs (those a
    ``--precision`` quantises: vLLM builds them as ``LinearBase`` layers with the model's
    quant config; the conv, norms and the recurrent mixers' A, D, dt biases stay as
    they are, e.g. ``conv1d`` with ``quant_config=None`` in ``mamba_mixer2.py``)."""
    d = m.d_model
    if kind in KV_KINDS:
        q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
        return d * (q_proj_width(m) + 2 * kv) + q * d  # QKV (and gate), O
    if kind == "mamba2":
        h, n_g = m.n_ssm_heads, m.ssm_groups * m.ssm_d_state
        return d * (2 * m.d_inner + 2 * n_g + h) + m.d_inner * d  # in_proj, out_proj
    if kind == "mamba1":
        di, r, n = m.d_inner, mamba1_dt_rank(m), m.ssm_d_state
        return d * 2 * di + di * (r + 2 * n) + r * di + di * d  # in, x, dt (weight), out
    if kind == "gdn":
        kw, vw, hv = gdn_key_width(m), gdn_value_width(m), m.gdn_v_heads
        return d * (2 * kw + 2 * vw + 2 * hv) + vw * d  # in_proj, out_proj
    raise ValueError(kind)


# ------------------------------------------------------------------ FLOPs
def prefill_flops(m: ModelSpec, kind: str, n: int, n_cached: int) -> int:
    """FLOPs of one layer of ``kind`` prefilling ``n`` tokens after ``n_cached``."""
    d = m.d_model
    if kind in KV_KINDS:
        q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
        w = window_of(m, kind)
        keys = keys_upto(n_cached + n, w) - keys_upto(n_cached, w)
        # QKV (and gate) and O projections, then QK^T and AV over the attended keys.
        return 2 * n * d * (q_proj_width(m) + 2 * kv) + 2 * n * q * d + 4 * q * keys
    if kind == "mamba2":
        sc, big_n, chunk, g = m.state_channels, m.ssm_d_state, m.ssm_chunk_size, m.ssm_groups
        f = 2 * n * d * (2 * m.d_inner + 2 * g * big_n + m.n_ssm_heads)  # in_proj
        f += 2 * n * m.conv_channels * m.ssm_conv_kernel  # causal conv
        # Chunked SSD scan, per token: C.B^T within a chunk (2*Q*N per group),
        # (L o CB).X (2*Q per state channel), chunk states B^T.X and outputs
        # C.h (2*N each per state channel). State passing between chunks is
        # O(channels*N/Q) per token and left out, which keeps this linear.
        f += n * (2 * sc * (2 * big_n + chunk) + 2 * chunk * big_n * g)
        return f + 2 * n * m.d_inner * d  # out_proj
    if kind == "mamba1":
        di, r, big_n = m.d_inner, mamba1_dt_rank(m), m.ssm_d_state
        f = 2 * n * d * 2 * di  # in_proj
        f += 2 * n * di * m.ssm_conv_kernel  # causal conv
        f += 2 * n * di * (r + 2 * big_n) + 2 * n * r * di  # x_proj, dt_proj
        f += n * di * mamba1_scan_flops_per_channel(big_n)  # selective scan
        return f + 2 * n * di * d  # out_proj
    if kind == "gdn":
        kw, vw, hv = gdn_key_width(m), gdn_value_width(m), m.gdn_v_heads
        f = 2 * n * d * (2 * kw + 2 * vw + 2 * hv)  # in_proj
        f += 2 * n * gdn_conv_channels(m) * m.gdn_conv_kernel  # causal conv
        f += n * hv * gdn_chunk_flops_per_head(m.gdn_head_k_dim, m.gdn_head_v_dim, m.gdn_chunk_size)
        return f + 2 * n * vw * d  # out_proj
    raise ValueError(kind)


def mamba1_scan_flops_per_channel(d_state: int) -> int:
    """Selective-scan FLOPs per token and channel (mamba_ssm selective_scan_ref).

    Per state element: dt*A and its exp (2), dt*B*x (2), the update dA*h + dBx (2)
    and the readout C.h (2); plus the D skip (2) per channel.
    """
    return 8 * d_state + 2


def gdn_chunk_flops_per_head(k: int, v: int, chunk: int) -> int:
    """Chunked gated delta rule FLOPs per token and value head (FLA ``chunk_gated_delta_rule``).

    Per chunk of C tokens: K K^T (2C^2K), the triangular solve of (I + A) by forward
    substitution (~C^3), W = T(beta K) (2C^2K), U = T(beta V) (2C^2V), Q K^T (2C^2K),
    its masked product with the corrected values (2C^2V), Q S, W S and the state
    update K^T (U - W S) (2CKV each). Divided by C: 6CK + 4CV + 6KV + C^2.
    """
    return 6 * chunk * k + 4 * chunk * v + 6 * k * v + chunk * chunk
