"""Diagnosis only (issue 31, helper vllm-8b): rerun a split's rows with one change to
every row's plan, never a scoring rule.

    PYTHONPATH=. python benchmarks/results/vllm-8b/whatif.py IDS.csv SPLIT KIND VALUE OUT

KIND ``scale``: every prompt VALUE times the row's ISL (the server's tokens per token
the row names); ``warm``: VALUE x c warm-up requests sent first in the same closed loop
(no drain) and left out, so the measured phase starts warm; ``osl``: every output VALUE
tokens longer than the row's OSL (generation running on to vLLM's ``--max-model-len``,
which aiconfigurator's generator sets to isl + osl + 1500); ``conc``: VALUE x c clients
(at least 1) in the closed loop, each sending the harness's rounds.
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_silicon import run_rows

import twin.validate.silicon as sil


def changed(plan: sil.RowPlan, kind: str, value: float) -> sil.RowPlan:
    """``plan`` with the module docstring's change ``kind`` by ``value``."""
    if kind == "scale":
        return dataclasses.replace(plan, prompt_scale=value)
    if kind == "warm":
        extra = int(value * plan.concurrency)
        return dataclasses.replace(plan, warmup=extra, requests=plan.requests + extra)
    if kind == "osl":
        assert plan.row.osl is not None
        row = dataclasses.replace(plan.row, osl=plan.row.osl + int(value))
        return dataclasses.replace(plan, row=row)
    if kind == "conc":
        clients = max(1, round(value * plan.concurrency))
        rounds = plan.requests // plan.concurrency
        return dataclasses.replace(plan, concurrency=clients, requests=rounds * clients)
    raise SystemExit(f"KIND must be scale, warm, osl or conc (got {kind!r})")


def main() -> None:
    ids_csv, split, kind, value, out = sys.argv[1:6]
    with open(ids_csv, newline="", encoding="utf-8") as f:
        ids = {r["id"] for r in csv.DictReader(f) if r["split"] == split}
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    plans, reasons = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    plans = [changed(p, kind, float(value)) for p in plans]
    results: dict[str, dict[str, Any]] = {}

    def done(plan: sil.RowPlan, result: dict[str, Any]) -> None:
        results[plan.row.id] = result

    run_rows(plans, False, 2, "local", None, done)
    ordered = [results[p.row.id] for p in plans]
    sil.write_outputs(Path(out), ordered, sil.summarize(ordered, reasons, len(rows)))


if __name__ == "__main__":
    main()
