"""Jenga against PagedAttention pages in the twin's allocators: the one place it is computed.

``twin reproduce jenga`` (:mod:`reports.reproduce.jenga`) and
``benchmarks/bench_jenga.py`` (whose docstring states the paper's numbers)
both call :func:`compare` and :func:`summarise`.

Per model preset in :data:`MODELS` and request length in :data:`LENGTHS`: the
KV pool is what one GPU has left after the weights at vLLM's default
``gpu_memory_utilization``; :class:`twin.memory.PagedAllocator` and
:class:`twin.memory.JengaAllocator` each take as many requests of that length
as fit (:func:`twin.memory.fit_requests`); a row records the counts, the share
of the pool holding data, and the decode tokens/s of each batch on the GPU's
shipped profile (each mixer kind priced by its own kernel).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twin.memory import JengaAllocator, PagedAllocator, fit_requests, kinds_of
from twin.presets import get_model

# Zhang et al., SOSP 2025 (arXiv 2503.18292), abstract: vs PagedAttention-style pages on vLLM.
PAPER = {"throughput_mean": 1.80, "throughput_max": 4.92, "utilisation_gain_max": 0.796}
LENGTHS = (1000, 4000, 16000)  # tokens per request (prompt + output so far)
MEMORY_UTILIZATION = 0.9  # vLLM's default gpu_memory_utilization
TRANSFORMER = "Transformer"
MODELS = (
    ("gemma-3-4b", "sliding window + full"),
    ("gpt-oss-20b", "sliding window + full"),
    ("nemotron-h-8b", "Mamba hybrid"),
    ("qwen3.5-9b", "GDN hybrid"),
    ("falcon-h1-7b", "Mamba hybrid"),
    ("llama-3-8b", TRANSFORMER),
)
# More requests of one length than any pool here holds: fit_requests stops at the first refusal.
MAX_REQUESTS = 1_000_000


def compare(
    gpu: str = "h100",
    lengths: Sequence[int] = LENGTHS,
    models: Sequence[tuple[str, str]] = MODELS,
) -> dict[str, Any]:
    """One row per (model, length): requests that fit, utilisation and decode throughput under
    both allocators. Models whose weights leave no pool on ``gpu`` are skipped."""
    from twin.costmodel import CostModel
    from twin.costmodel.profile_store import device_memory_bytes, load_profile

    profile = load_profile(gpu)
    memory = device_memory_bytes(profile)  # the driver's total, as simulate sizes pools
    rows = []
    for name, family in models:
        model = get_model(name)
        kinds = kinds_of(model)
        pool = int(memory * MEMORY_UTILIZATION - model.weight_bytes)
        if pool <= 0:
            continue
        cm = CostModel(model, profile, 1)
        for tokens in lengths:
            paged, jenga = PagedAllocator(kinds, pool), JengaAllocator(kinds, pool)
            n_p = fit_requests(paged, [tokens] * MAX_REQUESTS)
            n_j = fit_requests(jenga, [tokens] * MAX_REQUESTS)
            t_p, t_j = _throughput(cm, n_p, tokens), _throughput(cm, n_j, tokens)
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


def _throughput(cm: Any, batch: int, tokens: int) -> float:
    """Decode tokens/s of ``batch`` sequences of ``tokens`` context (each mixer kind
    priced with its own kernel: sliding-window layers read their window)."""
    return batch / float(cm.decode([tokens] * batch)) if batch else 0.0


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The paper's headline numbers from :func:`compare`'s rows (heterogeneous models only
    for the gains; the Transformer rows for "unchanged")."""
    hetero = [r for r in rows if r["family"] != TRANSFORMER]
    ratios = [r["throughput_ratio"] for r in hetero if r["throughput_ratio"]]
    fits = [r["jenga_requests"] / r["paged_requests"] for r in hetero if r["paged_requests"]]
    gains = [r["jenga_utilisation"] - r["paged_utilisation"] for r in rows]
    plain = [r for r in rows if r["family"] == TRANSFORMER]
    return {
        "throughput_mean_heterogeneous": sum(ratios) / len(ratios) if ratios else None,
        "throughput_max": max(ratios, default=None),
        "fit_mean_heterogeneous": sum(fits) / len(fits) if fits else None,
        "fit_max": max(fits, default=None),
        "utilisation_gain_max": max(gains, default=None),
        "transformer_unchanged": bool(plain)
        and all(r["paged_requests"] == r["jenga_requests"] for r in plain),
    }


def run(gpu: str = "h100", lengths: Sequence[int] = LENGTHS) -> dict[str, Any]:
    """:func:`compare` and its :func:`summarise` (a computation of ``twin reproduce jenga``)."""
    out = compare(gpu, lengths)
    return {**out, "summary": summarise(out["rows"])}
