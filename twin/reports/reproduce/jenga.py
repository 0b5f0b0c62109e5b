"""Jenga (Zhang et al., SOSP 2025, arXiv 2503.18292): the comparison the twin reruns.

One computation, :func:`reports.reproduce.jenga_runs.run` (the same code
``benchmarks/bench_jenga.py`` runs): per model and request length, the twin's
:class:`~twin.memory.JengaAllocator` against PagedAttention-style one-size pages
(:class:`~twin.memory.PagedAllocator`) in the KV pool one GPU leaves after the
weights. It is allocator arithmetic and one cost-model decode step per point,
seconds in all, so ``--quick`` runs the same plan as the full form.
"""

from __future__ import annotations

from typing import Any

from twin.reports.reproduce import jenga_runs as jr
from twin.reports.reproduce.base import (
    Claim,
    Computation,
    ComputedPaper,
    Results,
    magnitude,
    pct,
    times,
    trend,
)

GPU = "h100"
FUNCTION = "twin.reports.reproduce.jenga_runs:run"
COMMAND = f"python benchmarks/bench_jenga.py --gpu {GPU}"

NOTES = [
    "The twin compares the allocators alone: how many requests of one length fit the KV "
    "pool one GPU leaves after the weights (90% of HBM, vLLM's default "
    "gpu_memory_utilization), the share of the pool holding data, and the decode "
    "throughput of that batch priced by the cost model. The paper measured end-to-end "
    "serving on vLLM with its own traces; throughput here follows from batch size only "
    "(no queueing, no prefix caching).",
    "Models are the twin's presets: Gemma-3-4B and gpt-oss-20b (sliding window + full "
    "attention), Nemotron-H-8B and Falcon-H1-7B (Mamba2 hybrids), Qwen3.5-9B (gated "
    "delta net hybrid), and Llama-3-8B as the plain Transformer; the paper's set differs "
    "(it includes vision models and larger ones).",
    "Rerun: `python benchmarks/bench_jenga.py --gpu h100` prints every row of the tables "
    "below (it calls the same function).",
]


def _computation() -> Computation:
    return Computation("jenga-vs-paged", FUNCTION, (("gpu", GPU), ("lengths", jr.LENGTHS)))


def _table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    head = ["model", "family", "tokens", "fit paged", "fit Jenga", "util paged", "util Jenga"]
    head.append("throughput")
    return head, [
        [
            r["model"],
            r["family"],
            f"{r['tokens']:,}",
            f"{r['paged_requests']:,}",
            f"{r['jenga_requests']:,}",
            pct(r["paged_utilisation"]),
            pct(r["jenga_utilisation"]),
            times(r["throughput_ratio"]),
        ]
        for r in rows
    ]


class Jenga(ComputedPaper):
    name = "jenga"
    title = "Jenga: Effective Memory Management for Serving LLM with Heterogeneity"
    citation = "Zhang et al., SOSP 2025 (arXiv 2503.18292)"

    def computations(self, quick: bool) -> list[Computation]:
        return [_computation()]

    def notes(self) -> list[str]:
        return NOTES

    def claims(self, results: Results, quick: bool) -> list[Claim]:
        got = results.computed(_computation())
        rows, s = got["rows"], got["summary"]
        hetero = [r for r in rows if r["family"] != jr.TRANSFORMER]
        plain = [r for r in rows if r["family"] == jr.TRANSFORMER]
        return [
            self.claim_throughput(hetero, s),
            self.claim_utilisation(hetero, s),
            self.claim_transformer(plain),
        ]

    def claim_throughput(self, hetero: list[dict[str, Any]], s: dict[str, Any]) -> Claim:
        mean, top = s["throughput_mean_heterogeneous"], s["throughput_max"]
        checks = [
            trend(
                "Jenga fits at least as many requests as paged on every heterogeneous point",
                bool(hetero) and all(r["jenga_requests"] >= r["paged_requests"] for r in hetero),
            ),
            trend("throughput higher on average on heterogeneous models", (mean or 0) > 1),
            magnitude("mean throughput gain", jr.PAPER["throughput_mean"], mean),
            magnitude("largest throughput gain", jr.PAPER["throughput_max"], top),
        ]
        return Claim(
            1,
            "More requests fit, more throughput, on heterogeneous models",
            "abstract; evaluation",
            f"throughput {jr.PAPER['throughput_mean']:.2f}x on average, up to "
            f"{jr.PAPER['throughput_max']:.2f}x, vs PagedAttention-style pages (vLLM)",
            f"throughput {times(mean)} on average, up to {times(top)}; requests that fit "
            f"{times(s['fit_mean_heterogeneous'])} on average, up to {times(s['fit_max'])} "
            f"({len(hetero)} model x length points, one {GPU})",
            checks,
            [COMMAND],
            notes=[
                "Requests that fit grow more than throughput: a larger decode batch of long "
                "requests is priced memory-bound by the cost model, so doubling the batch "
                "does not double tokens/s."
            ],
            table=_table(hetero),
        )

    def claim_utilisation(self, hetero: list[dict[str, Any]], s: dict[str, Any]) -> Claim:
        gain = s["utilisation_gain_max"]
        checks = [
            trend(
                "Jenga's pool holds at least as much data as paged on every heterogeneous point",
                bool(hetero)
                and all(r["jenga_utilisation"] >= r["paged_utilisation"] for r in hetero),
            ),
            magnitude("largest utilisation gain", jr.PAPER["utilisation_gain_max"], gain),
        ]
        worst = min(hetero, key=lambda r: r["paged_utilisation"], default=None)
        where = "" if worst is None else f" (paged lowest: {worst['model']} at {worst['tokens']:,})"
        return Claim(
            2,
            "Better memory utilisation",
            "abstract; evaluation",
            f"GPU memory utilisation up to {pct(jr.PAPER['utilisation_gain_max'])} better",
            f"up to {pct(gain)} more of the pool holding data{where}",
            checks,
            [COMMAND],
        )

    def claim_transformer(self, plain: list[dict[str, Any]]) -> Claim:
        same = bool(plain) and all(
            r["paged_requests"] == r["jenga_requests"]
            and r["paged_utilisation"] == r["jenga_utilisation"]
            for r in plain
        )
        fits = ", ".join(f"{r['tokens']:,}: {r['jenga_requests']:,}" for r in plain)
        return Claim(
            3,
            "No change on a plain Transformer",
            "evaluation",
            "a plain Transformer gets the same memory and throughput",
            f"{plain[0]['model'] if plain else '-'}: same requests and utilisation under both "
            f"({fits} requests by length)"
            if same
            else "differs (see table)",
            [trend("same requests and utilisation under both allocators", same)],
            [COMMAND],
            table=_table(plain),
        )
