"""TTFT / TPOT MAPE per group of a rerun (``benchmarks/results/lowc-tpot/rerun_ids.py``'s
output) against the rows' measurements in the sample CSV:
``python score.py SAMPLE.csv RERUN.csv [RERUN2.csv]``."""

from __future__ import annotations

import sys

import pandas as pd

sample = pd.read_csv(sys.argv[1])
for path in sys.argv[2:]:
    run = pd.read_csv(path).merge(
        sample[["id", "group", "silicon_ttft_ms", "silicon_tpot_ms"]], on="id"
    )
    run["ttft"] = (run.twin_ttft_ms / run.silicon_ttft_ms - 1).abs() * 100
    run["tpot"] = (run.twin_tpot_ms / run.silicon_tpot_ms - 1).abs() * 100
    run["rt"] = run.twin_tpot_ms / run.silicon_tpot_ms
    out = run.groupby("group").agg(
        n=("id", "size"), ttft=("ttft", "mean"), tpot=("tpot", "mean"), tpot_ratio=("rt", "median")
    )
    print(path)
    print(out.round(2).to_string())
    print("all", len(run), round(run.ttft.mean(), 2), round(run.tpot.mean(), 2))
