"""Hugging Face config parsers for the large MoE models of NVIDIA's measured set (issue 34):
DeepSeek-V3/R1 and their kind (Kimi-K2.5's text model), GLM-5, MiniMax-M2.5 and
Qwen3-MoE.

Each returns ``ModelSpec`` fields with a ``layers`` pattern (``twin.layer_pattern``),
reading the keys the model's transformers (or remote-code) configuration class defines,
with that class's defaults, and the layer rule its modeling code applies (cited per
parser). The shapes only: precision comes from the checkpoint's quantisation where a
caller reads it (``twin.validate.silicon.precision``), the preset's otherwise. What every
shape leaves out is the presets' list (``twin.preset_measured``): biases, per-head q/k
norms, GLM-5's sparse-attention indexer, MiniMax's MTP modules.
"""

from __future__ import annotations

from typing import Any

from twin.hf_keys import ConfigKeys, heads


def _moe_every(n: int, first_dense: int, every: int) -> list[bool]:
    """Which of ``n`` layers are MoE: from ``first_dense`` on, every ``every``-th by index
    (DeepSeek-V3's ``modeling_deepseek.py`` ``DeepseekV3DecoderLayer``: ``layer_idx >=
    first_k_dense_replace and layer_idx % moe_layer_freq == 0``; none when
    ``first_dense >= n``)."""
    return [i >= first_dense and i % every == 0 for i in range(n)]


def deepseek_v3(cfg: ConfigKeys) -> dict[str, Any]:
    """DeepSeek-V3 / R1 (transformers ``DeepseekV3Config``, model_type ``deepseek_v3``;
    Kimi-K2's ``kimi_k2`` text config has the same keys and ``DeepseekV3ForCausalLM``):
    multi-head latent attention (``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
    ``qk_rope_head_dim``, ``v_head_dim``) in every layer; dense MLPs of
    ``intermediate_size`` before ``first_k_dense_replace``, then routed experts of
    ``moe_intermediate_size`` with ``n_shared_experts`` shared ones of the same width;
    ``num_nextn_predict_layers`` MTP modules (none where absent; the other defaults are
    transformers': 3 dense layers, ``moe_layer_freq`` 1, 1 shared expert, a null
    ``q_lora_rank`` for a direct query projection)."""
    n = cfg.layers()
    first = cfg.integer("first_k_dense_replace", 3)
    moe = _moe_every(n, first, cfg.pos("moe_layer_freq", 1))
    shared = cfg.integer("n_shared_experts", 1)
    d_ff = cfg.pos("moe_intermediate_size")
    fields: dict[str, Any] = dict(
        layers=tuple("mla/moe" if m else "mla/mlp" for m in moe),
        d_model=cfg.pos("hidden_size"),
        n_heads=cfg.pos("num_attention_heads"),
        q_lora_rank=0 if cfg.data.get("q_lora_rank", 1536) is None else cfg.pos("q_lora_rank"),
        kv_lora_rank=cfg.pos("kv_lora_rank"),
        qk_nope_head_dim=cfg.pos("qk_nope_head_dim"),
        qk_rope_head_dim=cfg.pos("qk_rope_head_dim"),
        v_head_dim=cfg.pos("v_head_dim"),
        mlp_d_ff=cfg.pos("intermediate_size"),
        moe_n_experts=cfg.pos("n_routed_experts"),
        moe_top_k=cfg.pos("num_experts_per_tok"),
        moe_d_ff=d_ff,
        moe_shared_d_ff=shared * d_ff,
        # transformers' DeepseekV3Config defaults: n_group 8, topk_group 4 (Kimi-K2.5's
        # text config and GLM-5's write 1 and 1).
        moe_n_group=cfg.pos("n_group", 8),
        moe_topk_group=cfg.pos("topk_group", 4),
        vocab_size=cfg.pos("vocab_size"),
        tie_embeddings=cfg.flag("tie_word_embeddings", False),
    )
    mtp = cfg.integer("num_nextn_predict_layers", 0)
    if mtp:
        fields["mtp_layers"] = mtp
    return fields


def glm_moe_dsa(cfg: ConfigKeys) -> dict[str, Any]:
    """GLM-5 (transformers ``GlmMoeDsaConfig``, model_type ``glm_moe_dsa``): DeepSeek-V3's
    MLA + MoE layout under the same keys, with DeepSeek Sparse Attention's indexer
    (``index_n_heads``, ``index_head_dim``, ``index_topk``): its heads and width priced per
    layer, the attention itself as dense MLA, as the preset (``twin.preset_measured``)."""
    fields = deepseek_v3(cfg)
    fields["index_n_heads"] = cfg.pos("index_n_heads")
    fields["index_head_dim"] = cfg.pos("index_head_dim")
    fields["index_topk"] = cfg.pos("index_topk")
    return fields


