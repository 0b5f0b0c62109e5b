"""Prompt Cache's headline trend with the twin's own numbers (issue 15).

Run: ``python benchmarks/bench_prompt_cache.py [--gpu a100-80gb] [--results PATH]``.

The paper (Gim et al., "Prompt Cache: Modular Attention Reuse for Low-Latency
Inference", MLSys 2024, arXiv 2311.04934) serves Llama-2-7B with LongBench
document prompts: sec. 5.2 reports TTFT 5-10x lower with the modules in GPU
memory and 1.5-3x lower from host (CPU) memory on its GPUs; sec. 5.4 shows the
advantage growing with the prompt length (the cached part's cost is quadratic
in it, the uncached question's is not).

The twin: ``doc-qa`` workloads (one ~5K-token document per request, a short
question; sessions far apart so nothing queues) simulated by the engine on
the ``llama-7b-transformer`` preset (Llama-2-7B's shape) with the GPU's shipped
profile, under ``vanilla`` (everything computed) and ``prompt-cache`` with GPU
and host storage. The speedup is the mean TTFT of the requests whose module
was cached, vanilla over prompt-cache, on the same rows. Then the same at
document lengths 1K-16K (sec. 5.4), and on the Marconi hybrid to show how much
of the saving survives the recurrent layers' recompute. Writes
``benchmarks/results/prompt-cache.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import tempfile
from pathlib import Path
from typing import Any

from twin.atomic import write_text_atomic
from twin.reports.reproduce.prompt_cache_runs import PAPER_GPU, PAPER_HOST, recipe, speedups
from twin.reports.reproduce.runner import generate

RESULTS = Path(__file__).resolve().parent / "results" / "prompt-cache.json"


def _workload(path: Path, doc_tokens: int, docs: tuple[int, int] = (1, 1)) -> Path:
    generate(recipe(path.stem, doc_tokens, docs), path)
    return path


def _speedups(path: Path, model: str, gpu: str) -> dict[str, Any]:
    """Computed by :func:`reports.reproduce.prompt_cache_runs.speedups` (``twin reproduce
    prompt-cache`` calls it too)."""
    return speedups(str(path), model, gpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="a100-80gb", help="shipped profile (an A100-class GPU)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    results: dict[str, Any] = {"gpu": args.gpu, "python": platform.python_version()}
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        five_k = _workload(d / "doc-5k.parquet", 5000)
        main_run = _speedups(five_k, "llama-7b-transformer", args.gpu)
        results["sec_5_2"] = main_run
        print(f"Prompt Cache sec. 5.2: Llama-2-7B, ~5K-token document prompts, {args.gpu}")
        print(f"{'storage':<8} {'paper':>10} {'twin':>8} {'TTFT vanilla':>14} {'TTFT cached':>12}")
        for storage, paper in (("gpu", PAPER_GPU), ("host", PAPER_HOST)):
            r = main_run[storage]
            print(
                f"{storage:<8} {f'{paper[0]:g}-{paper[1]:g}x':>10} {r['speedup']:>7.1f}x "
                f"{r['ttft_vanilla_s'] * 1e3:>11.1f} ms {r['ttft_prompt_cache_s'] * 1e3:>9.1f} ms"
            )
        print("\nPrompt Cache sec. 5.4: speedup grows with the prompt length (paper: yes)")
        print(f"{'document':>9} {'GPU':>7} {'host':>7}")
        by_length = {}
        for n in (1000, 2000, 4000, 8000, 16000):
            r = _speedups(_workload(d / f"doc-{n}.parquet", n), "llama-7b-transformer", args.gpu)
            by_length[n] = {s: r[s]["speedup"] for s in ("gpu", "host")}
            print(f"{n:>9,} {r['gpu']['speedup']:>6.1f}x {r['host']['speedup']:>6.1f}x")
        results["sec_5_4"] = by_length
        gpu_curve = [by_length[n]["gpu"] for n in sorted(by_length)]
        results["sec_5_4_grows"] = all(b > a for a, b in itertools.pairwise(gpu_curve))
        # Several documents per request in varying order: most sit out of prefix position.
        multi = _workload(d / "doc-multi.parquet", 5000, docs=(1, 3))
        hybrid = _speedups(multi, "marconi-hybrid-7b", args.gpu)
        results["hybrid_transformer_same_workload"] = _speedups(
            multi, "llama-7b-transformer", args.gpu
        )
        results["hybrid"] = hybrid
        dense = results["hybrid_transformer_same_workload"]
        print(
            "\nThe twin's extension: 1-3 ~5K-token documents in varying order; on the hybrid "
            "(marconi-hybrid-7b) the recurrent layers recompute modules out of prefix position"
        )
        print(f"{'storage':<8} {'Llama-2-7B':>11} {'hybrid':>8} {'hybrid FLOPs saving kept':>26}")
        for storage in ("gpu", "host"):
            r = hybrid[storage]
            kept = r["saving_kept"]
            print(
                f"{storage:<8} {dense[storage]['speedup']:>10.1f}x {r['speedup']:>7.1f}x "
                f"{'-' if kept is None else f'{kept:.0%}':>26}"
            )
    args.results.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.results, json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"\nwrote {args.results}")


if __name__ == "__main__":
    main()
