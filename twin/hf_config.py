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
from twin.hf_hybrids import WRAPPERS
from twin.model import ModelSpec

_MISSING = object()


class _Config:
    """A config dict that names the file and key in every error."""

    def __init__(self, data: dict[str, Any], path: Path) -> None:
        self.data, self.path = data, path

    def req(self, key: str) -> Any:
        if key not in self.data or self.data[key] is None:
            raise TwinError(f"{self.path}: missing key {key!r}")
        return self.data[key]

    def opt(self, key: str, default: Any) -> Any:
        value = self.data.get(key, _MISSING)
        return default if value is _MISSING or value is None else value

    def int(self, key: str, default: Any = _MISSING) -> int:
        value = self.req(key) if default is _MISSING else self.opt(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise TwinError(f"{self.path}: key {key!r} must be an integer (got {value!r})")
        return value

    def fail(self, key: str, why: str) -> TwinError:
        return TwinError(f"{self.path}: key {key!r} {why}")


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
        data = json.loads(p.read_text())
    except FileNotFoundError:
        raise TwinError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TwinError(f"{p}: not a readable JSON file ({err})") from None
    if not isinstance(data, dict):
        raise TwinError(f"{p}: expected a JSON object at the top level")
    cfg = _Config(data, p)
    model_type = data.get("model_type")
    if model_type is None and "ssm_cfg" in data:
        model_type = "mamba_ssm"
    if model_type in WRAPPERS:  # a multimodal wrapper: the language model is text_config
        text = data.get("text_config")
        if not isinstance(text, dict):
            raise TwinError(f"{p}: model_type {model_type!r} needs a 'text_config' object")
        cfg, model_type = _Config(text, p), WRAPPERS[model_type]
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


def _attention(cfg: _Config, head_dim_keys: tuple[str, ...] = ("head_dim",)) -> dict[str, Any]:
    """Heads, kv heads (default: MHA) and head dim (default: hidden / heads)."""
    d, heads = cfg.int("hidden_size"), cfg.int("num_attention_heads")
    head_dim = next((cfg.int(k) for k in head_dim_keys if cfg.opt(k, None) is not None), None)
    return dict(
        n_heads=heads,
        n_kv_heads=cfg.int("num_key_value_heads", heads),
        head_dim=head_dim if head_dim is not None else d // heads,
    )


def _llama(cfg: _Config) -> dict[str, Any]:
    n = cfg.int("num_hidden_layers")
    window = cfg.opt("sliding_window", None)
    if cfg.opt("use_sliding_window", True) is False:  # Qwen-style switch, honoured if present
        window = None
    return dict(
        n_attention_layers=n,
        n_mlp_layers=n,
        d_model=cfg.int("hidden_size"),
        **_attention(cfg),
        mlp_d_ff=cfg.int("intermediate_size"),
        mlp_gated=True,
        vocab_size=cfg.int("vocab_size"),
        sliding_window=window,
        tie_embeddings=bool(cfg.opt("tie_word_embeddings", False)),
    )


def _qwen3(cfg: _Config) -> dict[str, Any]:
    """Dense Qwen3 (transformers ``Qwen3Config``, ``models/qwen3/modeling_qwen3.py``): a
    Llama layer (GQA attention, SwiGLU MLP, RMSNorm) with an explicit ``head_dim`` (128
    on every published size, not hidden / heads) and an RMSNorm over each query and key
    head before RoPE (``q_norm``/``k_norm``: head_dim weights a layer, an element-wise
    pass over q and k; not priced, as the other norms are not). ``use_sliding_window``
    is false in every published config; when true, transformers windows only layers
    ``>= max_window_layers``, which the twin cannot express per layer, so it is refused.
    """
    if cfg.opt("use_sliding_window", False) is True and cfg.opt("sliding_window", None):
        raise cfg.fail(
            "use_sliding_window",
            "is true: Qwen3 then windows only layers >= max_window_layers (not modelled)",
        )
    return _llama(cfg)


def _jamba(cfg: _Config) -> dict[str, Any]:
    """Jamba (transformers ``JambaConfig``): Mamba-1 layers, attention where
    ``i % attn_layer_period == attn_layer_offset``, MoE where ``i % expert_layer_period ==
    expert_layer_offset`` (``num_experts`` 1 is a plain MLP everywhere)."""
    n = cfg.int("num_hidden_layers")
    a_per, a_off = cfg.int("attn_layer_period"), cfg.int("attn_layer_offset")
    e_per, e_off = cfg.int("expert_layer_period"), cfg.int("expert_layer_offset")
    experts = cfg.int("num_experts")
    moe = [experts > 1 and i % e_per == e_off for i in range(n)]
    layers = tuple(
        ("attention" if i % a_per == a_off else "mamba1") + ("/moe" if moe[i] else "/mlp")
        for i in range(n)
    )
    dt_rank = cfg.opt("mamba_dt_rank", "auto")
    d_ff = cfg.int("intermediate_size")
    return dict(
        layers=layers,
        d_model=cfg.int("hidden_size"),
        **_attention(cfg),
        mlp_d_ff=d_ff,
        mlp_gated=True,
        moe_n_experts=experts if any(moe) else 0,
        moe_top_k=cfg.int("num_experts_per_tok") if any(moe) else 0,
        moe_d_ff=d_ff if any(moe) else 0,
        ssm_d_state=cfg.int("mamba_d_state"),
        ssm_expand=cfg.int("mamba_expand"),
        ssm_conv_kernel=cfg.int("mamba_d_conv"),
        ssm_dt_rank=0 if dt_rank == "auto" else cfg.int("mamba_dt_rank"),
        vocab_size=cfg.int("vocab_size"),
        tie_embeddings=bool(cfg.opt("tie_word_embeddings", False)),
    )


def _zamba2(cfg: _Config) -> dict[str, Any]:
    d, n = cfg.int("hidden_size"), cfg.int("num_hidden_layers")
    blocks = cfg.req("layers_block_type")
    if not isinstance(blocks, list) or len(blocks) != n:
        raise cfg.fail("layers_block_type", f"must be a list of {n} layer types")
    bad = sorted({b for b in blocks if b not in ("mamba", "hybrid")})
    if bad:
        raise cfg.fail("layers_block_type", f"has unknown layer types {bad}")
    n_hybrid = blocks.count("hybrid")
    heads = cfg.int("num_attention_heads")
    expand = cfg.int("mamba_expand", 2)
    d_inner = expand * d
    if cfg.opt("n_mamba_heads", None) is not None:
        ssm_head_dim = d_inner // cfg.int("n_mamba_heads")
    else:
        ssm_head_dim = cfg.int("mamba_headdim", 64)
    # Every layer has a Mamba2 mixer; a "hybrid" layer also runs one of
    # num_mem_blocks shared attention+MLP blocks (own KV per layer, shared weights),
    # whose attention reads [hidden, embedding]: head_dim = 2 * hidden / heads.
    return dict(
        n_attention_layers=n_hybrid,
        n_ssm_layers=n,
        n_mlp_layers=n_hybrid,
        d_model=d,
        n_heads=heads,
        n_kv_heads=cfg.int("num_key_value_heads", heads),
        head_dim=cfg.int("attention_head_dim", 2 * d // heads),
        mlp_d_ff=cfg.int("intermediate_size", 4 * d),
        mlp_gated=True,
        ssm_d_state=cfg.int("mamba_d_state"),
        ssm_expand=expand,
        ssm_head_dim=ssm_head_dim,
        ssm_groups=cfg.int("mamba_ngroups", 1),
        ssm_conv_kernel=cfg.int("mamba_d_conv", 4),
        ssm_chunk_size=cfg.int("chunk_size", 256),
        vocab_size=cfg.int("vocab_size"),
        tie_embeddings=bool(cfg.opt("tie_word_embeddings", True)),
        shared_block_copies=cfg.int("num_mem_blocks", 1) if n_hybrid else None,
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


def _nemotron_h(cfg: _Config) -> dict[str, Any]:
    if cfg.opt("hybrid_override_pattern", None) is not None:
        key, layers = "hybrid_override_pattern", list(cfg.req("hybrid_override_pattern"))
    else:
        key, layers = "layers_block_type", cfg.req("layers_block_type")
        if not isinstance(layers, list):
            raise cfg.fail(key, "must be a list of layer types")
    unknown = sorted({str(x) for x in layers if x not in _NEMOTRON_KINDS})
    if unknown:
        raise cfg.fail(key, f"has unknown layer symbols {unknown} (expected M, *, -, E)")
    kinds = [_NEMOTRON_KINDS[x] for x in layers]
    pattern = tuple("mamba2" if k == "ssm" else k for k in kinds)
    d = cfg.int("hidden_size")
    ssm_heads, ssm_head_dim = cfg.int("mamba_num_heads"), cfg.int("mamba_head_dim")
    # The mixer's width is heads x head_dim; `expand` in the file is not used by it.
    d_inner = ssm_heads * ssm_head_dim
    expand: float = d_inner // d if d_inner % d == 0 else d_inner / d
    n_moe = kinds.count("moe")
    return dict(
        layers=pattern,
        d_model=d,
        **_attention(cfg, ("head_dim", "attention_head_dim")),
        mlp_d_ff=cfg.int("intermediate_size"),
        mlp_gated=cfg.opt("mlp_hidden_act", "relu2") != "relu2",
        # Shared experts (moe_shared_expert_intermediate_size) are not modelled.
        moe_n_experts=cfg.int("n_routed_experts") if n_moe else 0,
        moe_top_k=cfg.int("num_experts_per_tok") if n_moe else 0,
        moe_d_ff=cfg.int("moe_intermediate_size") if n_moe else 0,
        ssm_d_state=cfg.int("ssm_state_size"),
        ssm_expand=expand,
        ssm_head_dim=ssm_head_dim,
        ssm_groups=cfg.int("n_groups"),
        ssm_conv_kernel=cfg.int("conv_kernel"),
        ssm_chunk_size=cfg.int("chunk_size", 128),
        vocab_size=cfg.int("vocab_size"),
        tie_embeddings=bool(cfg.opt("tie_word_embeddings", False)),
    )


def _mamba2(cfg: _Config) -> dict[str, Any]:
    d = cfg.int("hidden_size")
    expand, head_dim = cfg.int("expand", 2), cfg.int("head_dim", 64)
    return dict(
        n_ssm_layers=cfg.int("num_hidden_layers"),
        d_model=d,
        ssm_d_state=cfg.int("state_size"),
        ssm_expand=expand,
        ssm_state_channels=cfg.int("num_heads", expand * d // head_dim) * head_dim,
        ssm_head_dim=head_dim,
        ssm_groups=cfg.int("n_groups", 1),
        ssm_conv_kernel=cfg.int("conv_kernel", 4),
        ssm_chunk_size=cfg.int("chunk_size", 256),
        vocab_size=cfg.int("vocab_size"),
        tie_embeddings=bool(cfg.opt("tie_word_embeddings", False)),
    )


def _mamba_ssm(cfg: _Config) -> dict[str, Any]:
    """mamba_ssm's MambaConfig: Mamba2 layers, optional MHA layers and gated MLPs."""
    d, n = cfg.int("d_model"), cfg.int("n_layer")
    ssm_cfg, attn_cfg = cfg.opt("ssm_cfg", {}), cfg.opt("attn_cfg", {})
    if not isinstance(ssm_cfg, dict) or not isinstance(attn_cfg, dict):
        raise cfg.fail("ssm_cfg", "and 'attn_cfg' must be JSON objects")
    if ssm_cfg.get("layer", "Mamba1") != "Mamba2":
        raise cfg.fail("ssm_cfg", "must have layer 'Mamba2' (Mamba-1 is not supported)")
    attn_idx = cfg.opt("attn_layer_idx", [])
    n_attn, d_ff = len(attn_idx), cfg.int("d_intermediate", 0)
    vocab, pad = cfg.int("vocab_size"), cfg.int("pad_vocab_size_multiple", 8)
    heads = attn_cfg.get("num_heads", 0) if n_attn else 0
    if n_attn and not heads:
        raise cfg.fail("attn_cfg", "must give num_heads when attn_layer_idx is not empty")
    return dict(
        n_attention_layers=n_attn,
        n_ssm_layers=n - n_attn,
        n_mlp_layers=n if d_ff else 0,
        d_model=d,
        n_heads=heads,
        n_kv_heads=attn_cfg.get("num_heads_kv", heads) or 0,
        head_dim=attn_cfg.get("head_dim", d // heads if heads else 0) or 0,
        mlp_d_ff=d_ff,
        mlp_gated=True,  # mamba_ssm's MLP is GatedMLP
        ssm_d_state=ssm_cfg.get("d_state", 128),
        ssm_expand=ssm_cfg.get("expand", 2),
        ssm_head_dim=ssm_cfg.get("headdim", 64),
        ssm_groups=ssm_cfg.get("ngroups", 1),
        ssm_conv_kernel=ssm_cfg.get("d_conv", 4),
        ssm_chunk_size=ssm_cfg.get("chunk_size", 256),
        vocab_size=-(-vocab // pad) * pad,  # the embedding is padded to the multiple
        tie_embeddings=bool(cfg.opt("tie_embeddings", True)),
    )


_PARSERS: dict[str, Callable[[_Config], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _llama,
    "qwen3": _qwen3,
    "jamba": _jamba,
    "zamba2": _zamba2,
    "nemotron_h": _nemotron_h,
    "mamba2": _mamba2,
    "mamba_ssm": _mamba_ssm,
    **HYBRID_PARSERS,
}
