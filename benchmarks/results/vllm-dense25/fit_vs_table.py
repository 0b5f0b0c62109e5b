"""Issue 31, helper vllm-dense (session 25): the twin's fp8 linear price (the profile's
``gemm_fp8`` fit, as ``DensePricing._proj`` applies it) against aiconfigurator's vLLM 0.24.0
fp8 GEMM table at the shapes Llama-3.1-70B runs at TP 1-8 (a diagnosis; no rule).

    PYTHONPATH=. python benchmarks/results/vllm-dense25/fit_vs_table.py ROWS.csv
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

import twin.validate.silicon as sil
from twin.engine.run import build_run
from twin.validate.silicon.predict import engine_build, kernel_tables, measured_mode, write_workload

TABLE = (
    "/work/main/.venv/lib/python3.11/site-packages/aiconfigurator_core/systems/data/"
    "{}_sxm/gemm/vllm/0.24.0/gemm_perf.parquet"
)


def main() -> None:
    with Path(sys.argv[1]).open(newline="", encoding="utf-8") as f:
        ids = {r["id"] for r in csv.DictReader(f) if r["split"] == "fit"}
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    seen: set[str] = set()
    for p in plans:
        if p.gpu in seen:
            continue
        seen.add(p.gpu)
        r = p.row
        with tempfile.TemporaryDirectory() as tmp:
            path = write_workload(Path(tmp) / "w.parquet", 1024, 10, 4, 1, p.range_ratio)
            args = {
                "model": p.model, "gpu": p.gpu,
                "engine": measured_mode(p.engine, r.backend_version),
                "kernel_tables": kernel_tables(r.backend_version),
                "engine_build": engine_build(r), "cache_gb": "auto", "tp": p.tp, "ep": p.ep,
                "concurrency": 4, "dp_attention": p.dp,
            }  # fmt: skip
            args.update(p.deployment)
            run = build_run(path, **args)
        pr = run.pricer
        while not hasattr(pr, "cost_model"):
            pr = pr.inner
        proj = pr.cost_model._proj
        d = pd.read_parquet(TABLE.format(p.gpu))
        d = d[d.gemm_dtype == "fp8"]
        fit_s = table_s = 0.0
        for tp in (1, 2, 4, 8):
            for n, k in (
                (10240 // tp, 8192),
                (8192, 8192 // tp),
                (57344 // tp, 8192),
                (8192, 28672 // tp),
            ):
                s = d[d.m.isin([4, 8, 16, 32, 64]) & (d.n == n) & (d.k == k)]
                for m, lat_ms in zip(s.m, s.latency, strict=True):
                    fit_s += proj(int(m), k, n)
                    table_s += lat_ms * 1e-3
        s = d[d.m.isin([4, 8, 16, 32, 64]) & (d.n * d.k >= 4e7) & (d.n * d.k <= 6e8)]
        s = s[(s.n >= 2048) & (s.k >= 2048)]
        ratio = np.array(
            [
                proj(int(m), int(k), int(n)) / (t * 1e-3)
                for m, n, k, t in zip(s.m, s.n, s.k, s.latency, strict=True)
            ]
        )
        by_m = s.assign(r=ratio).groupby("m").r.median().round(3).to_dict()
        print(
            f"{p.gpu}: model shapes fit/table {fit_s / table_s:.3f}; "
            f"4e7-6e8 shapes median by m {by_m}"
        )


if __name__ == "__main__":
    main()
