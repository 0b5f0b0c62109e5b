"""Per-model TTFT / TPOT MAPE of scored -mtp predictions (helper mtp-host, session 26).

python benchmarks/results/mtp-host/group_mape.py PREDICTIONS.csv ...
"""

import sys

import numpy as np
import pandas as pd

for path in sys.argv[1:]:
    d = pd.read_csv(path)
    d = d[d.twin_tpot_ms.notna()]
    d["m"] = np.where(d.group.str.startswith("Qwen"), "Qwen3.5", "DeepSeek")
    out = []
    for name, x in [("all", d), *d.groupby("m")]:
        ttft, tpot = x.twin_ttft_ape.mean(), x.twin_tpot_ape.mean()
        out.append(f"{name} n={len(x)} TTFT {ttft:.1f} TPOT {tpot:.1f}")
    print(path.split("/")[-2], " | ".join(out))
