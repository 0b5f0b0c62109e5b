"""Hugging Face config parsers for the per-layer hybrids (issue 13).

Each returns ``ModelSpec`` fields with a ``layers`` pattern (see ``twin.layer_pattern``),
reading the keys the model's transformers configuration class defines (cited per
parser); keys transformers defaults take the same default here.
"""

from __future__ import annotations

from typing import Any

from twin.hf_keys import ConfigKeys, heads


def _layer_list(cfg: ConfigKeys, key: str, n: int, allowed: dict[str, str]) -> list[str] | None:
    """``cfg[key]`` as mixer kinds (``n`` of them), or None if absent; refuses unknown
    entries (``ConfigKeys.kinds``)."""
    return None if cfg.opt(key, None) is None else cfg.kinds(key, allowed, n)


def _gqa(cfg: ConfigKeys) -> dict[str, Any]:
    return dict(
        d_model=cfg.pos("hidden_size"),
        **heads(cfg),
        vocab_size=cfg.pos("vocab_size"),
        tie_embeddings=cfg.flag("tie_word_embeddings", False),
    )


def qwen3_next(cfg: ConfigKeys) -> dict[str, Any]:
    """Qwen3-Next and Qwen3.5 text (transformers ``Qwen3NextConfig``, ``Qwen3_5TextConfig``,
    ``Qwen3_5MoeTextConfig``): ``layer_types`` linear_attention (Gated DeltaNet) /
    full_attention (gated), else every ``full_attention_interval``-th layer full; MoE on
    layers where ``(i + 1) % decoder_sparse_step == 0`` outside ``mlp_only_layers``;
    ``mtp_num_hidden_layers`` MTP modules (Qwen3.5's checkpoints carry one; none where
    absent), which SGLang's and vLLM's MTP speculative decoding drafts with."""
    n = cfg.layers()
    kinds = _layer_list(
        cfg, "layer_types", n, {"linear_attention": "gdn", "full_attention": "attention"}
    )
    if kinds is None:
        every = cfg.pos("full_attention_interval", 4)
        kinds = ["attention" if (i + 1) % every == 0 else "gdn" for i in range(n)]
    experts = cfg.integer("num_experts", 0)
    step = cfg.pos("decoder_sparse_step", 1)
    dense = set(cfg.indices("mlp_only_layers", n))
    moe = [experts > 0 and i not in dense and (i + 1) % step == 0 for i in range(n)]
    fields = dict(
        layers=tuple(f"{k}/{'moe' if e else 'mlp'}" for k, e in zip(kinds, moe, strict=True)),
        **_gqa(cfg),
        attn_output_gate=cfg.flag("attn_output_gate", True),
        mlp_gated=True,
        gdn_k_heads=cfg.pos("linear_num_key_heads"),
        gdn_v_heads=cfg.pos("linear_num_value_heads"),
        gdn_head_k_dim=cfg.pos("linear_key_head_dim"),
        gdn_head_v_dim=cfg.pos("linear_value_head_dim"),
        gdn_conv_kernel=cfg.pos("linear_conv_kernel_dim", 4),
    )
    if not all(moe):
        fields["mlp_d_ff"] = cfg.pos("intermediate_size")
    if any(moe):
        fields.update(
            moe_n_experts=experts,
            moe_top_k=cfg.pos("num_experts_per_tok"),
            moe_d_ff=cfg.pos("moe_intermediate_size"),
            moe_shared_d_ff=cfg.integer("shared_expert_intermediate_size", 0),
        )
    mtp = cfg.integer("mtp_num_hidden_layers", 0)
    if mtp:
        fields["mtp_layers"] = mtp
    return fields


def _mamba2_fields(cfg: ConfigKeys, d: int, d_inner: int, heads: int, head_key: str) -> dict:
    """The Mamba2 mixer of Granite-4.0-H and Falcon-H1, with the checks of transformers 5.24's
    ``GraniteMoeHybridConfig``/``FalconH1Config.validate_architecture``: ``mamba_n_heads``
    divides the inner width, and heads x head dim is that width."""
    cfg.divides("mamba_n_heads", heads, d_inner, "the Mamba inner width")
    head_dim = cfg.auto_or_pos(head_key) or d_inner // heads
    if heads * head_dim != d_inner:
        raise cfg.fail(head_key, f"times the Mamba heads ({heads}) must be {d_inner}")
    expand: float = d_inner // d if d_inner % d == 0 else d_inner / d
    return dict(
        ssm_d_state=cfg.pos("mamba_d_state"),
        ssm_expand=expand,
        ssm_head_dim=head_dim,
        ssm_groups=cfg.pos("mamba_n_groups", 1),
        ssm_conv_kernel=cfg.pos("mamba_d_conv", 4),
        ssm_chunk_size=cfg.pos("mamba_chunk_size", 256),
    )


