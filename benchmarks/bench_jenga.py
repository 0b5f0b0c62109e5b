"""Jenga's headline trend with the twin's own numbers (issue 15).

Run: ``python benchmarks/bench_jenga.py [--gpu h100] [--results PATH] [--simulate]``.

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

``--simulate`` measures the same trend end to end in ``twin simulate``: per
model, one replica on the GPU with the shared KV pool (``--cache-gb auto``,
the same memory for both) and the ``jenga`` cache policy, once with
PagedAttention's pages (``kv_allocator=paged``) and once with Jenga's
(``kv_allocator=jenga``), on an offline batch (every request at t=0, as the
paper's throughput runs submit them): ``SIM_REQUESTS`` single-turn requests of
4-16K prompt tokens (uniform, seeded) and 256 output tokens (prefill-bound) or
2048 (decode-bound); the engine's default 256-request batch cap. It reports the
most requests running at once and the throughput (requests/s over the run),
jenga/paged, beside the paper's 1.80x average and 4.92x maximum. Writes
``benchmarks/results/jenga_simulate.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from twin.atomic import write_text_atomic
from twin.engine.run import build_run
from twin.reports.reproduce.jenga_runs import MODELS, PAPER, TRANSFORMER, compare, summarise
from twin.workloads.schema import WorkloadRow
from twin.workloads.writer import WorkloadWriter

RESULTS = Path(__file__).resolve().parent / "results" / "jenga.json"
SIM_RESULTS = RESULTS.with_name("jenga_simulate.json")
SIM_REQUESTS = 400  # requests in the offline batch
SIM_PROMPT = (4000, 16000)  # prompt tokens, uniform
# (name, output tokens per request): prefill-bound and decode-bound batches.
SIM_WORKLOADS = (("prompt-heavy", 256), ("decode-heavy", 2048))


def run(gpu: str) -> dict[str, Any]:
    """The rows (computed by :func:`reports.reproduce.jenga_runs.compare`, which
    ``twin reproduce jenga`` also calls)."""
    return compare(gpu)


def _offline_batch(path: Path, output: int, seed: int = 0) -> Path:
    """``SIM_REQUESTS`` single-turn requests at t=0 (distinct random prompts: no shared prefix)."""
    rng = np.random.default_rng(seed)
    rows = [
        WorkloadRow(
            i,
            0,
            0.0,
            None,
            rng.integers(0, 30000, int(rng.integers(*SIM_PROMPT)), dtype=np.int32),
            False,
            None,
            output,
        )
        for i in range(SIM_REQUESTS)
    ]
    with WorkloadWriter(path, {"generator": "bench_jenga offline batch"}) as w:
        w.write_all(rows)
    return path


def simulate_runs(gpu: str) -> dict[str, Any]:
    """``twin simulate`` with paged and jenga pages on each model (module docstring)."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for (wl_name, output), (name, family) in itertools.product(SIM_WORKLOADS, MODELS):
            workload = Path(tmp) / f"{wl_name}.parquet"
            if not workload.exists():
                _offline_batch(workload, output)
            row: dict[str, Any] = {"workload": wl_name, "model": name, "family": family}
            for allocator in ("paged", "jenga"):
                run = build_run(
                    workload,
                    model=name,
                    gpu=gpu,
                    cache_gb="auto",
                    policy="jenga",
                    kv_allocator=allocator,
                )
                s = run.simulate(Path(tmp) / f"{wl_name}-{name}-{allocator}", force=True)
                pool = s.cluster.replicas[0]["pool"]
                row[f"{allocator}_peak_running"] = pool["peak_running_requests"]
                row[f"{allocator}_req_s"] = s.throughput.requests_per_s
                row[f"{allocator}_out_tok_s"] = s.throughput.output_tokens_per_s
                row[f"{allocator}_preemptions"] = s.preemption.preemptions if s.preemption else 0
                row["pool_gb"] = pool["bytes"] / 1e9
            row["running_ratio"] = row["jenga_peak_running"] / row["paged_peak_running"]
            row["throughput_ratio"] = row["jenga_req_s"] / row["paged_req_s"]
            rows.append(row)
            print(
                f"{wl_name:<13} {name:<16} {family:<22} {row['pool_gb']:>7.1f} "
                f"{row['paged_peak_running']:>8} {row['jenga_peak_running']:>8} "
                f"{row['paged_req_s']:>9.2f} {row['jenga_req_s']:>9.2f} "
                f"{row['throughput_ratio']:>7.2f}x",
                flush=True,
            )
    hetero = [r["throughput_ratio"] for r in rows if r["family"] != TRANSFORMER]
    summary = {
        "throughput_mean_heterogeneous": sum(hetero) / len(hetero),
        "throughput_max": max(hetero),
        "transformer_unchanged": all(
            r["throughput_ratio"] == 1.0 for r in rows if r["family"] == TRANSFORMER
        ),
    }
    return {"gpu": gpu, "rows": rows, "summary": summary}


def main_simulate(gpu: str, results: Path) -> None:
    outputs = " or ".join(str(o) for _, o in SIM_WORKLOADS)
    print(
        f"twin simulate, one {gpu} replica, shared pool, -p jenga, {SIM_REQUESTS} requests at "
        f"t=0 ({SIM_PROMPT[0]:,}-{SIM_PROMPT[1]:,} prompt, {outputs} output tokens)"
    )
    print(
        f"{'workload':<13} {'model':<16} {'family':<22} {'pool GB':>7} {'run pgd':>8} "
        f"{'run jng':>8} {'req/s pgd':>9} {'req/s jng':>9} {'ratio':>8}"
    )
    out = simulate_runs(gpu)
    out["python"] = platform.python_version()
    out["paper"] = PAPER
    summary = out["summary"]
    print(
        f"\n{'':<28} {'paper':>8} {'twin':>8}\n"
        f"{'throughput, mean (hetero)':<28} {PAPER['throughput_mean']:>7.2f}x "
        f"{summary['throughput_mean_heterogeneous']:>7.2f}x\n"
        f"{'throughput, max':<28} {PAPER['throughput_max']:>7.2f}x "
        f"{summary['throughput_max']:>7.2f}x\n"
        f"{'plain Transformer unchanged':<28} {'yes':>8} "
        f"{'yes' if summary['transformer_unchanged'] else 'no':>8}"
    )
    results.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(results, json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {results}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100", help="GPU (HBM size) and its shipped profile")
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument(
        "--simulate",
        action="store_true",
        help="measure jenga vs paged pages end to end in twin simulate (slower)",
    )
    args = parser.parse_args()
    if args.simulate:
        main_simulate(args.gpu, args.results or SIM_RESULTS)
        return
    args.results = args.results or RESULTS
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
