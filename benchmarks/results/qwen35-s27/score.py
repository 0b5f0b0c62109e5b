"""Diagnosis (issue 31, helper qwen35, session 27): TTFT / TPOT MAPE and the median
twin/measured TTFT of predictions CSVs by split, GPU and -mtp.

    python benchmarks/results/qwen35-s27/score.py DIR/predictions.csv [...]
"""

import sys

import pandas as pd

for path in sys.argv[1:]:
    d = pd.read_csv(path)
    d["mtp"] = d.deployment.str.contains("speculative")
    d["gpu"] = d.system.str[:4]
    d["te"] = (d.twin_ttft_ms / d.silicon_ttft_ms - 1).abs() * 100
    d["pe"] = (d.twin_tpot_ms / d.silicon_tpot_ms - 1).abs() * 100
    d["rt"] = d.twin_ttft_ms / d.silicon_ttft_ms
    g = d.groupby(["split", "gpu", "mtp"]).agg(
        n=("te", "size"), ttft=("te", "mean"), tpot=("pe", "mean"), rt=("rt", "median")
    )
    print(path)
    print(g.round(2).to_string())
