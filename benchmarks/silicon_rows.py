"""Rescore the rows of an earlier ``bench_silicon.py`` run with this tree (issue 31): the
same row ids, optionally one split and some groups, so a change is scored before and
after on exactly the rows of a sample (``bench_silicon.py``'s filters select by model,
system and backend and spread ``--limit``, so they cannot pick out the 1,500-row sample's
rows of a group).

    python benchmarks/silicon_rows.py benchmarks/results/silicon-sample1500/predictions.csv \\
        --split fit --groups "Qwen3.5-397B-A17B|b200_sxm|sglang|fp8" --out DIR --jobs 2

Writes ``DIR/predictions.csv`` and ``DIR/summary.json`` as ``bench_silicon.py`` does
(without aiconfigurator's columns); compare two runs with ``silicon_compare.py``. Any CSV
with an ``id`` column names rows (``split`` and ``group`` columns only for ``--split`` and
``--groups``): the one tool that reruns rows by id.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

from bench_silicon import run_rows

import twin.validate.silicon as sil


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", type=Path, help="an earlier run's predictions.csv")
    parser.add_argument("--split", choices=sil.SPLITS, default=None)
    parser.add_argument(
        "--groups", default="", help="semicolon list of groups (model|system|backend|precision)"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args(argv)
    if not args.predictions.is_file():
        parser.error(f"predictions: no file {args.predictions}")
    groups = {g for g in args.groups.split(";") if g}
    with args.predictions.open(newline="", encoding="utf-8") as f:
        ids = {
            r["id"]
            for r in csv.DictReader(f)
            if (args.split is None or r["split"] == args.split)
            and (not groups or r["group"] in groups)
        }
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    plans, reasons = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    print(f"{len(ids)} rows named, {len(plans)} expressed", flush=True)
    results: dict[str, dict[str, Any]] = {}

    def done(plan: sil.RowPlan, result: dict[str, Any]) -> None:
        results[plan.row.id] = result

    run_rows(plans, False, args.jobs, "local", None, done)
    ordered = [results[p.row.id] for p in plans]
    sil.write_outputs(args.out, ordered, sil.summarize(ordered, reasons, len(rows)))
    print(f"wrote {args.out / 'predictions.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
