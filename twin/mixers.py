"""Sequence-mixer kinds: what one layer of each kind holds, weighs and computes.

A layer's mixer is one of (or, for parallel hybrids such as Falcon-H1, several of):

- ``attention``: full causal self-attention, GQA, optional output gate (Qwen3-Next's
  gated attention doubles the query projection: query + gate).
- ``swa``: the same attention limited to the last ``sliding_window`` keys.
- ``mla``: multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, sec. 2.1;
  DeepSeek-V3/R1, Kimi-K2.5, GLM-5): the cache holds one latent per token and layer,
  ``kv_lora_rank`` wide, plus the decoupled RoPE key, ``qk_rope_head_dim`` wide, shared
  by all heads. Projections: q_a (d -> ``q_lora_rank``), its norm and q_b (-> heads x
  (nope + rope)), or one q_proj when ``q_lora_rank`` is 0; kv_a_proj_with_mqa (d ->
  ``kv_lora_rank`` + rope), its norm; kv_b_proj (latent -> heads x (nope + v)); o_proj
  (heads x v -> d). The engines run it in two forms per phase (vLLM
  ``vllm/v1/attention/backends/mla/common.py``, module docstring, main at commit
  00a817a, Nov 2025; the same split in v0.10-v0.12 and SGLang's ``forward_normal`` /
  ``forward_absorb`` in ``python/sglang/srt/models/deepseek_v2.py``): prefill
  decompresses K and V with kv_b_proj and attends per head at nope + rope (the
  "compute friendly approach", MHA); decode absorbs kv_b_proj into the query and the
  output and attends in the latent space at ``kv_lora_rank`` + rope (the "data-movement
  friendly approach", MQA over the latent).
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

from twin.precision import kv_elem_bytes

if TYPE_CHECKING:
    from twin.model import ModelSpec

MIXER_KINDS = ("attention", "swa", "mla", "mamba1", "mamba2", "gdn")
KV_KINDS = frozenset({"attention", "swa", "mla"})  # hold per-token KV
# Hold the KV of every token before the hit point (the cache's full-attention hit rule).
FULL_KV_KINDS = frozenset({"attention", "mla"})
GQA_KINDS = frozenset({"attention", "swa"})  # K and V per KV head (n_kv_heads x head_dim)
RECURRENT_KINDS = frozenset({"mamba1", "mamba2", "gdn"})  # hold one state per sequence
# Kinds with bytes and FLOPs but no kernel prices yet: the cost model refuses them (none
# since issue 34 priced ``mla``: ``twin.costmodel.mla_pricing``).
UNPRICED_KINDS: frozenset[str] = frozenset()
FFN_KINDS = ("mlp", "moe", "none")
SHORT = {
    "attention": "attn",
    "swa": "swa",
    "mla": "mla",
    "mamba1": "mamba1",
    "mamba2": "mamba2",
    "gdn": "gdn",
}


def keys_upto(m: int, window: int | None) -> int:
    """Sum of min(k, window) for k = 1..m: keys attended by the first m causal tokens."""
    if window is None or m <= window:
        return m * (m + 1) // 2
    return window * (window + 1) // 2 + (m - window) * window


def chunk_keys(n: int, cached: int, window: int | None) -> int:
    """Query-key pairs of a causal chunk of ``n`` new tokens after ``cached`` (bottom-right
    aligned; ``window`` None: full attention)."""
    return keys_upto(cached + n, window) - keys_upto(cached, window)


def chunk_kv_rows(n: int, cached: int, window: int | None) -> int:
    """K/V rows a causal chunk of ``n`` new tokens after ``cached`` reads: every one, or
    the window's before its first new token and the new ones."""
    return cached + n if window is None else min(cached + n, window + n)


def window_of(m: ModelSpec, kind: str) -> int | None:
    """The attention window of ``kind`` (None: full causal)."""
    return m.sliding_window if kind == "swa" else None


# ------------------------------------------------------------------ widths
def q_proj_width(m: ModelSpec) -> int:
    """Query projection outputs; a gated attention also projects its output gate."""
    return m.n_heads * m.head_dim * (2 if m.attn_output_gate else 1)


def mla_q_head_dim(m: ModelSpec) -> int:
    """Query/key width per MLA head in the decompressed form: nope + rope."""
    return m.qk_nope_head_dim + m.qk_rope_head_dim


def mla_latent_width(m: ModelSpec) -> int:
    """What one MLA layer caches per token: the KV latent plus the shared RoPE key."""
    return m.kv_lora_rank + m.qk_rope_head_dim


def mla_linear_params(m: ModelSpec) -> int:
    """MLA's projections: q_a + q_b (or q_proj), kv_a_proj_with_mqa, kv_b_proj, o_proj."""
    d, h = m.d_model, m.n_heads
    q_out = h * mla_q_head_dim(m)
    q = d * m.q_lora_rank + m.q_lora_rank * q_out if m.q_lora_rank else d * q_out
    kv_a = d * mla_latent_width(m)
    kv_b = m.kv_lora_rank * h * (m.qk_nope_head_dim + m.v_head_dim)
    return q + kv_a + kv_b + h * m.v_head_dim * d


