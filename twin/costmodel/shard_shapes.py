"""The per-GPU widths the cost model prices with, after tensor-parallel splitting.

Megatron style: heads, SSM heads and FFN widths are divided by ``tp``; KV heads, GDN
key heads and SSM groups are replicated when fewer than ``tp``. ``ShardShapes`` is
the base of ``CostModel`` and of its pricing parts (``dense_pricing``, ``moe_pricing``,
``collective_pricing``, ``mixer_pricing``, ``mla_pricing``, ``copy_pricing``): it declares
what they read and sets it from the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from twin import mixers as mx
from twin.costmodel.precision_kernels import PricedPrecision
from twin.costmodel.profile import Profile
from twin.errors import TwinError
from twin.model import ModelSpec


def _split(total: int, tp: int, what: str, model: str) -> int:
    if total % tp:
        raise TwinError(f"--tp {tp} does not divide {what} ({total}) of model {model!r}")
    return total // tp


class ShardShapes:
    """One GPU's share of a model's widths (set by ``_setup_shapes``; a width of a
    layer kind the model lacks is never set)."""

    model: ModelSpec
    profile: Profile
    tp: int
    ep: int  # expert-parallel ranks (twin.parallel.Layout.ep)
    _k: dict[str, Callable[..., float]]  # the profile's kernels, compiled
    kinds: Mapping[str, int]
    elem_bytes: int
    kv_elem_bytes: int  # bytes per K/V element the attention kernels read (fp8 KV: 1)
    priced: PricedPrecision  # the fits the model's precision takes
    # The profile's GPU's SMs (``twin.hardware.SM_COUNTS``; None where not tabulated): the
    # waves of a launch's tiles (``features.gemm_wave_k``, ``moe_features.sglang_grid_flops``,
    # ``mla_bmm.mla_bmm_features``).
    sms: int | None
    # The attention decode fit's launch rule (``features.decode_launch_rule``).
    decode_rule: str
    d_model: int
    heads: int
    kv_heads: int
    head_dim: int
    qkv_width: int
    m1_inner: int
    m1_rank: int
    m1_state: int
    gdn_v: int
    gdn_k: int
    gdn_key_w: int
    gdn_val_w: int
    gdn_conv: int
    ssm_heads: int
    ssm_head_dim: int
    d_inner: int
    ssm_groups: int
    ssm_d_state: int
    chunk_size: int
    conv_channels: int
    in_proj_width: int
    mlp_width: int
    expert_width: int
    shared_width: int
    up_mats: int
    vocab: int

    def _setup_shapes(self) -> None:
        """Per-GPU widths after tensor-parallel splitting (Megatron style)."""
        m, tp = self.model, self.tp
        self.kinds = kinds = m.mixer_counts
        self.elem_bytes = m.dtype_bytes
        self.kv_elem_bytes = self.priced.kv_elem_bytes
        self.d_model = m.d_model
        if m.n_attention_layers:
            self.heads = _split(m.n_heads, tp, "the attention heads", m.name)
            # KV heads below tp are replicated (vLLM), never split further.
            self.kv_heads = m.n_kv_heads // tp if m.n_kv_heads >= tp else 1
            self.head_dim = m.head_dim
            q_heads = self.heads * (2 if m.attn_output_gate else 1)  # query (+ gate)
            self.qkv_width = (q_heads + 2 * self.kv_heads) * self.head_dim
        if kinds.get("mamba1"):
            self.m1_inner = _split(m.d_inner, tp, "d_inner", m.name)
            self.m1_rank, self.m1_state = mx.mamba1_dt_rank(m), m.ssm_d_state
        if kinds.get("gdn"):
            self.gdn_v = _split(m.gdn_v_heads, tp, "the GDN value heads", m.name)
            self.gdn_k = m.gdn_k_heads // tp if m.gdn_k_heads >= tp else 1
            self.gdn_key_w = self.gdn_k * m.gdn_head_k_dim
            self.gdn_val_w = self.gdn_v * m.gdn_head_v_dim
            self.gdn_conv = 2 * self.gdn_key_w + self.gdn_val_w
        if kinds.get("mamba2"):
            self.ssm_heads = _split(m.n_ssm_heads, tp, "the SSM heads", m.name)
            self.ssm_head_dim = m.ssm_head_dim
            self.d_inner = _split(m.d_inner, tp, "d_inner", m.name)
            self.ssm_groups = m.ssm_groups // tp if m.ssm_groups % tp == 0 else m.ssm_groups
            self.ssm_d_state, self.chunk_size = m.ssm_d_state, m.ssm_chunk_size
            self.conv_channels = self.d_inner + 2 * self.ssm_groups * self.ssm_d_state
            self.in_proj_width = (
                2 * self.d_inner + 2 * self.ssm_groups * self.ssm_d_state + self.ssm_heads
            )
        if m.n_mlp_layers:
            self.mlp_width = _split(m.mlp_d_ff, tp, "the MLP width", m.name)
        if m.n_moe_layers:
            # Each routed expert is split over the MoE TP, tp / ep (twin.parallel).
            self.expert_width = _split(m.moe_d_ff, tp // self.ep, "the expert width", m.name)
            self.shared_width = _split(m.moe_shared_d_ff, tp, "the shared-expert width", m.name)
        self.up_mats = 2 if m.mlp_gated else 1
        self.vocab = -(-m.vocab_size // tp)
