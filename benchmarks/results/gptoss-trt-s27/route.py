"""Per row: the decode step's kernels (batch c, mean context) under each routing rule,
through a scratch switch of ``routing_for`` (not in the tree)."""

import sys
import tempfile
from pathlib import Path

import pandas as pd

import twin.costmodel.routing as R
import twin.validate.silicon as sil

P = pd.read_csv(sys.argv[1], dtype=str, keep_default_na=False)
P = P[P.group.str.contains(sys.argv[2], regex=False) & (P.split == sys.argv[3])]
ids = set(P.id)
rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
plans, reasons = sil.plan_rows(rows, sil.default_configs(), "benchmark")
for plan in plans:
    row = plan.row
    c, L = plan.concurrency, row.isl + row.osl // 2
    res = {}
    for name in ("uniform", "power_law_1.2", "power_law_1.01"):
        R.routing_for = lambda m, n=name: R.ROUTINGS[n]
        import twin.costmodel.dense_pricing as dp

        if hasattr(dp, "routing_for"):
            dp.routing_for = R.routing_for
        with tempfile.TemporaryDirectory() as tmp:
            run = sil.plan_run(plan, Path(tmp))
        p0 = run.pricer
        while not hasattr(p0, "cost_model"):
            p0 = p0.inner
        b = p0.cost_model.decode([L] * c, breakdown=True)
        res[name] = round(b.by_kernel.get("moe", 0) * 1e3, 2), round(b.total_s * 1e3, 2)
    r = P[P.id == row.id].iloc[0]
    print(
        row.id[-32:],
        plan.tp,
        c,
        row.isl,
        row.osl,
        r.silicon_tpot_ms[:6],
        r.twin_tpot_ms[:6],
        res,
        flush=True,
    )
