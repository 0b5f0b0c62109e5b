"""Diagnosis (helper trt-dense, s25): rows of PRED.csv (a split, a group substring) under
variants NAME=K:V,... ; K 'pf' scales the prefill share of a step with contexts
(monkeypatched), 'blk' 1 / 2 prices the weights fp8-block / bf16, 'one' N sets
max_batched_tokens to ISL + c + N (one context a step); other K are deployment entries.
Diagnosis only. From the worktree root:
PYTHONPATH=. python benchmarks/results/trt-dense25/variants.py PRED.csv GROUPSUB SPLIT OUT.csv \
    NAME=K:V,..."""

import csv
import dataclasses
import sys
from pathlib import Path

import numpy as np

import twin.validate.silicon as sil
from twin.engine import cost as ec
from twin.engine import typed_settings
from twin.engine.run import RunArgs
from twin.validate.silicon.predict import predict

PF = [1.0]
_orig = ec.CostModelPricer.step_time


def step_time(self, prefills, b, ctx):
    t = _orig(self, prefills, b, ctx)
    if prefills and PF[0] != 1.0:
        d = _orig(self, (), b, ctx) if b else 0.0
        t = d + PF[0] * (t - d)
    return t


ec.CostModelPricer.step_time = step_time

src, sub, split, out = sys.argv[1:5]
ids = [
    r["id"]
    for r in csv.DictReader(Path(src).read_text().splitlines())
    if r["split"] == split and sub in r["group"]
]
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
]
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    for name, _, body in (a.partition("=") for a in sys.argv[5:]):
        sets = {}
        for kv in filter(None, body.split(",")):
            k, _, v = kv.partition(":")
            sets[k] = float(v)
        PF[0] = sets.pop("pf", 1.0)
        blk = sets.pop("blk", 0.0)
        one = sets.pop("one", 0.0)
        te, pe = [], []
        for p in plans:
            dep = {**dict(p.deployment), **sets}
            if one:
                dep["max_batched_tokens"] = p.row.isl + p.concurrency + int(one)
            q = dataclasses.replace(p, deployment=typed_settings(RunArgs, dep.items()))
            if blk:
                q = dataclasses.replace(
                    q,
                    model_fields={
                        **q.model_fields,
                        "precision": {1: "fp8-block", 2: "bf16"}[int(blk)],
                    },
                )
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
                }
            )
            te.append(abs(r["twin_ttft_ms"] / p.row.ttft_ms - 1))
            pe.append(abs(r["twin_tpot_ms"] / p.row.tpot_ms - 1))
        f.flush()
        ttft, tpot = 100 * np.mean(te), 100 * np.mean(pe)
        print(
            f"{name}: n={len(te)} TTFT {ttft:.1f} TPOT {tpot:.1f} sum {ttft + tpot:.1f}",
            flush=True,
        )
