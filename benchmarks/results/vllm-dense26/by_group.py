"""Diagnosis (issue 31, helper vllm-dense s26): TTFT / TPOT MAPE and median signed TTFT of
predictions files on the same rows, by group and TP.

    python benchmarks/results/vllm-dense26/by_group.py BEFORE.csv AFTER.csv ...
"""

import sys

import pandas as pd


def table(path: str) -> pd.DataFrame:
    d = pd.read_csv(path, dtype=str, keep_default_na=False)
    f = lambda s: pd.to_numeric(s, errors="coerce")  # noqa: E731
    d["e"] = (f(d.twin_ttft_ms) / f(d.silicon_ttft_ms) - 1) * 100
    d["p"] = (f(d.twin_tpot_ms) / f(d.silicon_tpot_ms) - 1) * 100
    d["tp"] = f(d.tp).astype(int)
    return d


for path in sys.argv[1:]:
    d = table(path)
    ttft, med, tpot = d.e.abs().mean(), d.e.median(), d.p.abs().mean()
    print(f"== {path}: n {len(d)} TTFT {ttft:.1f} (median {med:+.1f}) TPOT {tpot:.1f}")
    for key, g in d.groupby(["group", "tp"]):
        ttft, med, tpot = g.e.abs().mean(), g.e.median(), g.p.abs().mean()
        print(f"   {key}: n {len(g)} TTFT {ttft:.1f} ({med:+.1f}) TPOT {tpot:.1f}")
