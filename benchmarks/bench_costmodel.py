"""How many batch steps per second ``CostModel.step`` prices (the simulator's hot path).

Run: ``python benchmarks/bench_costmodel.py [--model marconi-hybrid-7b] [--gpu h100]
[--results PATH]``.
Steps are drawn like a continuous-batching engine's: 0-2 prefill chunks of up to
512 tokens after up to 16K cached tokens, plus 1-256 decoding sequences with
contexts up to 16K. Prints calls/s for plain floats and for breakdowns, on the
chosen profile and on its datasheet roofline in the same run (the measured
profiles' fitted forms cost more per call), and writes them atomically to
``benchmarks/results/costmodel.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path

from twin.atomic import write_text_atomic
from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.errors import TwinError
from twin.presets import resolve_model

RESULTS = Path(__file__).resolve().parent / "results" / "costmodel.json"


def _steps(n: int, seed: int) -> list[tuple[list[tuple[int, int]], list[int]]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        prefills = [(rng.randint(1, 512), rng.randint(0, 16384)) for _ in range(rng.randint(0, 2))]
        decodes = [rng.randint(1, 16384) for _ in range(rng.randint(1, 256))]
        out.append((prefills, decodes))
    return out


def bench(model: str, gpu: str, tp: int, n: int, seed: int = 0) -> dict[str, float]:
    """Calls per second of ``step`` (float) and ``step(breakdown=True)``."""
    cm = CostModel(resolve_model(model), load_profile(gpu), tp=tp)
    steps = _steps(n, seed)
    rates = {}
    for label, breakdown in (("float", False), ("breakdown", True)):
        start = time.perf_counter()
        for prefills, decodes in steps:
            cm.step(prefills, decodes, breakdown=breakdown)
        rates[label] = n / (time.perf_counter() - start)
    start = time.perf_counter()
    for i in range(n):
        cm.prefill(1 + i % 4096, (i * 37) % 8192)
    rates["prefill"] = n / (time.perf_counter() - start)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="marconi-hybrid-7b")
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("-n", type=int, default=20000)
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args()
    profiles = [args.gpu]
    datasheet = f"{args.gpu.removesuffix('-datasheet')}-datasheet"
    if datasheet != args.gpu:
        try:
            load_profile(datasheet)
            profiles.append(datasheet)
        except TwinError:  # no datasheet twin of this profile: measure the one asked for
            pass
    by_profile = {}
    for gpu in profiles:
        rates = bench(args.model, gpu, args.tp, args.n)
        by_profile[gpu] = {label: round(rate, 1) for label, rate in rates.items()}
        for label, rate in rates.items():
            print(f"{gpu:>16} {label:>10}: {rate:,.0f} calls/s")
    results = {
        "model": args.model,
        "tp": args.tp,
        "steps": args.n,
        "python": platform.python_version(),
        "calls_per_s": by_profile,
    }
    if len(profiles) == 2:
        results["ratio_to_datasheet"] = {
            label: round(by_profile[args.gpu][label] / by_profile[datasheet][label], 3)
            for label in by_profile[args.gpu]
        }
    write_text_atomic(args.results, json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
