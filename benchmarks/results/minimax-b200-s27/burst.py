"""Issue 31, helper minimax-b200 (session 27): the twin's mean TTFT of InferenceMAX rows
split into the first burst (the first ``concurrency`` requests, sent at once) and the
rest (a diagnosis; no rule).

    PYTHONPATH=. python benchmarks/results/minimax-b200-s27/burst.py ID[,ID...]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

import twin.validate.silicon as sil
from twin.validate.silicon.predict import plan_run


def main() -> None:
    ids = set(sys.argv[1].split(","))
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    for p in plans:
        recs: list = []
        with tempfile.TemporaryDirectory() as tmp:
            plan_run(p, Path(tmp)).simulate(on_record=recs.append)
        recs = sorted((r for r in recs if r.session_id >= p.warmup), key=lambda r: r.session_id)
        c = p.concurrency
        t = np.array([r.ttft_s * 1e3 for r in recs])
        print(
            p.row.id, "c", c, "n", len(t), "mean", t.mean().round(1),
            "burst(first c) mean", t[:c].mean().round(1), "rest mean", t[c:].mean().round(1),
            "rest p50", np.median(t[c:]).round(1),
        )  # fmt: skip


if __name__ == "__main__":
    main()
