"""TPOT MAPE and median signed error by GPU and TP group of the vllm-tp8 rescoring."""

import csv
import statistics
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    groups: dict[str, list[float]] = {}
    for r in rows:
        if not r["twin_tpot_ms"]:
            continue
        e = float(r["twin_tpot_ms"]) / float(r["silicon_tpot_ms"]) - 1
        gpu = r["group"].split("|")[1][:4]
        for k in ("all", gpu, "tp8" if r["tp"] == "8" else "tp1-4", f"{gpu} tp{r['tp']}"):
            groups.setdefault(k, []).append(e)
    print(path)
    for k, es in sorted(groups.items()):
        mape = 100 * sum(abs(x) for x in es) / len(es)
        med = 100 * statistics.median(es)
        print(f"  {k:10s} n={len(es):3d} mape={mape:5.1f} median={med:+5.1f}")
