"""Diagnosis (issue 31, helper vllm-aiperf, session 27): one row's twin run request by
request (sent, wait to admission, TTFT, completion; ms from the first shown request's send),
to see the closed loop's steady pattern, and the mean TTFT of round 0 (all clients at
once) against the later rounds.

    PYTHONPATH=. python benchmarks/results/vllm-aiperf-s27/phase.py ROW_ID [FIRST [COUNT]]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import twin.validate.silicon as sil
from twin.metrics import RequestRecord


def main() -> None:
    row_id = sys.argv[1]
    first = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id == row_id]
    plans, reasons = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    if not plans:
        sys.exit(f"{row_id}: not planned {reasons}")
    plan = plans[0]
    records: list[RequestRecord] = []
    with tempfile.TemporaryDirectory() as tmp:
        sil.plan_run(plan, Path(tmp)).simulate(on_record=records.append)
    records.sort(key=lambda r: r.arrival_s)
    c = plan.concurrency
    ttft = np.array([r.ttft_s * 1e3 for r in records])
    print(
        f"{row_id}: measured TTFT {plan.row.ttft_ms:.1f} ms; twin mean {ttft.mean():.1f}, "
        f"round 0 {ttft[:c].mean():.1f}, later {ttft[c:].mean():.1f} "
        f"(p10/50/90 {np.percentile(ttft[c:], [10, 50, 90]).round(1).tolist()})"
    )
    shown = records[first : first + count]
    t0 = shown[0].arrival_s if shown else 0.0
    for r in shown:
        print(
            f"{r.session_id:5d} sent {1e3 * (r.arrival_s - t0):9.1f} "
            f"wait {1e3 * (r.admitted_s - r.arrival_s):7.1f} TTFT {1e3 * r.ttft_s:7.1f} "
            f"done {1e3 * (r.completed_s - t0):9.1f}"
        )


if __name__ == "__main__":
    main()
