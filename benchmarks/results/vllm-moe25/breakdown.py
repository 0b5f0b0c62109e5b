"""Issue 31, helper vllm-moe (session 25): the twin's decode and prefill step prices by
kernel for chosen fit rows (a diagnosis; no rule).

    PYTHONPATH=. python benchmarks/results/vllm-moe25/breakdown.py SAMPLE.csv GROUP [BATCH ...]
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

import twin.validate.silicon as sil
from twin.engine.run import build_run
from twin.validate.silicon.predict import engine_build, kernel_tables, measured_mode, write_workload


def main() -> None:
    sample, group = Path(sys.argv[1]), sys.argv[2]
    batches = [int(b) for b in sys.argv[3:]] or [4, 32, 128, 256, 512]
    with sample.open(newline="", encoding="utf-8") as f:
        ids = {r["id"] for r in csv.DictReader(f) if r["split"] == "fit" and r["group"] == group}
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    seen = set()
    for p in sorted(plans, key=lambda p: (p.row.backend_version, p.tp)):
        key = (p.row.backend_version, p.tp, p.ep, p.precision)
        if key in seen:
            continue
        seen.add(key)
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
        cm = pr.cost_model
        print(f"== {r.backend_version} tp {p.tp} ep {p.ep} {p.precision} {p.deployment}")
        for b in batches:
            sc = cm.decode([1536] * b, breakdown=True)
            top = sorted(sc.by_kernel.items(), key=lambda kv: -kv[1])[:6]
            print(
                f"decode b={b}: {sc.total_s * 1e3:.2f} ms", {k: round(v * 1e3, 2) for k, v in top}
            )
        for n in (1024, 8192):
            sc = cm.prefill(n, 0, breakdown=True)
            top = sorted(sc.by_kernel.items(), key=lambda kv: -kv[1])[:6]
            print(f"prefill {n}: {sc.total_s * 1e3:.2f} ms", {k: round(v * 1e3, 2) for k, v in top})


if __name__ == "__main__":
    main()
