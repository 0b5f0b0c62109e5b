"""Additive estimate of a per-request front end V on H200 vLLM rows: twin TTFT + V.

Diagnosis only (a front end served one request at a time also queues; the real grid
runs `silicon_rows.py --deployment frontend_s=V`). Usage: additive_grid.py PRED.csv SPLIT.
"""

import sys

import pandas as pd

p = pd.read_csv(sys.argv[1], dtype=str, keep_default_na=False)
h = p[p.group.str.contains("h200_sxm|vllm", regex=False) & (p.split == sys.argv[2])].copy()
h = h[h.twin_ttft_ms != ""]
for c in ["silicon_ttft_ms", "twin_ttft_ms"]:
    h[c] = h[c].astype(float)
h["key"] = h.group.str.split("|").str[0] + " " + h.backend_version.replace("", "none")
rows = []
for v in [0, 5, 10, 15, 20]:
    ape = ((h.twin_ttft_ms + v) / h.silicon_ttft_ms - 1).abs() * 100
    r = ape.groupby(h.key).mean().round(1).to_dict()
    r["ALL"] = round(ape.mean(), 2)
    r["V"] = v
    rows.append(r)
print(pd.DataFrame(rows).set_index("V").T.to_string())
print(h.key.value_counts().to_string())
