"""Per row: the twin's decode step (batch c, mean context) and one ISL prefill, without
the script's fp4 MoE backend (aiconfigurator's rule: TRTLLM-gen up to 128 tokens, CUTLASS
above) and with it (``--set moe_backend``, the row's plan).

PYTHONPATH=. python steps.py ROWS.csv OUT.csv"""

import importlib
import sys
import tempfile
from pathlib import Path

import pandas as pd

import twin.validate.silicon as sil

P = pd.read_csv(sys.argv[1], dtype=str, keep_default_na=False)
ids = set(P.id)
rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
out = []


dep = importlib.import_module("twin.validate.silicon.deployment")
RULE = dep.inferencemax_trtllm_fp4_moe_backend


def price(row, with_backend):
    dep.inferencemax_trtllm_fp4_moe_backend = RULE if with_backend else (lambda r: None)
    plans, _ = sil.plan_rows([row], sil.default_configs(), "benchmark")
    plan = plans[0]
    with tempfile.TemporaryDirectory() as tmp:
        pr = sil.plan_run(plan, Path(tmp)).pricer
    row, c = plan.row, plan.concurrency
    dp = row.attention_dp or 1
    L = row.isl + row.osl // 2
    if dp > 1:
        b = max(c // dp, 1)
        dec = pr.sync_time([((), b, b * L)] * dp)
        pre = pr.sync_time([([(row.isl, 0)], 0, 0)] + [((), 0, 0)] * (dp - 1))
    else:
        dec = pr.step_time((), c, c * L)
        pre = pr.step_time([(row.isl, 0)], 0, 0)
    return plan, dec * 1e3, pre * 1e3


for row in rows:
    plan, d0, p0 = price(row, False)
    backend = RULE(plan.row)
    _, d1, p1 = price(row, True)
    r = P[P.id == row.id].iloc[0]
    rec = dict(
        id=row.id,
        split=r.split,
        group=r.group,
        ver=row.backend_version,
        isl=row.isl,
        osl=row.osl,
        c=plan.concurrency,
        dp=plan.row.attention_dp or 1,
        backend=backend,
        spec="mtp" in r.deployment,
        dec0=round(d0, 3),
        dec1=round(d1, 3),
        pre0=round(p0, 3),
        pre1=round(p1, 3),
        m_ttft=float(r.silicon_ttft_ms),
        m_tpot=float(r.silicon_tpot_ms),
        t_ttft=float(r.twin_ttft_ms),
        t_tpot=float(r.twin_tpot_ms),
    )
    out.append(rec)
    print(rec, flush=True)
pd.DataFrame(out).to_csv(sys.argv[2], index=False)
