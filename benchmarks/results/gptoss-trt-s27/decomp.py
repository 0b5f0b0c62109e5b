"""Per row: the twin's decode step at batch c, mean context, by kernel; and the pricer chain."""

import sys
import tempfile
from pathlib import Path

import pandas as pd

import twin.validate.silicon as sil

P = pd.read_csv(sys.argv[1], dtype=str, keep_default_na=False)
P = P[P.group.str.contains(sys.argv[2], regex=False) & (P.split == sys.argv[3])]
ids = set(P.id)
rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
plans, reasons = sil.plan_rows(rows, sil.default_configs(), "benchmark")
out = []
for plan in plans:
    row = plan.row
    with tempfile.TemporaryDirectory() as tmp:
        run = sil.plan_run(plan, Path(tmp))
    pr = run.pricer
    c, L = plan.concurrency, row.isl + row.osl // 2
    D = pr.step_time((), c, c * L)
    chain = []
    p0 = pr
    while not hasattr(p0, "cost_model"):
        chain.append(type(p0).__name__)
        p0 = p0.inner
    chain.append(type(p0).__name__)
    cm = p0.cost_model
    b = cm.decode([L] * c, breakdown=True)
    r = P[P.id == row.id].iloc[0]
    d = dict(
        id=row.id[-30:],
        tp=plan.tp,
        c=c,
        isl=row.isl,
        D=round(D * 1e3, 3),
        K=round(b.total_s * 1e3, 3),
        m=float(r.silicon_tpot_ms),
        t=float(r.twin_tpot_ms),
    )
    for kind, items in b.items.items():
        for k, s in items.items():
            d[f"{kind}.{k}"] = round(s * 1e3, 3)
    out.append(d)
    print(d, chain, flush=True)
pd.DataFrame(out).to_csv(sys.argv[4], index=False)
