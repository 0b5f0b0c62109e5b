"""Issue 31, helper vllm-moe (session 24): the aiperf prompt-pool what-if of docs/decisions.md
("the aiperf rows' repeated prompts: refuted by the fit rows"), a diagnosis and no rule.

    PYTHONPATH=. python benchmarks/results/vllm-moe/aiperf_pool.py SAMPLE.csv SPLIT OUT.csv

Reruns the sample's aiconfigurator aiperf rows of ``SPLIT`` with the workload aiperf's
defaults would send (aiperf 0.1.1-0.13.0: 100 synthetic dataset entries, requests taking
them in shuffled cycles, the same 100 in every run of the sweep under ``--random-seed
100``): the 100 prompts once with one output token (the prefix cache the sweep's earlier
runs left), then the measured requests over them; the engines' default prefix caching
does the rest. Writes one line per row (id, group, split, measured and twin means).
The same change as a patch of ``twin/``: ``pool-rule.patch`` beside this file.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

import twin.validate.silicon as sil
from twin.validate.silicon.harness import AIPERF, TOKEN_RANGE
from twin.workloads.schema import WorkloadRow
from twin.workloads.writer import WorkloadWriter

# the module (the package's name ``predict`` is its function)
sil_predict = importlib.import_module("twin.validate.silicon.predict")
POOL = 100  # aiperf's NUM_DATASET_ENTRIES (config_defaults.py / config/dataset/defaults.py)


def pooled_workload(
    path: Path, isl: int, osl: int, requests: int, seed: int, range_ratio: float = 1.0
) -> Path:
    """``POOL`` prompts once (one output token each), then ``requests`` over them in
    shuffled cycles (aiperf ``dataset_samplers.py`` ``ShuffleSampler``)."""
    assert range_ratio == 1.0  # aiperf's lengths are exact (--isl-stddev 0)
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, TOKEN_RANGE, isl, dtype=np.int32) for _ in range(POOL)]
    order = np.concatenate([rng.permutation(POOL) for _ in range(-(-requests // POOL))])
    sessions = [(p, 1) for p in prompts] + [(prompts[order[i]], osl) for i in range(requests)]
    meta = {"generator": "silicon", "isl": isl, "osl": osl, "requests": requests, "pool": POOL}
    with WorkloadWriter(path, meta) as w:
        for i, (prompt, out) in enumerate(sessions):
            w.write(WorkloadRow(i, 0, None, None, prompt, False, None, out))
    return path


def one(plan: Any) -> tuple[Any, dict[str, Any]]:
    sil_predict.write_workload = pooled_workload  # this process only
    return plan.row, sil_predict.predict(dataclasses.replace(plan, warmup=plan.warmup + POOL))


def main(sample: Path, split: str, out: Path) -> None:
    with sample.open(newline="", encoding="utf-8") as f:
        ids = {r["id"] for r in csv.DictReader(f) if r["split"] == split}
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    rows = [r for r in rows if sil.harness_of(r) is AIPERF]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    with ProcessPoolExecutor(2) as ex:
        results = list(ex.map(one, plans))
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "group", "split", "silicon_ttft_ms", "silicon_tpot_ms",
                    "twin_ttft_ms", "twin_tpot_ms", "twin_error"])  # fmt: skip
        for r, o in results:
            w.writerow([r.id, r.group, split, r.ttft_ms, r.tpot_ms, o.get("twin_ttft_ms", ""),
                        o.get("twin_tpot_ms", ""), o.get("twin_error", "")])  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
