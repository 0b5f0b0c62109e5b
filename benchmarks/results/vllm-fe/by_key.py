"""TTFT / TPOT MAPE per (model, release) of the front-end grid's predictions files.

Usage: by_key.py [--held-out] V=PRED.csv ...
(each a silicon_rows.py / bench_silicon.py predictions.csv).
"""

import sys

import pandas as pd

split = "held_out" if "--held-out" in sys.argv else "fit"
cols = {}
for arg in [a for a in sys.argv[1:] if a != "--held-out"]:
    name, path = arg.split("=", 1)
    p = pd.read_csv(path, dtype=str, keep_default_na=False)
    p = p[(p.split == split) & (p.twin_ttft_ms != "")].copy()
    for c in ["silicon_ttft_ms", "twin_ttft_ms", "silicon_tpot_ms", "twin_tpot_ms"]:
        p[c] = p[c].astype(float)
    p["ttft"] = (p.twin_ttft_ms / p.silicon_ttft_ms - 1).abs() * 100
    p["tpot"] = (p.twin_tpot_ms / p.silicon_tpot_ms - 1).abs() * 100
    p["key"] = (
        p.group.str.split("|").str[0]
        + " "
        + p.backend_version.replace("", "(none)")
        + " "
        + p.harness.str.split(" ").str[0]
    )
    g = p.groupby("key")
    cols[name] = g.ttft.mean().round(1).astype(str) + " / " + g.tpot.mean().round(1).astype(str)
    cols[name]["n"] = ""
    cols[name]["ALL"] = f"{p.ttft.mean():.2f} / {p.tpot.mean():.2f}"
    im = p[p.harness.str.startswith("InferenceMAX")]
    cols[name]["InferenceMAX only"] = f"{im.ttft.mean():.2f} / {im.tpot.mean():.2f}"
    n = g.size()
out = pd.DataFrame(cols)
out.insert(0, "rows", n.reindex(out.index).astype("string").fillna(""))
out = out.drop(index="n", errors="ignore")
print("| key | " + " | ".join(out.columns) + " |")
for k, r in out.iterrows():
    print("| " + k + " | " + " | ".join(str(x) for x in r) + " |")
