"""Diagnosis and fit (helper trt-8b): every row of ROWS.csv (its split) under each
deployment variant, one process, rows in order, results appended as they land.
PYTHONPATH=. python variants.py ROWS.csv SPLIT OUT.csv NAME=K:V,K:V ...
A variant NAME=@FILE waits until FILE exists and reads its K:V,K:V body then (the
held-out run takes the value the fit rows chose, after its own "before" has run).
Variants run one after another over all rows (the first warms the caches)."""

import csv
import dataclasses
import os
import sys
import time
from pathlib import Path

import twin.validate.silicon as sil
from twin.engine import typed_settings
from twin.engine.run import RunArgs
from twin.validate.silicon.predict import predict

src, split, out = sys.argv[1], sys.argv[2], sys.argv[3]


def parsed(body):
    if body.startswith("@"):
        while not os.path.exists(body[1:]):
            time.sleep(10)
        body = Path(body[1:]).read_text().strip()
    sets = {}
    for kv in filter(None, body.split(",")):
        k, _, v = kv.partition(":")
        sets[k] = float(v)
    return sets


variants = [arg.partition("=")[::2] for arg in sys.argv[4:]]
ids = [r["id"] for r in csv.DictReader(Path(src).read_text().splitlines()) if r["split"] == split]
rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in set(ids)]
plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
fields = [
    "variant",
    "id",
    "tp",
    "isl",
    "osl",
    "c",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
    "twin_ttft_ms",
    "twin_tpot_ms",
    "twin_queue_ms",
    "twin_peak_running",
    "wall_s",
]
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    for name, body in variants:
        sets = parsed(body)
        for p in plans:
            dep = {**dict(p.deployment), **sets}
            q = dataclasses.replace(p, deployment=typed_settings(RunArgs, dep.items()))
            t = time.time()
            r = predict(q)
            w.writerow(
                {
                    "variant": name,
                    "id": p.row.id,
                    "tp": p.tp,
                    "isl": p.row.isl,
                    "osl": p.row.osl,
                    "c": p.concurrency,
                    "silicon_ttft_ms": p.row.ttft_ms,
                    "silicon_tpot_ms": p.row.tpot_ms,
                    "twin_ttft_ms": r.get("twin_ttft_ms"),
                    "twin_tpot_ms": r.get("twin_tpot_ms"),
                    "twin_queue_ms": r.get("twin_queue_ms"),
                    "twin_peak_running": r.get("twin_peak_running"),
                    "wall_s": round(time.time() - t, 1),
                }
            )
            f.flush()
