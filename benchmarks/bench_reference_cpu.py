"""The shipped CPU profile against this machine: predicted / measured prefill time.

Run: ``python benchmarks/bench_reference_cpu.py [--tokens 300] [--repeats 5]``.
Times a prefill of ``--tokens`` tokens of ``tiny-hybrid`` on the reference
executor (PyTorch, one CPU thread) and compares it with what the cost model
prices from the shipped ``cpu`` profile. A ratio far from 1 (outside 0.1-10)
means the shipped profile does not describe this machine, or the machine was
loaded while timing: this was a test until it failed twice under load
(issue 17), and a wall-clock comparison belongs here, not in the suite.
Writes ``benchmarks/results/reference_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.presets import get_model
from twin.reference.executor import ExecutorConfig, ReferenceExecutor

RESULT = Path(__file__).parent / "results" / "reference_cpu.json"


def bench(tokens: int, repeats: int) -> dict[str, float]:
    """Measured and predicted seconds of one prefill, and their ratio."""
    spec = get_model("tiny-hybrid")
    ex = ReferenceExecutor(spec, ExecutorConfig(repeats=repeats))
    served = ex.serve(np.arange(tokens, dtype=np.int32), np.arange(4, dtype=np.int32))
    predicted = CostModel(spec, load_profile("cpu")).prefill(tokens, 0)
    return {
        "tokens": tokens,
        "measured_s": served.service_s,
        "predicted_s": predicted,
        "predicted_over_measured": predicted / served.service_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    result = bench(args.tokens, args.repeats)
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
