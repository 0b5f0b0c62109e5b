"""One silicon row's twin run traced (helper trt-h100, session 27; a diagnosis): how many
requests are before the engine (sent, not yet admitted: the front end and the engine's
queue), prefilling and running over time, and the mixed steps' (step, queue, admitted,
running, seconds) from the middle of the run.

    PYTHONPATH=. python benchmarks/results/trt-h100-s27/trace_row.py ROW_ID [REQUESTS]
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import twin.engine.batching as batching
import twin.validate.silicon as sil
from twin.metrics import RequestRecord
from twin.validate.silicon.predict import plan_run

STEPS: list[tuple[int, int, int, int, float]] = []
_plan_step = batching.ContinuousBatching._plan_step


def _logged(self: Any) -> Any:
    queued = len(self.waiting)
    out = _plan_step(self)
    STEPS.append((self.step_no, queued, queued - len(self.waiting), len(self.decoding), out[1]))
    return out


def main() -> None:
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id == sys.argv[1]]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    plan = plans[0]
    if len(sys.argv) > 2:
        plan = dataclasses.replace(plan, requests=int(sys.argv[2]))
    print(plan.deployment, plan.requests)
    batching.ContinuousBatching._plan_step = _logged  # type: ignore[method-assign]
    records: list[RequestRecord] = []
    with tempfile.TemporaryDirectory() as tmp:
        plan_run(plan, Path(tmp)).simulate(on_record=records.append)
    sent = np.array([r.arrival_s for r in records])
    admitted = np.array([r.admitted_s for r in records])
    first = np.array([r.first_token_s for r in records])
    done = np.array([r.completed_s for r in records])
    for t in np.linspace(0, done.max(), 13):
        before = int(np.sum((sent <= t) & (admitted > t)))
        prefill = int(np.sum((admitted <= t) & (first > t)))
        running = int(np.sum((first <= t) & (done > t)))
        print(
            f"t={t:7.3f} s  before the engine {before:4d}  prefill {prefill:3d}  run {running:4d}"
        )
    print(
        "TTFT ms",
        1e3 * float(np.mean(first - sent)),
        "queue ms",
        1e3 * float(np.mean(admitted - sent)),
    )
    mid = len(STEPS) // 2
    for step in STEPS[mid : mid + 10]:
        print("mixed step (step, queue, admitted, running, s):", step)


if __name__ == "__main__":
    main()
