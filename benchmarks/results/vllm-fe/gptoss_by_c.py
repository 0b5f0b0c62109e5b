"""gpt-oss-120b H200 vLLM fit rows: median signed TTFT error (%) by ISL x clients per file.

Usage: gptoss_by_c.py NAME=PRED.csv ...
"""

import sys

import pandas as pd

out = {}
for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    p = pd.read_csv(path, dtype=str, keep_default_na=False)
    p = p[p.group.str.startswith("gpt-oss") & (p.split == "fit") & (p.twin_ttft_ms != "")].copy()
    s = (p.twin_ttft_ms.astype(float) / p.silicon_ttft_ms.astype(float) - 1) * 100
    c = pd.cut(p.concurrency.astype(int), [0, 8, 16, 32, 64, 512])
    key = p.backend_version.replace("", "0.10.2") + " isl " + p.isl + " c " + c.astype(str)
    out[name] = s.groupby(key).median().round(1)
    out[name + " n"] = s.groupby(key).size()
print(pd.DataFrame(out).to_string())
