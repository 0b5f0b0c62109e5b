"""Build a ``ModelSpec`` from a local Hugging Face ``config.json``.

Supported: Llama/Mistral (``llama``, ``mistral``), dense Qwen3 (``qwen3``), Jamba
(``jamba``, Mamba-1), Zamba2 (``zamba2``), Nemotron-H (``nemotron_h``), Mamba2
(``mamba2``), and (``twin.hf_hybrids``) Qwen3-Next and Qwen3.5 (``qwen3_next``,
``qwen3_5``, ``qwen3_5_moe``), Granite-4.0-H (``granitemoehybrid``), Falcon-H1
(``falcon_h1``), gpt-oss (``gpt_oss``), Gemma 3 (``gemma3``, ``gemma3_text``), and the
native ``mamba_ssm`` format (no ``model_type``; ``d_model``/``n_layer``/``ssm_cfg``, as
in ``state-spaces/mamba2-*``). Keys that
define the layer mix and widths are required; keys that transformers itself
defaults take the same default here.
The serving dtype is a deployment choice, not read from ``torch_dtype``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from twin.errors import TwinError
from twin.hf_hybrids import PARSERS as HYBRID_PARSERS
from twin.hf_hybrids import WRAPPERS as HYBRID_WRAPPERS
from twin.hf_keys import ConfigKeys, heads
from twin.hf_moe import PARSERS as MOE_PARSERS
from twin.hf_moe import WRAPPERS as MOE_WRAPPERS
from twin.limits import MAX_LAYERS, check_json_depth
from twin.model import ModelSpec


def from_hf_config(
    path: str | Path, name: str | None = None, dtype_bytes: int = 2, state_dtype_bytes: int = 2
) -> ModelSpec:
    """Read ``path`` (a config.json, or a folder holding one) into a ``ModelSpec``.

    ``name`` defaults to ``_name_or_path`` in the file, else the folder or file name.
    Unknown ``model_type`` or a missing key raises ``TwinError`` naming the file and key.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        raw = p.read_text()
        check_json_depth(raw, str(p))  # before decoding: a deep nest is a RecursionError
        data = json.loads(raw)
    except FileNotFoundError:
        raise TwinError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TwinError(f"{p}: not a readable JSON file ({err})") from None
    if not isinstance(data, dict):
        raise TwinError(f"{p}: expected a JSON object at the top level")
    cfg = ConfigKeys(data, p)
    model_type: str | None = data.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise cfg.fail("model_type", f"must be a string (got {model_type!r})")
    if model_type is None and "ssm_cfg" in data:
        model_type = "mamba_ssm"
    if model_type in WRAPPERS:  # a multimodal wrapper: the language model is text_config
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise TwinError(f"{p}: model_type {model_type!r} needs a 'text_config' object")
        cfg, model_type = ConfigKeys(text, p, "text_config."), WRAPPERS[model_type]
    parser = _PARSERS.get(str(model_type))
    if parser is None:
        raise TwinError(
            f"{p}: unsupported model_type {model_type!r} in key 'model_type' "
            f"(supported: {', '.join(sorted(_PARSERS))})"
        )
    fields = parser(cfg)
    default_name = data.get("_name_or_path") or (
        p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    )
    fields.update(
        name=name or str(default_name),
        dtype_bytes=dtype_bytes,
        state_dtype_bytes=state_dtype_bytes,
        source=f"{p} (model_type {model_type})",
    )
    try:
        return ModelSpec(**fields)
    except TwinError as err:
        raise TwinError(f"{p}: {err}") from None


def _llama(cfg: ConfigKeys) -> dict[str, Any]:
    n = cfg.layers()
    window = cfg.window()
    if not cfg.flag("use_sliding_window", True):  # Qwen-style switch, honoured if present
        window = None
    return dict(
        n_attention_layers=n,
        n_mlp_layers=n,
        d_model=cfg.pos("hidden_size"),
        **heads(cfg),
        mlp_d_ff=cfg.pos("intermediate_size"),
        mlp_gated=True,
        vocab_size=cfg.pos("vocab_size"),
        sliding_window=window,
        tie_embeddings=cfg.flag("tie_word_embeddings", False),
    )


