"""Per-row TTFT gap (measured - twin, ms) of H200 vLLM rows in a predictions.csv."""

import sys

import pandas as pd

p = pd.read_csv(sys.argv[1], dtype=str, keep_default_na=False)
split = sys.argv[2] if len(sys.argv) > 2 else "fit"
h = p[p.group.str.contains("h200_sxm|vllm", regex=False) & (p.split == split)].copy()
h = h[h.twin_ttft_ms != ""]
for c in ["silicon_ttft_ms", "twin_ttft_ms", "silicon_tpot_ms", "twin_tpot_ms"]:
    h[c] = h[c].astype(float)
h["gap"] = h.silicon_ttft_ms - h.twin_ttft_ms
h["ape"] = (h.twin_ttft_ms / h.silicon_ttft_ms - 1) * 100
h["g"] = h.group.str.split("|").str[0]
pd.set_option("display.width", 250)
pd.set_option("display.max_rows", 400)
pd.set_option("display.max_colwidth", 60)
if "-v" in sys.argv:
    print(
        h[
            [
                "g",
                "backend_version",
                "isl",
                "osl",
                "concurrency",
                "tp",
                "silicon_ttft_ms",
                "twin_ttft_ms",
                "gap",
                "ape",
                "twin_queue_ms",
            ]
        ]
        .sort_values(["g", "backend_version", "tp", "isl", "concurrency"])
        .round(1)
        .to_string()
    )
h["absape"] = h.ape.abs()
print(
    h.groupby(["g", "backend_version"])
    .agg(
        n=("gap", "size"),
        gap_med=("gap", "median"),
        ape_med=("ape", "median"),
        mape=("absape", "mean"),
    )
    .round(1)
)
print("all", len(h), "TTFT MAPE", round(h.absape.mean(), 2))
