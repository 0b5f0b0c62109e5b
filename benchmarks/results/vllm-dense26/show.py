"""Diagnosis (issue 31, helper vllm-dense s26): per-row measured/twin TTFT of several runs
of the same rows, with MAPE and median signed error per run.

    python benchmarks/results/vllm-dense26/show.py DIR1/predictions.csv DIR2/predictions.csv ...
"""

import sys

import pandas as pd

frames = [pd.read_csv(p, dtype=str, keep_default_na=False) for p in sys.argv[1:]]
base = frames[0][["id", "tp", "isl", "osl", "concurrency", "silicon_ttft_ms"]].copy()
for i, f in enumerate(frames):
    ratio = f.twin_tpot_ms.astype(float) / f.silicon_tpot_ms.astype(float)
    base[f"t{i}"] = base.id.map(dict(zip(f.id, f.twin_ttft_ms.astype(float), strict=True)))
    base[f"p{i}"] = base.id.map(dict(zip(f.id, ratio, strict=True)))
m = base.silicon_ttft_ms.astype(float)
for c in ["tp", "isl", "osl", "concurrency"]:
    base[c] = base[c].astype(float).astype(int)
print(base.sort_values(["tp", "isl", "osl", "concurrency"]).round(3).to_string(index=False))
for i, p in enumerate(sys.argv[1:]):
    e = (base[f"t{i}"] - m) / m * 100
    pe = (base[f"p{i}"] - 1) * 100
    ttft, med, tpot = e.abs().mean(), e.median(), pe.abs().mean()
    print(f"{p}: TTFT MAPE {ttft:.1f} median signed {med:+.1f}; TPOT MAPE {tpot:.1f}")