def _qwen3(cfg: ConfigKeys) -> dict[str, Any]:
    """Dense Qwen3 (transformers ``Qwen3Config``, ``models/qwen3/modeling_qwen3.py``): a
    Llama layer (GQA attention, SwiGLU MLP, RMSNorm) with an explicit ``head_dim`` (128
    on every published size, not hidden / heads) and an RMSNorm over each query and key
    head before RoPE (``q_norm``/``k_norm``: head_dim weights a layer, an element-wise
    pass over q and k; not priced, as the other norms are not). ``use_sliding_window``
    is false in every published config; when true, transformers windows only layers
    ``>= max_window_layers``, which the twin cannot express per layer, so it is refused.
    """
    if cfg.flag("use_sliding_window", False) and cfg.window() is not None:
        raise cfg.fail(
            "use_sliding_window",
            "is true: Qwen3 then windows only layers >= max_window_layers (not modelled)",
        )
    return _llama(cfg)


def _jamba(cfg: ConfigKeys) -> dict[str, Any]:
    """Jamba (transformers ``JambaConfig``): Mamba-1 layers, attention where
    ``i % attn_layer_period == attn_layer_offset``, MoE where ``i % expert_layer_period ==
    expert_layer_offset`` (``num_experts`` 1 is a plain MLP everywhere)."""
    n = cfg.layers()
    # transformers' JambaConfig.validate_architecture (5.24): each offset below its period.
    a_per, e_per = cfg.pos("attn_layer_period"), cfg.pos("expert_layer_period")
    a_off, e_off = cfg.integer("attn_layer_offset"), cfg.integer("expert_layer_offset")
    for key, off, per in (("attn", a_off, a_per), ("expert", e_off, e_per)):
        if off >= per:
            raise cfg.fail(
                f"{key}_layer_offset", f"({off}) must be below {key}_layer_period ({per})"
            )
    experts = cfg.pos("num_experts")
    moe = [experts > 1 and i % e_per == e_off for i in range(n)]
    layers = tuple(
        ("attention" if i % a_per == a_off else "mamba1") + ("/moe" if moe[i] else "/mlp")
        for i in range(n)
    )
    d_ff = cfg.pos("intermediate_size")
    return dict(
        layers=layers,
        d_model=cfg.pos("hidden_size"),
        **heads(cfg),
        mlp_d_ff=d_ff,
        mlp_gated=True,
        moe_n_experts=experts if any(moe) else 0,
        moe_top_k=cfg.pos("num_experts_per_tok") if any(moe) else 0,
        moe_d_ff=d_ff if any(moe) else 0,
        ssm_d_state=cfg.pos("mamba_d_state"),
        ssm_expand=cfg.pos("mamba_expand"),
        ssm_conv_kernel=cfg.pos("mamba_d_conv"),
        ssm_dt_rank=cfg.auto_or_pos("mamba_dt_rank") or 0,
        vocab_size=cfg.pos("vocab_size"),
        tie_embeddings=cfg.flag("tie_word_embeddings", False),
    )


