"""The checks a ``ModelSpec`` runs when it is made: one clear error naming the bad field.

Kept apart from ``twin.model`` (what a spec is and what it derives) because the rules
are long: every field's type and sign, then what each layer kind needs.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import TYPE_CHECKING

from twin.errors import TwinError
from twin.limits import MAX_CONFIG_INT, MAX_LAYERS

if TYPE_CHECKING:
    from twin.model import ModelSpec


def check_name(name: object) -> None:
    """Refuse a model name that is not a non-empty string (checked before anything else)."""
    if not isinstance(name, str) or not name:
        raise TwinError(f"model name must be a non-empty string (got {name!r})")


# Fields counting layers (bounded by MAX_LAYERS); every other integer by MAX_CONFIG_INT.
_LAYER_COUNTS = (
    "n_attention_layers",
    "n_ssm_layers",
    "n_mlp_layers",
    "n_moe_layers",
    "mtp_layers",
    "shared_block_copies",
)


def check_pattern_size(spec: ModelSpec) -> None:
    """Refuse a layer pattern longer than ``MAX_LAYERS`` before anything is derived from it
    (a ``--model-set layers=...`` of millions of entries; issue 32)."""
    layers = spec.layers
    if isinstance(layers, tuple | list) and len(layers) > MAX_LAYERS:
        raise TwinError(
            f"model {spec.name!r}: field 'layers' has {len(layers):,} layers; at most "
            f"{MAX_LAYERS:,} (twin.limits.MAX_LAYERS)"
        )


def check_fields(spec: ModelSpec) -> None:
    """Refuse a spec whose fields are of the wrong type, negative or inconsistent."""

    def need(cond: bool, field: str, what: str) -> None:
        if not cond:
            value = getattr(spec, field)
            raise TwinError(f"model {spec.name!r}: field {field!r} {what} (got {value!r})")

    for fld in fields(spec):
        value = getattr(spec, fld.name)
        if fld.name in (
            "mlp_gated",
            "tie_embeddings",
            "attn_output_gate",
            "qk_norm_across_heads",
        ):
            need(isinstance(value, bool), fld.name, "must be true or false")
        elif fld.name in ("name", "source", "ssm_expand", "layers"):
            continue
        elif fld.name in ("precision", "moe_precision", "kv_dtype"):
            continue  # checked below, against twin.precision
        elif value is not None:
            need(
                isinstance(value, int) and not isinstance(value, bool),
                fld.name,
                "must be an integer",
            )
            need(value >= 0, fld.name, "must not be negative")
            # Bounded before any layer list, weight or byte count is built (issue 32: 10^7
            # layers hung, widths near 2^63 overflow): twin.limits says why each bound.
            high, why = (
                (MAX_LAYERS, "MAX_LAYERS")
                if fld.name in _LAYER_COUNTS
                else (MAX_CONFIG_INT, "MAX_CONFIG_INT")
            )
            need(value <= high, fld.name, f"must be at most {high:,} (twin.limits.{why})")
    need(
        spec.n_attention_layers + spec.n_ssm_layers <= MAX_LAYERS,
        "n_ssm_layers" if spec.n_ssm_layers > spec.n_attention_layers else "n_attention_layers",
        f"with the other sequence-mixer layers must be at most {MAX_LAYERS:,} layers "
        "(twin.limits.MAX_LAYERS)",
    )
    need(
        spec.n_mlp_layers + spec.n_moe_layers <= MAX_LAYERS,
        "n_moe_layers" if spec.n_moe_layers > spec.n_mlp_layers else "n_mlp_layers",
        f"with the other FFN layers must be at most {MAX_LAYERS:,} layers (twin.limits.MAX_LAYERS)",
    )
    need(isinstance(spec.source, str), "source", "must be a string")
    _check_precision(spec)
    for f in ("d_model", "vocab_size", "dtype_bytes", "state_dtype_bytes"):
        need(getattr(spec, f) > 0, f, "must be positive")
    need(
        spec.n_attention_layers + spec.n_ssm_layers > 0,
        "n_attention_layers",
        "and n_ssm_layers cannot both be 0 (no sequence mixer)",
    )
    need(
        spec.sliding_window is None or spec.sliding_window > 0,
        "sliding_window",
        "must be positive or null",
    )
    need(
        spec.shared_block_copies is None or spec.shared_block_copies > 0,
        "shared_block_copies",
        "must be positive or null",
    )
    kinds = spec.mixer_counts
    if kinds.get("attention") or kinds.get("swa"):
        for f in ("n_heads", "n_kv_heads", "head_dim"):
            need(getattr(spec, f) > 0, f, "must be positive for a model with attention")
        need(spec.n_heads % spec.n_kv_heads == 0, "n_kv_heads", "must divide n_heads")
    if kinds.get("mla"):
        for f in ("n_heads", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            need(getattr(spec, f) > 0, f, "must be positive for a model with mla layers")
    if spec.n_mlp_layers:
        need(spec.mlp_d_ff > 0, "mlp_d_ff", "must be positive for a model with MLP layers")
    if spec.n_moe_layers:
        for f in ("moe_n_experts", "moe_top_k", "moe_d_ff"):
            need(getattr(spec, f) > 0, f, "must be positive for a model with MoE layers")
        need(spec.moe_top_k <= spec.moe_n_experts, "moe_top_k", "must be <= moe_n_experts")
        # Group-limited routing (twin.costmodel.moe_layout): the experts in equal groups.
        need(spec.moe_n_group >= 1, "moe_n_group", "must be at least 1")
        need(spec.moe_n_experts % spec.moe_n_group == 0, "moe_n_group", "must divide moe_n_experts")
        need(
            1 <= spec.moe_topk_group <= spec.moe_n_group,
            "moe_topk_group",
            "must be 1 to moe_n_group",
        )
    if "swa" in kinds:
        need(spec.sliding_window is not None, "sliding_window", "must be set for swa layers")
    if kinds.get("gdn"):
        for f in (
            "gdn_k_heads",
            "gdn_v_heads",
            "gdn_head_k_dim",
            "gdn_head_v_dim",
            "gdn_conv_kernel",
            "gdn_chunk_size",
        ):
            need(getattr(spec, f) > 0, f, "must be positive for a model with gdn layers")
        need(
            spec.gdn_v_heads % spec.gdn_k_heads == 0,
            "gdn_k_heads",
            "must divide gdn_v_heads",
        )
    if spec.index_n_heads or spec.index_head_dim:
        need(kinds.get("mla", 0) > 0, "index_n_heads", "needs mla layers (an MLA indexer)")
        for f in ("index_n_heads", "index_head_dim"):
            need(getattr(spec, f) > 0, f, "must be positive for a model with an indexer")
        need(spec.index_topk >= 0, "index_topk", "must be >= 0")
    if kinds.get("mamba1") or kinds.get("mamba2"):
        e = spec.ssm_expand
        need(
            isinstance(e, int | float) and not isinstance(e, bool) and e > 0,
            "ssm_expand",
            "must be a positive number",
        )
        need(
            math.isfinite(e) and e * spec.d_model <= MAX_CONFIG_INT,
            "ssm_expand",
            f"times d_model must be at most {MAX_CONFIG_INT:,} channels "
            "(twin.limits.MAX_CONFIG_INT)",
        )
        need(
            abs(e * spec.d_model - round(e * spec.d_model)) < 1e-6,
            "ssm_expand",
            "times d_model must be a whole number of channels",
        )
        for f in (
            "ssm_d_state",
            "ssm_head_dim",
            "ssm_groups",
            "ssm_conv_kernel",
            "ssm_chunk_size",
        ):
            need(getattr(spec, f) > 0, f, "must be positive for a model with SSM layers")
        need(
            spec.ssm_state_channels is None or spec.ssm_state_channels > 0,
            "ssm_state_channels",
            "must be positive or null",
        )
        need(
            spec.state_channels % spec.ssm_head_dim == 0,
            "ssm_head_dim",
            f"must divide the state channels ({spec.state_channels})",
        )


def _check_precision(spec: ModelSpec) -> None:
    """``precision``, ``moe_precision`` and ``kv_dtype`` name formats ``twin.precision`` knows."""
    from twin.precision import KV_DTYPES, WEIGHT_PRECISIONS

    for field, valid, optional in (
        ("precision", WEIGHT_PRECISIONS, False),
        ("moe_precision", WEIGHT_PRECISIONS, True),
        ("kv_dtype", KV_DTYPES, False),
    ):
        value = getattr(spec, field)
        if value is None and optional:
            continue
        if value not in valid:
            raise TwinError(
                f"model {spec.name!r}: field {field!r} must be one of {', '.join(valid)} "
                f"(got {value!r})"
            )
