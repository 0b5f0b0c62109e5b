"""The tiny preset shapes for tests: fast, but exercising GQA, SSM heads and chunking,
and every layer kind (the public models are in ``twin.preset_specs``)."""

from __future__ import annotations

from typing import Any

from twin.layer_pattern import repeat
from twin.model import ModelSpec

# The fields the tiny shapes share: width and vocabulary, attention (GQA), the Mamba2
# state and the Gated DeltaNet heads.
_TINY: dict[str, Any] = {"d_model": 64, "vocab_size": 512, "source": "test shape"}
_ATTN: dict[str, Any] = {**_TINY, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16}
_SSM: dict[str, Any] = {"ssm_d_state": 16, "ssm_head_dim": 16, "ssm_chunk_size": 16}
_GDN: dict[str, Any] = {
    "gdn_k_heads": 2,
    "gdn_v_heads": 4,
    "gdn_head_k_dim": 16,
    "gdn_head_v_dim": 16,
    "gdn_chunk_size": 16,
}

TINY_SPECS: list[ModelSpec] = [
    ModelSpec(
        name="tiny-hybrid",
        n_attention_layers=1,
        n_ssm_layers=3,
        n_mlp_layers=4,
        mlp_d_ff=256,
        ssm_expand=2,
        ssm_groups=1,
        ssm_conv_kernel=4,
        **_ATTN,
        **_SSM,
    ),
    ModelSpec(name="tiny-transformer", n_attention_layers=4, n_mlp_layers=4, mlp_d_ff=256, **_ATTN),
    ModelSpec(
        name="tiny-ssm",
        n_ssm_layers=4,
        ssm_expand=2,
        ssm_groups=1,
        ssm_conv_kernel=4,
        tie_embeddings=True,
        **_TINY,
        **_SSM,
    ),
    # Tiny shapes of the issue-13 kinds: one per recurrent kind with attention, and
    # sliding-window + full attention.
    ModelSpec(
        name="tiny-gdn-hybrid",
        layers=repeat(("gdn/mlp",) * 3 + ("attention/mlp",), 1),
        attn_output_gate=True,
        mlp_d_ff=128,
        **_ATTN,
        **_GDN,
    ),
    ModelSpec(
        name="tiny-mamba1-hybrid",
        layers=("mamba1/mlp", "mamba1/mlp", "attention/mlp", "mamba1/mlp"),
        mlp_d_ff=128,
        ssm_d_state=8,
        ssm_expand=2,
        ssm_conv_kernel=4,
        **_ATTN,
    ),
    ModelSpec(
        name="tiny-parallel",  # Falcon-H1's layout: attention and Mamba2 side by side
        layers=("attention+mamba2/mlp",) * 3,
        mlp_d_ff=128,
        ssm_expand=1,
        **_ATTN,
        **_SSM,
    ),
    ModelSpec(
        name="tiny-swa-hybrid",  # sliding-window + full attention + Mamba2
        layers=("swa/mlp", "mamba2/mlp", "attention/mlp", "swa/mlp"),
        sliding_window=8,
        mlp_d_ff=128,
        **_ATTN,
        **_SSM,
    ),
    ModelSpec(
        name="tiny-moe-hybrid",  # every kind but Mamba-1, each with a MoE FFN + shared expert
        layers=("gdn/moe", "mamba2/moe", "swa/moe", "attention/moe", "swa/mlp"),
        sliding_window=8,
        mlp_d_ff=128,
        moe_n_experts=8,
        moe_top_k=2,
        moe_d_ff=32,
        moe_shared_d_ff=64,
        **_ATTN,
        **_SSM,
        **_GDN,
    ),
    ModelSpec(
        name="tiny-swa",
        layers=("swa/mlp", "swa/mlp", "attention/mlp", "swa/mlp"),
        sliding_window=8,
        mlp_d_ff=128,
        **_ATTN,
    ),
]
