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
Models (the presets, their layer kinds through ``twin.memory.kinds_of``):
Gemma-3-4B (5 sliding-window layers of 1024 tokens per full one), gpt-oss-20b
(alternating 128-token windows and full attention), Nemotron-H-8B and
Falcon-H1-7B (Mamba2 hybrids), Qwen3.5-9B (gated delta net hybrid) and
Llama-3-8B. Writes ``benchmarks/results/jenga.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any

from reports.reproduce.jenga_runs import PAPER, compare, summarise
from twin.atomic import write_text_atomic

RESULTS = Path(__file__).resolve().parent / "results" / "jenga.json"


def run(gpu: str) -> dict[str, Any]:
    """The rows (computed by :func:`reports.reproduce.jenga_runs.compare`, which
    ``twin reproduce jenga`` also calls)."""
    return compare(gpu)


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
    summary = summarise(rows)
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
