"""``twin models``: list the preset model shapes and show what one costs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from twin import precision as px
from twin.cli.common import (
    KvDtypeOption,
    ModelSetOption,
    PrecisionOption,
    console,
    format_bytes,
    model_file,
    print_json,
)
from twin.errors import TwinError
from twin.model import FLOP_KINDS, ModelSpec
from twin.precision import with_precision
from twin.presets import PRESETS, override_model, resolve_model

app = typer.Typer(
    help=(
        "Model shapes: layer mix, KV and SSM-state bytes, weights, prefill FLOPs.\n\n"
        "Example:\n\n  twin models list"
    ),
    no_args_is_help=True,
)

# Prompt lengths at which `show` reports FLOPs per prefill token.
SHOW_LENGTHS = (1024, 8192, 32768)


def _layers(m: ModelSpec) -> str:
    """``A/S/M`` with ``(E)`` MoE layers when present."""
    mix = f"{m.n_attention_layers}/{m.n_ssm_layers}/{m.n_mlp_layers}"
    return f"{mix}({m.n_moe_layers})" if m.n_moe_layers else mix


def _flops_per_token(m: ModelSpec, lengths: tuple[int, ...] = SHOW_LENGTHS) -> dict[str, Any]:
    """Prefill FLOPs from scratch divided by the prompt length, by layer kind."""
    out: dict[str, Any] = {}
    for n in lengths:
        f = m.prefill_flops(n, 0)
        row = {k: f[k] / n for k in FLOP_KINDS}
        row["total"] = f.total / n
        out[str(n)] = row
    return out


@app.command("list")
def list_models_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List the preset models with their cache and weight sizes.

    Layers are attention/SSM/MLP, with MoE layers in brackets.

    Example:

      twin models list
    """
    if as_json:
        print_json([m.to_dict() for m in PRESETS.values()])
        return
    table = Table(title="Preset models")
    table.add_column("name", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    for col in ("layers A/S/M(E)", "d_model", "KV B/token", "SSM ckpt", "weights GB"):
        table.add_column(col, justify="right", no_wrap=True)
    for m in PRESETS.values():
        table.add_row(
            m.name,
            m.kind,
            _layers(m),
            str(m.d_model),
            f"{m.kv_bytes_per_token:,}",
            format_bytes(m.ssm_checkpoint_bytes) if m.n_ssm_layers else "-",
            f"{m.weight_bytes / 1e9:.1f}",
        )
    console.print(table)


@app.command("show")
def show_cmd(
    name: str | None = typer.Argument(
        None,
        help="A preset name (see `twin models list`) or a Hugging Face config.json.",
        callback=model_file,
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        help="A Hugging Face config.json to read instead of a preset.",
        callback=model_file,
    ),
    model_set: ModelSetOption = [],  # noqa: B006 (typer reads the default)
    precision: PrecisionOption = None,
    kv_dtype: KvDtypeOption = None,
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
) -> None:
    """Show one model: layer mix, cache and weight bytes, prefill FLOPs per token.

    FLOPs per token are a full prefill of 1K, 8K and 32K tokens divided by the length.

    Example:

      twin models show marconi-hybrid-7b

      twin models show qwen3.5-9b

      twin models show --config path/to/config.json --json

      twin models show path/to/config.json

      twin models show marconi-hybrid-7b --model-set ssm_d_state=16 --model-set n_ssm_layers=32

      twin models show llama-3-8b --precision fp8 --kv-dtype fp8
    """
    if (name is None) == (config is None):
        raise TwinError("give either a preset NAME or --config PATH (exactly one)")
    m = (
        override_model(ModelSpec.from_hf_config(config), model_set)
        if config is not None
        else resolve_model(str(name), model_set)
    )
    m = with_precision(m, precision, kv_dtype)
    flops = _flops_per_token(m)
    if as_json:
        print_json({"model": m.to_dict(), "prefill_flops_per_token": flops})
        return
    console.print(f"[bold]{m.name}[/] ({m.kind})  source: {m.source or '-'}", highlight=False)
    console.print(f"layers: {m.pattern}", highlight=False, markup=False)
    if not px.is_default(m):
        console.print(f"precision: {px.describe(m)}", highlight=False, markup=False)

    mix = Table(title="Layer mix", show_header=True)
    for col in ("attention", "ssm", "mlp", "moe", "d_model", "vocab"):
        mix.add_column(col, justify="right")
    mix.add_row(
        *(
            str(v)
            for v in (
                m.n_attention_layers,
                m.n_ssm_layers,
                m.n_mlp_layers,
                m.n_moe_layers,
                m.d_model,
                m.vocab_size,
            )
        )
    )
    console.print(mix)

    sizes = Table(title="Sizes", show_header=False)
    sizes.add_column("what")
    sizes.add_column("value", justify="right")
    kinds = m.mixer_counts
    if kinds.get("attention") or kinds.get("swa"):
        gate = ", output gate" if m.attn_output_gate else ""
        gate += ", q/k norms over all heads" if m.qk_norm_across_heads else ""
        sizes.add_row(
            "attention",
            f"{m.n_heads} heads, {m.n_kv_heads} kv heads, head dim {m.head_dim}{gate}",
        )
    if kinds.get("mla"):
        q = f"q latent {m.q_lora_rank}" if m.q_lora_rank else "q_proj"
        sizes.add_row(
            "MLA",
            f"{m.n_heads} heads, {q}, kv latent {m.kv_lora_rank} + rope "
            f"{m.qk_rope_head_dim}, qk nope {m.qk_nope_head_dim}, v {m.v_head_dim}",
        )
        if m.index_n_heads:
            sizes.add_row(
                "  sparse-attention indexer",
                f"{m.index_n_heads} heads x {m.index_head_dim} (launches priced, weights not)",
            )
    if m.n_attention_layers:
        sizes.add_row("KV bytes / token", f"{m.kv_bytes_per_token:,}")
        if "swa" in kinds:
            sizes.add_row(
                f"  of which swa (window {m.sliding_window})",
                f"{m.kv_bytes_per_token_of('swa'):,}",
            )
    if kinds.get("mamba2") or kinds.get("mamba1"):
        sizes.add_row(
            "SSM",
            f"N {m.ssm_d_state}, d_inner {m.d_inner}, state channels "
            f"{m.state_channels}, {m.n_ssm_heads} heads, groups {m.ssm_groups}",
        )
    if kinds.get("gdn"):
        sizes.add_row(
            "Gated DeltaNet",
            f"{m.gdn_k_heads} qk heads x {m.gdn_head_k_dim}, {m.gdn_v_heads} v heads x "
            f"{m.gdn_head_v_dim}, conv {m.gdn_conv_kernel}",
        )
    if m.n_ssm_layers:
        for kind in ("mamba1", "mamba2", "gdn"):
            if kinds.get(kind):
                per = m.state_bytes_of(kind) // kinds[kind]
                sizes.add_row(f"{kind} state bytes / layer", f"{per:,}")
        ckpt = m.ssm_checkpoint_bytes
        sizes.add_row("state bytes / checkpoint", f"{ckpt:,} ({format_bytes(ckpt)})")
    if m.n_moe_layers:
        shared = f", shared expert {m.moe_shared_d_ff}" if m.moe_shared_d_ff else ""
        sizes.add_row(
            "MoE",
            f"{m.moe_n_experts} experts, top {m.moe_top_k}, expert d_ff {m.moe_d_ff}{shared}",
        )
    sizes.add_row("parameters", f"{m.n_params:,}")
    if m.mtp_layers:
        sizes.add_row(f"  MTP modules ({m.mtp_layers}), apart", f"{m.mtp_params:,}")
    label = "weight bytes" if px.is_default(m) else f"weight bytes ({m.precision})"
    sizes.add_row(label, f"{m.weight_bytes:,} ({format_bytes(m.weight_bytes)})")
    console.print(sizes)

    ft = Table(title="Prefill GFLOP per token (from scratch)")
    ft.add_column("prompt", justify="right")
    for col in (*FLOP_KINDS, "total"):
        ft.add_column(col, justify="right")
    for n, row in flops.items():
        ft.add_row(n, *(f"{row[k] / 1e9:.2f}" for k in (*FLOP_KINDS, "total")))
    console.print(ft)
