"""A rerun (``benchmarks/results/lowc-tpot/rerun_ids.py``'s id / twin_ttft_ms /
twin_tpot_ms) written over the sample's rows in ``bench_silicon.py``'s predictions
format, for ``benchmarks/silicon_compare.py``:
``python as_predictions.py SAMPLE.csv RERUN.csv OUT.csv``."""

from __future__ import annotations

import sys

import pandas as pd

sample = pd.read_csv(sys.argv[1]).set_index("id")
rerun = pd.read_csv(sys.argv[2]).set_index("id")
out = sample.loc[rerun.index].copy()
for col in ("twin_ttft_ms", "twin_tpot_ms"):
    out[col] = rerun[col]
out["twin_ttft_ape"] = (out.twin_ttft_ms - out.silicon_ttft_ms).abs() / out.silicon_ttft_ms * 100
out["twin_tpot_ape"] = (out.twin_tpot_ms - out.silicon_tpot_ms).abs() / out.silicon_tpot_ms * 100
out.reset_index().to_csv(sys.argv[3], index=False)
