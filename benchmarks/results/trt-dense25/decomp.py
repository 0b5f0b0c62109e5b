"""Per row: the twin's decode step D (batch c, mean context) and a context's extra cost P
(step with one prefill + c-1 decodes minus c-1 decodes), kernels only and with host."""

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
    Dm = pr.step_time((), c - 1, (c - 1) * L)
    S = pr.step_time(((row.isl, 0),), c - 1, (c - 1) * L)
    p0 = pr
    while not hasattr(p0, "cost_model"):
        p0 = p0.inner
    pre = p0.cost_model.prefill(row.isl, 0, breakdown=True)
    r = P[P.id == row.id].iloc[0]
    out.append(
        dict(
            id=row.id,
            tp=plan.tp,
            isl=row.isl,
            osl=row.osl,
            c=c,
            D=D * 1e3,
            Pextra=(S - Dm) * 1e3,
            prefill=pre.total_s * 1e3,
            pre_gemm=pre.by_kernel.get("gemm", 0) * 1e3,
            pre_attn=pre.by_kernel.get("attn_prefill", 0) * 1e3,
            m_tpot=float(r.silicon_tpot_ms),
            t_tpot=float(r.twin_tpot_ms),
            m_ttft=float(r.silicon_ttft_ms),
            t_ttft=float(r.twin_ttft_ms),
        )
    )
    print(out[-1], flush=True)
pd.DataFrame(out).to_csv(sys.argv[4], index=False)