def _zamba2(cfg: ConfigKeys) -> dict[str, Any]:
    d, n = cfg.pos("hidden_size"), cfg.layers()
    blocks = cfg.kinds("layers_block_type", {"mamba": "mamba", "hybrid": "hybrid"}, n)
    n_hybrid = blocks.count("hybrid")
    n_heads = cfg.pos("num_attention_heads")
    expand = cfg.pos("mamba_expand", 2)
    d_inner = expand * d
    if cfg.opt("n_mamba_heads", None) is not None:
        # transformers' Zamba2Config: mamba_headdim = mamba_expand * hidden // n_mamba_heads.
        mamba_heads = cfg.pos("n_mamba_heads")
        cfg.divides("n_mamba_heads", mamba_heads, d_inner, "mamba_expand x hidden_size")
        ssm_head_dim = d_inner // mamba_heads
    else:
        ssm_head_dim = cfg.pos("mamba_headdim", 64)
    kv = cfg.pos("num_key_value_heads", n_heads)
    cfg.divides("num_key_value_heads", kv, n_heads, "num_attention_heads")
    # Every layer has a Mamba2 mixer; a "hybrid" layer also runs one of
    # num_mem_blocks shared attention+MLP blocks (own KV per layer, shared weights),
    # whose attention reads [hidden, embedding]: head_dim = 2 * hidden / heads.
    return dict(
        n_attention_layers=n_hybrid,
        n_ssm_layers=n,
        n_mlp_layers=n_hybrid,
        d_model=d,
        n_heads=n_heads,
        n_kv_heads=kv,
        head_dim=cfg.pos("attention_head_dim", max(1, 2 * d // n_heads)),
        mlp_d_ff=cfg.pos("intermediate_size", 4 * d),
        mlp_gated=True,
        ssm_d_state=cfg.pos("mamba_d_state"),
        ssm_expand=expand,
        ssm_head_dim=ssm_head_dim,
        ssm_groups=cfg.pos("mamba_ngroups", 1),
        ssm_conv_kernel=cfg.pos("mamba_d_conv", 4),
        ssm_chunk_size=cfg.pos("chunk_size", 256),
        vocab_size=cfg.pos("vocab_size"),
        tie_embeddings=cfg.flag("tie_word_embeddings", True),
        shared_block_copies=cfg.pos("num_mem_blocks", 1) if n_hybrid else None,
    )


_NEMOTRON_KINDS = {
    "M": "ssm",
    "*": "attention",
    "-": "mlp",
    "E": "moe",
    # layers_block_type names (old and new transformers spellings)
    "mamba": "ssm",
    "linear_attention": "ssm",
    "attention": "attention",
    "full_attention": "attention",
    "mlp": "mlp",
    "moe": "moe",
}


def _nemotron_h(cfg: ConfigKeys) -> dict[str, Any]:
    """Nemotron-H: the layers are its ``hybrid_override_pattern`` (one symbol a layer) or
    ``layers_block_type``. A ``num_hidden_layers`` that disagrees is refused: transformers
    5.24's ``NemotronHConfig`` warns and takes the pattern's length, so such a file runs
    another model than the one its layer count names (issue 32)."""
    if cfg.opt("hybrid_override_pattern", None) is not None:
        key = "hybrid_override_pattern"
        symbols = cfg.text(key)
        if len(symbols) > MAX_LAYERS:
            raise cfg.fail(key, f"has {len(symbols):,} layers; at most {MAX_LAYERS:,}")
        unknown = sorted(set(symbols) - set("M*-E"))
        if unknown:
            raise cfg.fail(key, f"has unknown layer symbols {unknown} (expected M, *, -, E)")
        kinds = [_NEMOTRON_KINDS[x] for x in symbols]
    else:
        key = "layers_block_type"
        kinds = cfg.kinds(key, {k: v for k, v in _NEMOTRON_KINDS.items() if len(k) > 1})
        if len(kinds) > MAX_LAYERS:
            raise cfg.fail(key, f"has {len(kinds):,} layers; at most {MAX_LAYERS:,}")
    if not kinds:
        raise cfg.fail(key, "has no layers")
    if cfg.opt("num_hidden_layers", None) is not None and cfg.layers() != len(kinds):
        raise cfg.fail(
            key,
            f"has {len(kinds)} layers but num_hidden_layers is {cfg.layers()}: "
            "one of them is wrong",
        )
    pattern = tuple("mamba2" if k == "ssm" else k for k in kinds)
    d = cfg.pos("hidden_size")
    ssm_heads, ssm_head_dim = cfg.pos("mamba_num_heads"), cfg.pos("mamba_head_dim")
    # The mixer's width is heads x head_dim; `expand` in the file is not used by it.
    d_inner = ssm_heads * ssm_head_dim
    expand: float = d_inner // d if d_inner % d == 0 else d_inner / d
    n_moe = kinds.count("moe")
    return dict(
        layers=pattern,
        d_model=d,
        **heads(cfg, ("head_dim", "attention_head_dim")),
        mlp_d_ff=cfg.pos("intermediate_size"),
        mlp_gated=cfg.text("mlp_hidden_act", "relu2") != "relu2",
        # Shared experts (moe_shared_expert_intermediate_size) are not modelled.
        moe_n_experts=cfg.pos("n_routed_experts") if n_moe else 0,
        moe_top_k=cfg.pos("num_experts_per_tok") if n_moe else 0,
        moe_d_ff=cfg.pos("moe_intermediate_size") if n_moe else 0,
        ssm_d_state=cfg.pos("ssm_state_size"),
        ssm_expand=expand,
        ssm_head_dim=ssm_head_dim,
        ssm_groups=cfg.pos("n_groups"),
        ssm_conv_kernel=cfg.pos("conv_kernel"),
        ssm_chunk_size=cfg.pos("chunk_size", 128),
        vocab_size=cfg.pos("vocab_size"),
        tie_embeddings=cfg.flag("tie_word_embeddings", False),
    )


def _mamba2(cfg: ConfigKeys) -> dict[str, Any]:
    d = cfg.pos("hidden_size")
    expand, head_dim = cfg.pos("expand", 2), cfg.pos("head_dim", 64)
    n_heads = cfg.pos("num_heads", max(1, expand * d // head_dim))
    # transformers 5.24 Mamba2Config.validate_architecture: the heads tile the inner width.
    if n_heads * head_dim != expand * d:
        raise cfg.fail(
            "num_heads",
            f"x head_dim ({n_heads} x {head_dim}) must equal expand x hidden_size ({expand} x {d})",
        )
    return dict(
        n_ssm_layers=cfg.layers(),
        d_model=d,
        ssm_d_state=cfg.pos("state_size"),
        ssm_expand=expand,
        ssm_state_channels=n_heads * head_dim,
        ssm_head_dim=head_dim,
        ssm_groups=cfg.pos("n_groups", 1),
        ssm_conv_kernel=cfg.pos("conv_kernel", 4),
        ssm_chunk_size=cfg.pos("chunk_size", 256),
        vocab_size=cfg.pos("vocab_size"),
        tie_embeddings=cfg.flag("tie_word_embeddings", False),
    )


def _mamba_ssm(cfg: ConfigKeys) -> dict[str, Any]:
    """mamba_ssm's MambaConfig: Mamba2 layers, optional MHA layers and gated MLPs."""
    d, n = cfg.pos("d_model"), cfg.layers("n_layer")
    ssm_cfg, attn_cfg = cfg.obj("ssm_cfg"), cfg.obj("attn_cfg")
    if ssm_cfg.opt("layer", "Mamba1") != "Mamba2":
        raise cfg.fail("ssm_cfg", "must have layer 'Mamba2' (Mamba-1 is not supported)")
    n_attn, d_ff = len(cfg.indices("attn_layer_idx", n)), cfg.integer("d_intermediate", 0)
    vocab, pad = cfg.pos("vocab_size"), cfg.pos("pad_vocab_size_multiple", 8)
    attention: dict[str, Any] = dict(n_heads=0, n_kv_heads=0, head_dim=0)
    if n_attn:
        if attn_cfg.opt("num_heads", None) is None:
            raise cfg.fail("attn_cfg", "must give num_heads when attn_layer_idx is not empty")
        n_heads = attn_cfg.pos("num_heads")
        if attn_cfg.opt("head_dim", None) is None:
            attn_cfg.divides("num_heads", n_heads, d, "d_model")
        kv = attn_cfg.pos("num_heads_kv", n_heads)
        attn_cfg.divides("num_heads_kv", kv, n_heads, "num_heads")
        attention = dict(
            n_heads=n_heads, n_kv_heads=kv, head_dim=attn_cfg.pos("head_dim", d // n_heads)
        )
    return dict(
        n_attention_layers=n_attn,
        n_ssm_layers=n - n_attn,
        n_mlp_layers=n if d_ff else 0,
        d_model=d,
        **attention,
        mlp_d_ff=d_ff,
        mlp_gated=True,  # mamba_ssm's MLP is GatedMLP
        ssm_d_state=ssm_cfg.pos("d_state", 128),
        ssm_expand=ssm_cfg.pos("expand", 2),
        ssm_head_dim=ssm_cfg.pos("headdim", 64),
        ssm_groups=ssm_cfg.pos("ngroups", 1),
        ssm_conv_kernel=ssm_cfg.pos("d_conv", 4),
        ssm_chunk_size=ssm_cfg.pos("chunk_size", 256),
        vocab_size=-(-vocab // pad) * pad,  # the embedding is padded to the multiple
        tie_embeddings=cfg.flag("tie_embeddings", True),
    )


_PARSERS: dict[str, Callable[[ConfigKeys], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _llama,
    "qwen3": _qwen3,
    "jamba": _jamba,
    "zamba2": _zamba2,
    "nemotron_h": _nemotron_h,
    "mamba2": _mamba2,
    "mamba_ssm": _mamba_ssm,
    **HYBRID_PARSERS,
    **MOE_PARSERS,
}
# Multimodal wrappers whose language model is ``text_config``: wrapper -> its model_type.
WRAPPERS = {**HYBRID_WRAPPERS, **MOE_WRAPPERS}
