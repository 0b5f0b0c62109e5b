"""The rows of a predictions CSV (its ``id`` column) run again through the current tree's
plan and twin: ``PYTHONPATH=. python benchmarks/results/lowc-tpot/rerun_ids.py IN.csv
OUT.csv`` writes each row's ``id``, ``twin_ttft_ms``, ``twin_tpot_ms`` (or ``twin_error``),
two processes. How this branch's before/after on the same rows of the last scored sample
(``benchmarks/results/silicon-sample1500/predictions.csv``) were made; docs/decisions.md,
"Issue 31, step: the decode step at a few clients"."""

from __future__ import annotations

import sys
from multiprocessing import Pool
from typing import Any

import pandas as pd

from twin.validate.silicon.plan import plan_row
from twin.validate.silicon.predict import predict
from twin.validate.silicon.rows import read_rows


def one(rid: str) -> dict[str, Any]:
    row = next(r for r in read_rows() if r.id == rid)
    plan = plan_row(row)
    if isinstance(plan, str):
        return {"id": rid, "twin_error": plan}
    out = predict(plan)
    return {"id": rid, **{k: out.get(k) for k in ("twin_ttft_ms", "twin_tpot_ms", "twin_error")}}


if __name__ == "__main__":
    ids = list(pd.read_csv(sys.argv[1]).id)
    with Pool(2) as pool:
        results = pool.map(one, ids, chunksize=4)
    pd.DataFrame(results).to_csv(sys.argv[2], index=False)
