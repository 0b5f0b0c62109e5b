"""vLLM's eager host time per launch on one GPU's fit rows of ``bench_eager_prefill.py``
(its sample: ``--backend vllm --per-split 48 --max-clients 128``, its rule), predicted at
each value of a grid with two workers; TTFT / TPOT MAPE per value (docs/decisions.md,
"Issue 31, step: the Kimi-K2.5 gap-analysis rows are InferenceMAX's").

    PYTHONPATH=. python benchmarks/results/vllm-aiperf/eager_grid_one_gpu.py h200 30,45,60 OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys
from multiprocessing import Pool
from pathlib import Path
from typing import Any

sys.path.insert(0, "benchmarks")

from bench_eager_prefill import _sample, predict_at

import twin.validate.silicon as sil


def _plans(gpu: str) -> list[sil.RowPlan]:
    sample = _sample(48, 128, "vllm", "eager")
    return [p for p in sample if p.row.split == sil.FIT and p.gpu == gpu]


def _one(job: tuple[str, int, float]) -> tuple[Any, ...]:
    gpu, i, us = job
    plan = _plans(gpu)[i]
    got = predict_at(plan, us)
    row = plan.row
    return (row.id, us, got.get("twin_ttft_ms"), got.get("twin_tpot_ms"), row.ttft_ms, row.tpot_ms)


def main() -> None:
    gpu, grid, out = sys.argv[1], [float(x) for x in sys.argv[2].split(",")], Path(sys.argv[3])
    jobs = [(gpu, i, us) for i in range(len(_plans(gpu))) for us in grid]
    with Pool(2) as pool:
        res = pool.map(_one, jobs)
    out.write_text(json.dumps(res, indent=1))
    for us in grid:
        at = [r for r in res if r[1] == us]
        ttft = statistics.fmean(abs(r[2] - r[4]) / r[4] * 100 for r in at)
        tpot = statistics.fmean(abs(r[3] - r[5]) / r[5] * 100 for r in at)
        mapes = f"TTFT {ttft:5.1f} TPOT {tpot:5.1f} sum {ttft + tpot:5.1f}"
        print(f"{gpu} {us:5.0f} us rows {len(at)} {mapes}")


if __name__ == "__main__":
    main()
