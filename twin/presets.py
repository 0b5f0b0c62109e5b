"""Named model shapes: the paper's hybrid, public hybrids, Transformers, a pure SSM, tiny shapes.

Each preset cites where its numbers come from. Values were checked against the
public ``config.json`` files (field names in brackets) where one exists.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from twin.errors import TwinError
from twin.model import ModelSpec

_PRESETS: list[ModelSpec] = [
    # Marconi (Pan et al., MLSys 2025, arXiv 2411.19379), section 3: the 7B hybrid
    # with 4 attention, 24 Mamba2 and 28 MLP layers, d=4096, N=128, fp16.
    ModelSpec(
        name="marconi-hybrid-7b",
        n_attention_layers=4,
        n_ssm_layers=24,
        n_mlp_layers=28,
        d_model=4096,
        n_heads=32,
        n_kv_heads=32,
        head_dim=128,
        mlp_d_ff=4 * 4096,
        mlp_gated=False,
        ssm_d_state=128,
        ssm_expand=2,
        # The paper's artifact counts an SSM layer's state as d_model x N elements
        # (plus conv (expand*d + 2N) x 4), not d_inner x N: we follow its accounting
        # so that one 10K-token sequence with a checkpoint every 16 tokens is 17.4 GB.
        ssm_state_channels=4096,
        ssm_head_dim=64,
        ssm_groups=1,
        ssm_conv_kernel=4,
        ssm_chunk_size=256,
        # The paper gives no vocabulary; Llama-2's 32000 is assumed (weights only).
        vocab_size=32000,
        source="Marconi, arXiv 2411.19379 sec. 3 (7B hybrid: 4 Attn, 24 SSM, 28 MLP)",
    ),
    # The Transformer Marconi compares against: Llama-2-7B
    # (meta-llama/Llama-2-7b-hf config.json: hidden_size 4096, num_hidden_layers 32,
    # num_attention_heads 32, num_key_value_heads 32, intermediate_size 11008, vocab 32000).
    ModelSpec(
        name="llama-7b-transformer",
        n_attention_layers=32,
        n_mlp_layers=32,
        d_model=4096,
        n_heads=32,
        n_kv_heads=32,
        head_dim=128,
        mlp_d_ff=11008,
        mlp_gated=True,
        vocab_size=32000,
        source="meta-llama/Llama-2-7b-hf config.json; Marconi sec. 3 comparison Transformer",
    ),
    # meta-llama/Meta-Llama-3-8B config.json: hidden_size 4096, num_hidden_layers 32,
    # num_attention_heads 32, num_key_value_heads 8, intermediate_size 14336, vocab 128256.
    ModelSpec(
        name="llama-3-8b",
        n_attention_layers=32,
        n_mlp_layers=32,
        d_model=4096,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        mlp_d_ff=14336,
        mlp_gated=True,
        vocab_size=128256,
        source="meta-llama/Meta-Llama-3-8B config.json",
    ),
    # ai21labs/AI21-Jamba-1.5-Mini config.json (same layout as Jamba-v0.1): 32 layers,
    # attention at layer i % attn_layer_period(8) == attn_layer_offset(4) -> 4 layers,
    # MoE at i % expert_layer_period(2) == expert_layer_offset(1) -> 16 layers of 16
    # experts top-2; hidden 4096, intermediate 14336, 32 heads, 8 kv heads, vocab 65536.
    # Its SSM layers are Mamba-1 (mamba_d_state 16, mamba_expand 2, mamba_d_conv 4): we
    # model them as Mamba2 layers of the same d_inner and N (state = d_inner x N, as in
    # Mamba-1; the conv also counts B/C channels, +2N of 8192, < 0.4%).
    ModelSpec(
        name="jamba-1.5-mini",
        n_attention_layers=4,
        n_ssm_layers=28,
        n_mlp_layers=16,
        n_moe_layers=16,
        d_model=4096,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        mlp_d_ff=14336,
        mlp_gated=True,
        moe_n_experts=16,
        moe_top_k=2,
        moe_d_ff=14336,
        ssm_d_state=16,
        ssm_expand=2,
        ssm_head_dim=64,
        ssm_groups=1,
        ssm_conv_kernel=4,
        vocab_size=65536,
        source="ai21labs/AI21-Jamba-1.5-Mini config.json; arXiv 2408.12570",
    ),
    # Zyphra/Zamba2-7B config.json: 81 layers, all with a Mamba2 mixer; 13 of them
    # ("hybrid" in layers_block_type: layers 6, 11, 17, 23, ..., 77) also run a shared
    # attention+MLP block. Counted as 13 attention + 13 MLP layers (each keeps its own
    # KV), with num_mem_blocks=2 distinct weight copies. The shared attention reads
    # [hidden, embedding] (2 x 3584 wide): head_dim = 2*3584/32 = 224, MHA (32 kv heads);
    # we count its projections from d_model, which undercounts those FLOPs. The per-layer
    # LoRA adapters are left out. Mamba2: mamba_d_state 64, mamba_expand 2,
    # mamba_headdim 64 (112 heads), mamba_ngroups 2, conv 4; MLP 14336 gated; vocab 32000.
    # The config has no tie_word_embeddings key, so transformers' default (tied) applies.
    ModelSpec(
        name="zamba2-7b",
        n_attention_layers=13,
        n_ssm_layers=81,
        n_mlp_layers=13,
        d_model=3584,
        n_heads=32,
        n_kv_heads=32,
        head_dim=224,
        mlp_d_ff=14336,
        mlp_gated=True,
        ssm_d_state=64,
        ssm_expand=2,
        ssm_head_dim=64,
        ssm_groups=2,
        ssm_conv_kernel=4,
        ssm_chunk_size=256,
        vocab_size=32000,
        tie_embeddings=True,
        shared_block_copies=2,
        source="Zyphra/Zamba2-7B config.json; arXiv 2411.15242",
    ),
    # nvidia/Nemotron-H-8B-Base-8K config.json: hybrid_override_pattern
    # "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-" (52 layers: 24 Mamba2,
    # 4 attention, 24 MLP); hidden 4096; 32 heads, 8 kv heads, attention_head_dim 128;
    # intermediate_size 21504 with relu2 (squared ReLU, ungated); ssm_state_size 128,
    # mamba_num_heads 128 x mamba_head_dim 64 (= 8192 = 2 x 4096), n_groups 8,
    # conv_kernel 4, chunk_size 128; vocab 131072.
    ModelSpec(
        name="nemotron-h-8b",
        n_attention_layers=4,
        n_ssm_layers=24,
        n_mlp_layers=24,
        d_model=4096,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        mlp_d_ff=21504,
        mlp_gated=False,
        ssm_d_state=128,
        ssm_expand=2,
        ssm_head_dim=64,
        ssm_groups=8,
        ssm_conv_kernel=4,
        ssm_chunk_size=128,
        vocab_size=131072,
        source="nvidia/Nemotron-H-8B-Base-8K config.json; arXiv 2504.03624",
    ),
    # state-spaces/mamba2-2.7b config.json (mamba_ssm format): d_model 2560, n_layer 64,
    # ssm_cfg {layer: Mamba2} with mamba_ssm defaults (d_state 128, expand 2, headdim 64,
    # ngroups 1, d_conv 4, chunk_size 256), d_intermediate 0 (no MLP), vocab 50277
    # padded to a multiple of 16 = 50288, tied embeddings.
    ModelSpec(
        name="mamba2-2.7b",
        n_ssm_layers=64,
        d_model=2560,
        ssm_d_state=128,
        ssm_expand=2,
        ssm_head_dim=64,
        ssm_groups=1,
        ssm_conv_kernel=4,
        ssm_chunk_size=256,
        vocab_size=50288,
        tie_embeddings=True,
        source="state-spaces/mamba2-2.7b config.json; arXiv 2405.21060",
    ),
    # Tiny shapes for tests: fast, but exercising GQA, SSM heads and chunking.
    ModelSpec(
        name="tiny-hybrid",
        n_attention_layers=1,
        n_ssm_layers=3,
        n_mlp_layers=4,
        d_model=64,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        mlp_d_ff=256,
        ssm_d_state=16,
        ssm_expand=2,
        ssm_head_dim=16,
        ssm_groups=1,
        ssm_conv_kernel=4,
        ssm_chunk_size=16,
        vocab_size=512,
        source="test shape",
    ),
    ModelSpec(
        name="tiny-transformer",
        n_attention_layers=4,
        n_mlp_layers=4,
        d_model=64,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        mlp_d_ff=256,
        vocab_size=512,
        source="test shape",
    ),
    ModelSpec(
        name="tiny-ssm",
        n_ssm_layers=4,
        d_model=64,
        ssm_d_state=16,
        ssm_expand=2,
        ssm_head_dim=16,
        ssm_groups=1,
        ssm_conv_kernel=4,
        ssm_chunk_size=16,
        vocab_size=512,
        tie_embeddings=True,
        source="test shape",
    ),
]

PRESETS: dict[str, ModelSpec] = {m.name: m for m in _PRESETS}


def list_models() -> list[str]:
    """Names of the preset models, in registry order."""
    return list(PRESETS)


def get_model(name: str) -> ModelSpec:
    """The preset called ``name``; a ``TwinError`` listing the valid names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise TwinError(f"unknown model {name!r}; valid names: {', '.join(PRESETS)}") from None


