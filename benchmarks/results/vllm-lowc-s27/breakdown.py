"""Issue 31, helper vllm-lowc (session 27): the twin's decode step price by kernel for the
rows named, as their plans run them (a diagnosis; no rule).

    PYTHONPATH=. python benchmarks/results/vllm-lowc-s27/breakdown.py ID[,ID...] [BATCH ...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import twin.validate.silicon as sil
from twin.validate.silicon.predict import plan_run


def main() -> None:
    ids = set(sys.argv[1].split(","))
    batches = [int(b) for b in sys.argv[2:]] or [4, 8, 32]
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    for plan in plans:
        with tempfile.TemporaryDirectory() as tmp:
            run = plan_run(plan, Path(tmp))
        pricer = run.pricer
        while not hasattr(pricer, "cost_model"):
            pricer = pricer.inner
        model = pricer.cost_model
        row = plan.row
        print(f"== {row.id} {row.backend_version} tp {plan.tp} ep {plan.ep} {plan.priced}")
        for batch in batches:
            cost = model.decode([1536] * batch, breakdown=True)
            top = sorted(cost.by_kernel.items(), key=lambda kv: -kv[1])[:6]
            parts = {k: round(v * 1e3, 2) for k, v in top}
            print(f"  decode b={batch}: {cost.total_s * 1e3:.2f} ms {parts}")


if __name__ == "__main__":
    main()
