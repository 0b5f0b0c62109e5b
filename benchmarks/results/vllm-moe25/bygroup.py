"""Issue 31, helper vllm-moe (session 25): MAPE and median signed error by group (and by a
column) of one or more predictions.csv, on the ids of the first.

    python benchmarks/results/vllm-moe25/bygroup.py SPLIT BY A.csv [B.csv ...]
"""

import sys

import pandas as pd

split, by, paths = sys.argv[1], sys.argv[2].split(","), sys.argv[3:]
frames = [pd.read_csv(p, dtype=str, keep_default_na=False) for p in paths]
ids = set(frames[0][frames[0].split == split].id)
for p, d in zip(paths, frames, strict=True):
    d = d[d.id.isin(ids)].copy()
    for c in ("silicon_ttft_ms", "silicon_tpot_ms", "twin_ttft_ms", "twin_tpot_ms"):
        d[c] = pd.to_numeric(d[c], errors="coerce")
    d["et"] = (d.twin_ttft_ms / d.silicon_ttft_ms - 1) * 100
    d["ep"] = (d.twin_tpot_ms / d.silicon_tpot_ms - 1) * 100
    g = d.groupby(by).agg(
        n=("id", "size"),
        ttft_mape=("et", lambda x: x.abs().mean()),
        ttft_med=("et", "median"),
        tpot_mape=("ep", lambda x: x.abs().mean()),
        tpot_med=("ep", "median"),
    )
    print(f"== {p}")
    print(g.round(1).to_string())
