"""Diagnosis (issue 31, helper vllm-8b): each row's twin TTFT by round of the closed loop
(round 0: the measured phase's cold start, all c clients at once; rounds 1+: steady), and
the number of measured rounds R at which the twin's mean would equal the measured TTFT:
measured = (r0 + (R - 1) x steady) / R, so R = (r0 - steady) / (measured - steady).

    PYTHONPATH=. python benchmarks/results/vllm-8b/rounds.py GROUP SPLIT > OUT.txt
"""

from __future__ import annotations

import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

import twin.validate.silicon as sil
from twin.metrics import RequestRecord


def by_round(plan: sil.RowPlan) -> str:
    row = plan.row
    assert row.isl is not None and row.osl is not None and row.ttft_ms is not None
    records: list[RequestRecord] = []
    with tempfile.TemporaryDirectory() as tmp:
        sil.plan_run(plan, Path(tmp)).simulate(on_record=records.append)
    records.sort(key=lambda r: r.session_id)
    ttft = np.array([r.ttft_s * 1e3 for r in records])
    c = plan.concurrency
    r0, steady = float(ttft[:c].mean()), float(ttft[c:].mean())
    m = row.ttft_ms
    rounds = (r0 - steady) / (m - steady) if m > steady else float("inf")
    return (
        f"{row.split:8s} {row.isl:5d} {row.osl:5d} {c:4d} {row.tp:2d} "
        f"{r0:9.1f} {steady:8.1f} {ttft.mean():8.1f} {m:9.1f} {rounds:7.1f}"
    )


def main() -> None:
    group, split = sys.argv[1], sys.argv[2]
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.group == group and r.split == split]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    plans.sort(key=lambda p: (p.row.tp, p.row.isl, p.row.osl))
    print("split      isl   osl    c tp   round0_ms steady_ms  twin_ms  measured  R_equal")
    with ProcessPoolExecutor(2) as pool:
        for line in pool.map(by_round, plans):
            print(line, flush=True)


if __name__ == "__main__":
    main()
