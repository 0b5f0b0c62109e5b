"""The measured set's presets against their published sizes, and how much of the
measured set the twin can express (issue 34).

Run: ``python benchmarks/bench_model_bytes.py`` (the coverage part needs the ``twin[aic]``
extra: it reads ``silicon_sample.csv`` from the installed ``aiconfigurator-core``; it is
skipped, and said so, without it). Writes ``benchmarks/results/model-bytes.json``.

Per preset: the twin's parameters (main model; MTP modules apart), weight bytes at the
preset's precision and KV bytes per token, each beside the published figure with its
source and the relative error (target: within 1%). "Published" KV figures are the
formula each engine allocates from the config (no model card states bytes per token):
GQA ``2 x layers x kv_heads x head_dim x 2 B`` (vLLM ``FullAttentionSpec``), MLA
``layers x (kv_lora_rank + qk_rope_head_dim) x 2 B`` (DeepSeek-V2, arXiv 2405.04434,
Table 1: (d_c + d_h^R) l elements), GLM-5 adding its DSA indexer's fp8 key and fp32
scale, ``index_head_dim + 4`` bytes a layer (vLLM's DeepSeek-V3.2 indexer cache).
Coverage: aggregated rows whose model maps to a preset and whose layout the preset can
take (``twin.validate.coverage``), the rest by reason.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from twin.atomic import write_text_atomic
from twin.presets import get_model

OUT = Path(__file__).resolve().parent / "results" / "model-bytes.json"
GIB = 2**30

# (preset, what, published value, source). Parameter counts are the model cards' (or
# technical reports') totals, rounded as published.
PUBLISHED: list[tuple[str, str, float, str]] = [
    ("deepseek-v3", "params", 671e9, "DeepSeek-V3 model card / arXiv 2412.19437: 671B total"),
    (
        "deepseek-v3",
        "params_with_mtp",
        685e9,
        "DeepSeek-V3 model card: 685B = 671B main + 14B MTP module",
    ),
    ("deepseek-r1", "params", 671e9, "DeepSeek-R1 model card: 671B total, 37B activated"),
    ("kimi-k2.5", "params", 1e12, "Kimi-K2.5 model card: 1T total (rounded), 32B activated"),
    ("glm-5", "params", 744e9, "GLM-5 technical report (arXiv 2602.15763), Table: 744B total"),
    ("minimax-m2.5", "params", 229e9, "MiniMaxAI/MiniMax-M2.5 Hugging Face page: 229B params"),
    ("gpt-oss-120b", "params", 116.83e9, "gpt-oss model card (arXiv 2508.10925): 116.83B"),
    (
        "gpt-oss-120b",
        "weight_bytes",
        60.8 * GIB,
        "gpt-oss model card (arXiv 2508.10925): 60.8 GiB checkpoint (mxfp4 experts)",
    ),
    ("qwen3-235b-a22b", "params", 235e9, "Qwen3-235B-A22B model card: 235B total, 22B active"),
    ("qwen3.5-397b-a17b", "params", 397e9, "Qwen3.5-397B-A17B model card: 397B total"),
    ("llama-3.1-70b", "params", 70.6e9, "Llama 3.1 70B Hugging Face page: 70.6B params"),
    ("llama-3.1-8b", "params", 8.03e9, "Llama 3.1 8B Hugging Face page: 8.03B params"),
    ("qwen3-32b", "params", 32.8e9, "Qwen3-32B model card: 32.8B parameters"),
]


def _kv_published(name: str) -> tuple[float, str]:
    """The KV bytes per token an engine allocates for ``name`` from its config, bf16."""
    m = get_model(name)
    mla = m.mixer_counts.get("mla", 0)
    if mla:
        per = (m.kv_lora_rank + m.qk_rope_head_dim) * 2
        if name == "glm-5":  # DSA indexer: fp8 key of index_head_dim 128 + fp32 scale
            return float(mla * (per + 128 + 4)), "config: MLA latent + DSA indexer key cache"
        return float(mla * per), "config; arXiv 2405.04434 Table 1: (d_c + d_h^R) l"
    layers = m.n_attention_layers
    return float(layers * 2 * m.n_kv_heads * m.head_dim * 2), "config: 2 l h_kv d_h x 2 B"


def model_rows() -> list[dict[str, Any]]:
    rows = []
    for name, what, value, source in PUBLISHED:
        m = get_model(name)
        twin = {
            "params": m.n_params,
            "params_with_mtp": m.n_params + m.mtp_params,
            "weight_bytes": m.weight_bytes,
        }[what]
        rows.append(_row(name, what, twin, value, source, m.precision, m.moe_precision))
    for name in dict.fromkeys(n for n, *_ in PUBLISHED):
        m = get_model(name)
        value, source = _kv_published(name)
        rows.append(_row(name, "kv_bytes_per_token", m.kv_bytes_per_token, value, source, "", None))
    return rows


def _row(
    name: str, what: str, twin: float, published: float, source: str, prec: str, moe: str | None
) -> dict[str, Any]:
    error = twin / published - 1
    out = {
        "model": name,
        "what": what,
        "twin": twin,
        "published": published,
        "source": source,
        "error": round(error, 5),
        "within_1pct": abs(error) <= 0.01,
    }
    if what == "weight_bytes":
        out["precision"] = prec + (f", {moe} experts" if moe else "")
    return out


def coverage_part() -> dict[str, Any]:
    try:
        from twin.validate.coverage import coverage
        from twin.validate.silicon import default_csv, read_rows

        path = default_csv()
        rows = read_rows(path)
    except Exception as err:
        return {"skipped": f"silicon_sample.csv not readable ({err})"}
    return {"csv": "aiconfigurator_core/systems/silicon_sample.csv (0.12.0)", **coverage(rows)}


def main() -> None:
    t0 = time.perf_counter()
    rows = model_rows()
    result = {
        "command": "python benchmarks/bench_model_bytes.py",
        "rows": rows,
        "misses": [
            f"{r['model']} {r['what']}: {r['error']:+.2%}" for r in rows if not r["within_1pct"]
        ],
        "coverage": coverage_part(),
        "wall_s": round(time.perf_counter() - t0, 2),
    }
    write_text_atomic(OUT, json.dumps(result, indent=2) + "\n")
    for r in rows:
        flag = "" if r["within_1pct"] else "  MISS"
        print(
            f"{r['model']:20s} {r['what']:20s} {r['twin']:>18,.0f} "
            f"{r['published']:>18,.0f} {r['error']:+8.3%}{flag}"
        )
    cov = result["coverage"]
    if "skipped" in cov:
        print(cov["skipped"])
    else:
        share = f"{cov['expressible']}/{cov['aggregated_rows']} ({cov['share']:.1%})"
        print(f"coverage: {share} aggregated rows")
        for reason, n in cov["not_expressible"].items():
            print(f"  {n:5d}  {reason}")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