def resolve_model(name: str, overrides: Sequence[str] = ()) -> ModelSpec:
    """A preset name, or the path of a Hugging Face ``config.json``, with ``--model-set`` fields.

    ``overrides`` are ``KEY=VALUE`` strings (see :func:`override_model`).
    """
    path = Path(name)
    if path.suffix == ".json" and path.is_file():
        spec = ModelSpec.from_hf_config(path)
    else:
        spec = get_model(name)
    return override_model(spec, overrides)


_FLAG = "--model-set"
_FIXED = ("name", "source")  # what a --model-set may not change


def override_model(spec: ModelSpec, overrides: Sequence[str]) -> ModelSpec:
    """``spec`` with fields replaced from ``KEY=VALUE`` strings (the ``--model-set`` flag).

    E.g. ``n_ssm_layers=32``, ``ssm_d_state=16``, ``ssm_state_channels=4096``:
    the paper's layer-mix and state-size sweeps (Marconi sec. 5.3) without
    writing a config. The result is named ``base[k=v,...]`` so every output
    says which shape ran; the model's own checks apply to the new values.
    """
    if not overrides:
        return spec
    hints = typing.get_type_hints(ModelSpec)
    fields = [f.name for f in dataclasses.fields(ModelSpec) if f.name not in _FIXED]
    changes: dict[str, Any] = {}
    for pair in overrides:
        key, sep, text = (part.strip() for part in pair.partition("="))
        if not sep or not key:
            raise TwinError(f"{_FLAG} {pair!r}: expected FIELD=VALUE, e.g. {_FLAG} n_ssm_layers=32")
        if key not in fields:
            raise TwinError(
                f"{_FLAG} {pair!r}: unknown model field {key!r}; valid: {', '.join(fields)}"
            )
        changes[key] = _field_value(key, text, hints[key], pair)
    label = ",".join(f"{k}={text}" for k, text in (p.split("=", 1) for p in overrides))
    return dataclasses.replace(spec, name=f"{spec.name}[{label.replace(' ', '')}]", **changes)


def _field_value(key: str, text: str, hint: object, pair: str) -> object:
    """``text`` as the type of ModelSpec field ``key``; a TwinError naming the flag otherwise."""
    args = typing.get_args(hint)
    if text.lower() == "none" and type(None) in args:
        return None
    kind = next((a for a in args if a is not type(None)), hint) if args else hint
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        name = getattr(kind, "__name__", str(kind))
        raise TwinError(f"{_FLAG} {pair!r}: {key} takes a {name}, not {text!r}") from None
    return text