def granite_hybrid(cfg: ConfigKeys) -> dict[str, Any]:
    """Granite-4.0-H (transformers ``GraniteMoeHybridConfig``): ``layer_types`` mamba
    (Mamba2) / attention; every layer's FFN is MoE with a shared expert when
    ``num_local_experts`` > 0, else the shared MLP alone (``shared_intermediate_size``)."""
    n, d = cfg.layers(), cfg.pos("hidden_size")
    kinds = _layer_list(cfg, "layer_types", n, {"mamba": "mamba2", "attention": "attention"})
    if kinds is None:
        raise cfg.fail("layer_types", "is required (a list of mamba / attention)")
    experts = cfg.integer("num_local_experts", 0)
    ffn = "moe" if experts else "mlp"
    d_inner = cfg.pos("mamba_expand", 2) * d
    fields = dict(
        layers=tuple(f"{k}/{ffn}" for k in kinds),
        **_gqa(cfg),
        mlp_gated=True,
        **_mamba2_fields(cfg, d, d_inner, cfg.pos("mamba_n_heads", 128), "mamba_d_head"),
    )
    fields["tie_embeddings"] = cfg.flag("tie_word_embeddings", True)
    shared = cfg.integer("shared_intermediate_size", 0)
    if experts:
        fields.update(
            moe_n_experts=experts,
            moe_top_k=cfg.pos("num_experts_per_tok"),
            moe_d_ff=cfg.pos("intermediate_size"),
            moe_shared_d_ff=shared,
        )
    else:
        fields["mlp_d_ff"] = shared
    return fields


def falcon_h1(cfg: ConfigKeys) -> dict[str, Any]:
    """Falcon-H1 (transformers ``FalconH1Config``; vLLM ``FalconH1ParallelHybrid``): every
    layer runs attention and Mamba2 in parallel, then a gated MLP."""
    n, d = cfg.layers(), cfg.pos("hidden_size")
    d_inner = cfg.pos("mamba_d_ssm", cfg.pos("mamba_expand", 2) * d)
    return dict(
        layers=("attention+mamba2/mlp",) * n,
        **_gqa(cfg),
        mlp_d_ff=cfg.pos("intermediate_size"),
        mlp_gated=True,
        **_mamba2_fields(cfg, d, d_inner, cfg.pos("mamba_n_heads"), "mamba_d_head"),
    )


def _sliding(cfg: ConfigKeys, n: int, default: list[str]) -> tuple[list[str], int]:
    kinds = _layer_list(
        cfg, "layer_types", n, {"sliding_attention": "swa", "full_attention": "attention"}
    )
    return kinds if kinds is not None else default, cfg.pos("sliding_window")


def gpt_oss(cfg: ConfigKeys) -> dict[str, Any]:
    """gpt-oss (transformers ``GptOssConfig``): ``layer_types`` sliding / full (default
    alternating, even layers sliding), every layer MoE (SwiGLU experts)."""
    n = cfg.layers()
    kinds, window = _sliding(cfg, n, ["swa" if i % 2 == 0 else "attention" for i in range(n)])
    top_k = cfg.pos("num_experts_per_tok", cfg.pos("experts_per_token", 4))
    return dict(
        layers=tuple(f"{k}/moe" for k in kinds),
        **_gqa(cfg),
        sliding_window=window,
        mlp_gated=True,
        moe_n_experts=cfg.pos("num_local_experts"),
        moe_top_k=top_k,
        moe_d_ff=cfg.pos("intermediate_size"),
    )


def gemma3(cfg: ConfigKeys) -> dict[str, Any]:
    """Gemma 3 text (transformers ``Gemma3TextConfig``): ``layer_types``, else layer i is
    full attention when ``(i + 1) % sliding_window_pattern == 0``; gated GELU MLP, tied."""
    n = cfg.layers()
    every = cfg.pos("sliding_window_pattern", 6)
    default = ["attention" if (i + 1) % every == 0 else "swa" for i in range(n)]
    kinds, window = _sliding(cfg, n, default)
    fields = dict(
        layers=tuple(f"{k}/mlp" for k in kinds),
        **_gqa(cfg),
        sliding_window=window,
        mlp_d_ff=cfg.pos("intermediate_size"),
        mlp_gated=True,
    )
    fields["head_dim"] = cfg.pos("head_dim", 256)
    fields["tie_embeddings"] = cfg.flag("tie_word_embeddings", True)
    return fields


# model_type -> parser; the multimodal wrappers' text lives under ``text_config``.
PARSERS = {
    "qwen3_next": qwen3_next,
    "qwen3_5_text": qwen3_next,
    "qwen3_5_moe_text": qwen3_next,
    "granitemoehybrid": granite_hybrid,
    "falcon_h1": falcon_h1,
    "gpt_oss": gpt_oss,
    "gemma3_text": gemma3,
}
WRAPPERS = {"qwen3_5": "qwen3_5_text", "qwen3_5_moe": "qwen3_5_moe_text", "gemma3": "gemma3_text"}
