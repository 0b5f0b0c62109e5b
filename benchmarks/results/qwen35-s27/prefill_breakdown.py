"""Diagnosis (issue 31, helper qwen35, session 27): the kernels of one prefill of N tokens
as a silicon row's plan prices them (the row's own model, GPU, layout and kernel tables),
by layer kind and by kernel; the eager host time (``eager_prefill_s`` in the row's
deployment) is not included. Run from the repository root:

    PYTHONPATH=. python benchmarks/results/qwen35-s27/prefill_breakdown.py ID[,ID...] 8192,1024
"""

import sys
import tempfile
from pathlib import Path
from typing import Any

import twin.validate.silicon as sil
from twin.costmodel import CostModel
from twin.validate.silicon.plan import plan_row
from twin.validate.silicon.predict import plan_run


def find_cost_model(obj: Any, depth: int = 0) -> CostModel | None:
    """The CostModel inside a run's pricer (through its wrappers)."""
    if isinstance(obj, CostModel):
        return obj
    if depth > 4 or not hasattr(obj, "__dict__"):
        return None
    for value in vars(obj).values():
        found = find_cost_model(value, depth + 1)
        if found is not None:
            return found
    return None


def main() -> None:
    ids = sys.argv[1].split(",")
    tokens = [int(x) for x in sys.argv[2].split(",")]
    rows = {r.id: r for r in sil.read_rows()}
    for row_id in ids:
        plan = plan_row(rows[row_id])
        assert not isinstance(plan, str), plan
        with tempfile.TemporaryDirectory() as tmp:
            run = plan_run(plan, Path(tmp))
            cost = find_cost_model(run.pricer)
            assert cost is not None
            print(row_id, "tp", plan.tp, "ep", plan.ep, type(run.pricer).__name__)
            for n in tokens:
                c = cost.prefill(n, breakdown=True)
                assert not isinstance(c, float)
                print(" n", n, "kernels_ms %.1f" % (c.total_s * 1e3))
                print("    kind", {k: round(v * 1e3, 2) for k, v in c.by_kind.items() if v})
                print("    kernel", {k: round(v * 1e3, 2) for k, v in c.by_kernel.items()})


if __name__ == "__main__":
    main()