def _gqa_moe(
    cfg: ConfigKeys, layers: tuple[str, ...], experts_key: str, width_key: str
) -> dict[str, Any]:
    """The fields a grouped-query-attention MoE stack shares: the width, the heads
    (``twin.hf_config.heads``), ``experts_key`` routed experts of ``width_key``, the top-k,
    the vocabulary and the tie (untied by default)."""
    return dict(
        layers=layers,
        d_model=cfg.pos("hidden_size"),
        **heads(cfg),
        moe_n_experts=cfg.pos(experts_key),
        moe_top_k=cfg.pos("num_experts_per_tok"),
        moe_d_ff=cfg.pos(width_key),
        vocab_size=cfg.pos("vocab_size"),
        tie_embeddings=cfg.flag("tie_word_embeddings", False),
    )


def minimax_m2(cfg: ConfigKeys) -> dict[str, Any]:
    """MiniMax-M2 (remote-code ``MiniMaxM2Config``, model_type ``minimax_m2``): grouped-query
    attention (``head_dim`` given) and ``num_local_experts`` routed experts of
    ``intermediate_size`` in every layer, ``shared_intermediate_size`` (0: none); its MTP
    modules (``num_mtp_modules``) are not carried. ``use_qk_norm`` with ``qk_norm_type``
    ``per_layer`` (the remote code's default, what every published config gives): one
    RMSNorm over the whole query projection and one over the key projection
    (``qk_norm_across_heads``; vLLM 0.16.0-0.19.0 ``models/minimax_m2.py`` builds
    ``MiniMaxText01RMSNormTP`` over ``head_dim x total_num_heads`` whatever the keys)."""
    layers = ("attention/moe",) * cfg.layers()
    fields = _gqa_moe(cfg, layers, "num_local_experts", "intermediate_size")
    per_layer = cfg.text("qk_norm_type", "per_layer") == "per_layer"
    fields["qk_norm_across_heads"] = cfg.flag("use_qk_norm", True) and per_layer
    shared = cfg.integer("shared_intermediate_size", 0)
    if shared:
        fields["moe_shared_d_ff"] = shared
    return fields


def qwen3_moe(cfg: ConfigKeys) -> dict[str, Any]:
    """Qwen3-MoE (transformers ``Qwen3MoeConfig``, model_type ``qwen3_moe``): layer ``i`` is
    MoE unless listed in ``mlp_only_layers``, and then only if ``(i + 1) %
    decoder_sparse_step == 0`` (``modeling_qwen3_moe.py`` ``Qwen3MoeDecoderLayer``);
    ``num_experts`` of ``moe_intermediate_size``, dense layers of ``intermediate_size``;
    ``head_dim`` given; ``use_sliding_window`` true (Qwen2's windowed upper layers) is
    refused."""
    n = cfg.layers()
    step = cfg.pos("decoder_sparse_step", 1)
    dense_only = cfg.opt("mlp_only_layers", [])
    if not isinstance(dense_only, list) or not all(
        isinstance(i, int) and 0 <= i < n for i in dense_only
    ):
        raise cfg.fail("mlp_only_layers", f"must be a list of layer indices below {n}")
    moe = [i not in dense_only and (i + 1) % step == 0 for i in range(n)]
    layers = tuple("attention/moe" if m else "attention/mlp" for m in moe)
    fields = _gqa_moe(cfg, layers, "num_experts", "moe_intermediate_size")
    if not all(moe):
        fields["mlp_d_ff"] = cfg.pos("intermediate_size")
    if cfg.flag("use_sliding_window", False):
        raise cfg.fail("use_sliding_window", "true is not modelled for qwen3_moe")
    return fields


# model_type -> parser; Kimi-K2.5's multimodal wrapper keeps its language model under
# ``text_config`` (model_type ``kimi_k2``, ``DeepseekV3ForCausalLM``).
PARSERS = {
    "deepseek_v3": deepseek_v3,
    "kimi_k2": deepseek_v3,
    "glm_moe_dsa": glm_moe_dsa,
    "minimax_m2": minimax_m2,
    "qwen3_moe": qwen3_moe,
}
WRAPPERS = {"kimi_k25": "kimi_k2"}
