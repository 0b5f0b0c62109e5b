"""Jenga's headline trend with the twin's own numbers (issue 15).

Run: ``python benchmarks/bench_jenga.py [--gpu h100] [--results PATH]``.

The paper (Zhang et al., "Jenga: Effective Memory Management for Serving LLM
with Heterogeneity", SOSP 2025, arXiv 2503.18292) reports, on vLLM, serving
throughput 1.80x higher on average and up to 4.92x, and GPU memory utilisation
up to 79.6% better, than PagedAttention's one-size pages on heterogeneous
models; a plain Transformer is unchanged.

The twin: for each model, the KV pool left on one GPU after the weights (90%
of HBM, vLLM's default ``gpu_memory_utilization``), filled with requests of
one length by :class:`twin.memory.PagedAllocator` and by
:class:`twin.memory.JengaAllocator`: how many fit, the share of the pool
holding data (utilisation), and the decode throughput of that batch
(sequences / the cost model's decode step on the GPU's shipped profile).
Models: Gemma-3-12B (5 sliding-window layers of 1024 tokens per full one) and
gpt-oss-20b (alternating 128-token windows and full attention), two Mamba
hybrids (Nemotron-H-8B, Zamba2-7B) and Llama-3-8B. The cost model has no
per-layer windows yet, so a windowed model's decode step is priced with every
attention layer reading the layers' mean context (window-limited layers read
their window): exact for an attention-decode price linear in the keys read,
as the memory-bound kernel is. Writes ``benchmarks/results/jenga.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any

from twin.atomic import write_text_atomic
from twin.costmodel import CostModel
from twin.costmodel.profile import load_profile
from twin.hardware import get_gpu
from twin.memory import JengaAllocator, LayerKind, PagedAllocator, fit_requests, kinds_of
from twin.model import ModelSpec
from twin.presets import get_model

RESULTS = Path(__file__).resolve().parent / "results" / "jenga.json"
PAPER = {"throughput_mean": 1.80, "throughput_max": 4.92, "utilisation_gain_max": 0.796}
LENGTHS = (1000, 4000, 16000)  # tokens per request (prompt + output so far)
MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization


def _kv_per_layer(kv_heads: int, head_dim: int) -> int:
    return 2 * kv_heads * head_dim * 2  # K and V, bf16


# google/gemma-3-12b-it config.json: hidden_size 3840, num_hidden_layers 48,
# num_attention_heads 16, num_key_value_heads 8, head_dim 256, intermediate_size
# 15360, vocab 262208, sliding_window 1024, one global layer in 6 (40 local, 8 global).
GEMMA3 = ModelSpec(
    name="gemma-3-12b",
    n_attention_layers=48,
    n_mlp_layers=48,
    d_model=3840,
    n_heads=16,
    n_kv_heads=8,
    head_dim=256,
    mlp_d_ff=15360,
    vocab_size=262208,
)
GEMMA3_KINDS = [
    LayerKind("swa", token_bytes=40 * _kv_per_layer(8, 256), window=1024),
    LayerKind("attention", token_bytes=8 * _kv_per_layer(8, 256)),
]
# openai/gpt-oss-20b config.json: hidden_size 2880, num_hidden_layers 24 alternating
# sliding_attention (window 128) and full_attention, 64 heads, 8 KV heads, head_dim 64,
# 32 local experts, 4 per token, intermediate_size 2880, vocab 201088.
GPT_OSS = ModelSpec(
    name="gpt-oss-20b",
    n_attention_layers=24,
    n_moe_layers=24,
    d_model=2880,
    n_heads=64,
    n_kv_heads=8,
    head_dim=64,
    moe_n_experts=32,
    moe_top_k=4,
    moe_d_ff=2880,
    vocab_size=201088,
)
GPT_OSS_KINDS = [
    LayerKind("swa", token_bytes=12 * _kv_per_layer(8, 64), window=128),
    LayerKind("attention", token_bytes=12 * _kv_per_layer(8, 64)),
]


def _models() -> list[tuple[ModelSpec, list[LayerKind], str]]:
    out = [
        (GEMMA3, GEMMA3_KINDS, "sliding window + full"),
        (GPT_OSS, GPT_OSS_KINDS, "sliding window + full"),
    ]
    for name in ("nemotron-h-8b", "zamba2-7b"):
        spec = get_model(name)
        out.append((spec, kinds_of(spec), "Mamba hybrid"))
    llama = get_model("llama-3-8b")
    out.append((llama, kinds_of(llama), "Transformer"))
    return out


def _mean_context(kinds: list[LayerKind], tokens: int) -> int:
    """Keys an attention layer reads on average, windows applied (weighted by the kinds'
    bytes, which follow their layer counts when every layer's KV has one size)."""
    attn = [k for k in kinds if not k.is_state]
    total = sum(k.token_bytes for k in attn)
    return round(sum(k.token_bytes * k.tokens_needed(tokens, 0) for k in attn) / total)


def _throughput(cm: CostModel, batch: int, context: int) -> float:
    """Decode tokens/s of ``batch`` sequences reading ``context`` keys a layer."""
    return batch / float(cm.decode([context] * batch)) if batch else 0.0


def run(gpu: str) -> dict[str, Any]:
    spec_gpu = get_gpu(gpu)
    profile = load_profile(gpu)
    rows = []
    for model, kinds, family in _models():
        pool = int(spec_gpu.hbm_bytes * MEMORY_UTILIZATION - model.weight_bytes)
        if pool <= 0:
            continue
        cm = CostModel(model, profile, 1)
        for tokens in LENGTHS:
            paged, jenga = PagedAllocator(kinds, pool), JengaAllocator(kinds, pool)
            n_p = fit_requests(paged, [tokens] * 1_000_000)
            n_j = fit_requests(jenga, [tokens] * 1_000_000)
            context = _mean_context(kinds, tokens)
            t_p, t_j = _throughput(cm, n_p, context), _throughput(cm, n_j, context)
            rows.append(
                {
                    "model": model.name,
                    "family": family,
                    "tokens": tokens,
                    "pool_gb": pool / 1e9,
                    "paged_requests": n_p,
                    "jenga_requests": n_j,
                    "paged_utilisation": paged.used_data_bytes / pool,
                    "jenga_utilisation": jenga.used_data_bytes / pool,
                    "paged_tok_s": t_p,
                    "jenga_tok_s": t_j,
                    "throughput_ratio": t_j / t_p if t_p else None,
                    "large_page_bytes": jenga.large_bytes,
                    "small_page_bytes": jenga.small_bytes,
                    "paged_page_bytes": paged.page_bytes,
                }
            )
    return {"gpu": gpu, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100", help="GPU (HBM size) and its shipped profile")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    out = run(args.gpu)
    out["python"] = platform.python_version()
    out["paper"] = PAPER
    rows = out["rows"]
    print(f"Jenga vs PagedAttention pages, one {args.gpu}, pool = 90% HBM - weights")
    print(
        f"{'model':<16} {'family':<22} {'tokens':>7} {'fit paged':>10} {'fit jenga':>10} "
        f"{'util paged':>11} {'util jenga':>11} {'throughput':>11}"
    )
    for r in rows:
        ratio = r["throughput_ratio"]
        print(
            f"{r['model']:<16} {r['family']:<22} {r['tokens']:>7,} {r['paged_requests']:>10,} "
            f"{r['jenga_requests']:>10,} {r['paged_utilisation']:>10.1%} "
            f"{r['jenga_utilisation']:>10.1%} {'-' if ratio is None else f'{ratio:.2f}x':>11}"
        )
    hetero = [
        r["throughput_ratio"]
        for r in rows
        if r["family"] != "Transformer" and r["throughput_ratio"]
    ]
    gains = [r["jenga_utilisation"] - r["paged_utilisation"] for r in rows]
    summary = {
        "throughput_mean_heterogeneous": sum(hetero) / len(hetero),
        "throughput_max": max(hetero),
        "utilisation_gain_max": max(gains),
        "transformer_unchanged": all(
            r["paged_requests"] == r["jenga_requests"] for r in rows if r["family"] == "Transformer"
        ),
    }
    out["summary"] = summary
    print(
        f"\n{'':<28} {'paper':>8} {'twin':>8}\n"
        f"{'throughput, mean (hetero)':<28} {PAPER['throughput_mean']:>7.2f}x "
        f"{summary['throughput_mean_heterogeneous']:>7.2f}x\n"
        f"{'throughput, max':<28} {PAPER['throughput_max']:>7.2f}x "
        f"{summary['throughput_max']:>7.2f}x\n"
        f"{'memory utilisation, max gain':<28} {PAPER['utilisation_gain_max']:>8.1%} "
        f"{summary['utilisation_gain_max']:>8.1%}\n"
        f"{'plain Transformer unchanged':<28} {'yes':>8} "
        f"{'yes' if summary['transformer_unchanged'] else 'no':>8}"
    )
    args.results.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.results, json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {args.results}")


if __name__ == "__main__":
    main()