def mla_replicated_params(m: ModelSpec) -> tuple[int, int]:
    """The part of an MLA layer every tensor-parallel rank holds whole: the q_a and
    kv_a_proj_with_mqa projections (one fused GEMM, vLLM's ``DeepSeekV2FusedQkvAProjLinear``
    with ``disable_tp=True``; a ``ReplicatedLinear`` kv_a when there is no q latent, and in
    SGLang's ``deepseek_v2.py``) and their RMSNorms. Linear parameters first, then norms:
    ``(linear, norms)``."""
    d, latent = m.d_model, mla_latent_width(m)
    return d * (m.q_lora_rank + latent), m.q_lora_rank + m.kv_lora_rank


def mla_token_flops(m: ModelSpec) -> int:
    """Per-token FLOPs of MLA's projections that do not depend on the form: q (a and b,
    or q_proj), kv_a_proj_with_mqa and o_proj."""
    d, h = m.d_model, m.n_heads
    q_out = h * mla_q_head_dim(m)
    q = d * m.q_lora_rank + m.q_lora_rank * q_out if m.q_lora_rank else d * q_out
    return 2 * (q + d * mla_latent_width(m) + h * m.v_head_dim * d)


def mla_decompress_flops(m: ModelSpec, tokens: int) -> int:
    """kv_b_proj over ``tokens`` latents: K nope and V for every head (the prefill form;
    vLLM's chunked prefill also runs it over the cached context, chunk by chunk)."""
    return 2 * tokens * m.kv_lora_rank * m.n_heads * (m.qk_nope_head_dim + m.v_head_dim)


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
    """K and V of one token in one layer of ``kind`` (0 for recurrent kinds); for ``mla``
    the latent and the RoPE key, once for all heads (vLLM's MLA cache is
    ``(num_blocks, block_size, kv_lora_rank + qk_rope_head_dim)``, ``get_kv_cache_shape``
    in ``vllm/v1/attention/backends/mla/common.py``)."""
    if kind == "mla":
        return mla_latent_width(m) * kv_elem_bytes(m) + indexer_key_bytes(m)
    if kind in GQA_KINDS:
        return 2 * m.n_kv_heads * m.head_dim * kv_elem_bytes(m)
    return 0


# A DeepSeek-sparse-attention indexer's key cache, per token and MLA layer, whatever the
# KV dtype: ``index_head_dim`` fp8 values and one fp32 scale per 128 of them (SGLang 0.5.9
# ``mem_cache/memory_pool.py`` ``NSATokenToKVPool``: ``index_k_with_scale_buffer`` uint8,
# ``quant_block_size`` 128; ``model_executor/model_runner_kv_cache_mixin.py``
# ``get_cell_size_per_token`` adds ``index_head_dim + index_head_dim // 128 * 4`` bytes a
# layer to the MLA cell).
INDEXER_SCALE_BLOCK = 128


def indexer_key_bytes(m: ModelSpec) -> int:
    """Bytes of one token's indexer key in one MLA layer (above); 0 without an indexer."""
    width = m.index_head_dim
    return width + width // INDEXER_SCALE_BLOCK * 4 if m.index_n_heads else 0


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
    if kind in GQA_KINDS:
        q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
        return d * (q_proj_width(m) + 2 * kv) + q * d + d  # QKV (GQA), O, pre-norm
    if kind == "mla":  # projections, q_a and kv_a norms, pre-norm
        return mla_linear_params(m) + m.q_lora_rank + m.kv_lora_rank + d
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
    if kind in GQA_KINDS:
        q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
        return d * (q_proj_width(m) + 2 * kv) + q * d  # QKV (and gate), O
    if kind == "mla":
        return mla_linear_params(m)
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
    if kind == "mla":
        # The prefill (non-absorbed) form: projections, kv_b_proj over the new tokens'
        # latents, then QK^T at nope + rope and AV at v per head over the attended keys.
        # Re-decompressing the cached context (vLLM's chunked-context loop) is left to
        # ``mla_decompress_flops`` so that prefills stay additive over splits.
        keys = chunk_keys(n, n_cached, None)
        per_key = 2 * m.n_heads * (mla_q_head_dim(m) + m.v_head_dim)
        return n * mla_token_flops(m) + mla_decompress_flops(m, n) + per_key * keys
    if kind in GQA_KINDS:
        q, kv = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
        w = window_of(m, kind)
        keys = chunk_keys(n, n_cached, w)
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


def decode_flops(m: ModelSpec, kind: str, context: int) -> int:
    """FLOPs of one layer of ``kind`` decoding one token after ``context`` tokens.

    ``mla`` runs the absorbed form: q_nope is mapped into the latent by W_UK (per head
    nope x kv_lora_rank), QK^T at kv_lora_rank + rope and AV at kv_lora_rank over the
    latent of every key (the new token's included), then W_UV (kv_lora_rank x v per head)
    and o_proj. Every other kind decodes as a prefill of one token.
    """
    if kind != "mla":
        return prefill_flops(m, kind, 1, context)
    h, lkv, keys = m.n_heads, m.kv_lora_rank, context + 1
    absorb = 2 * h * lkv * (m.qk_nope_head_dim + m.v_head_dim)  # W_UK into q, W_UV out
    attend = 2 * h * (2 * lkv + m.qk_rope_head_dim) * keys  # QK^T (lkv + rope), AV (lkv)
    return mla_token_flops(m) + absorb + attend


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
