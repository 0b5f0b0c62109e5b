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

``--deployment KEY=VALUE`` (repeatable) changes one entry of every row's planned
deployment (the ``build_run`` keywords of ``twin.validate.silicon.deployment.deployment``)
before it runs: a diagnosis of what a server limit would do, never a scoring rule.
``VALUE`` ``c-N`` is the row's concurrency minus N, ``DEL`` drops the key, numbers and
``true``/``false`` are read as such.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
from pathlib import Path
from typing import Any

from bench_silicon import run_rows

import twin.validate.silicon as sil
from twin.engine import typed_settings
from twin.engine.run import RunArgs
from twin.errors import TwinError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("predictions", type=Path, help="an earlier run's predictions.csv")
    parser.add_argument("--split", choices=sil.SPLITS, default=None)
    parser.add_argument(
        "--groups", default="", help="semicolon list of groups (model|system|backend|precision)"
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--deployment",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a deployment entry of every row (module docstring)",
    )
    args = parser.parse_args(argv)
    if not args.predictions.is_file():
        parser.error(f"predictions: no file {args.predictions}")
    changes = []
    for item in args.deployment:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            parser.error(f"--deployment {item!r}: expected KEY=VALUE")
        changes.append((key, value))
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
    try:
        plans = [changed(p, changes) for p in plans]
    except (ValueError, TwinError) as err:  # a name build_run lacks: before any row runs
        parser.error(f"--deployment: {err}")
    print(f"{len(ids)} rows named, {len(plans)} expressed", flush=True)
    results: dict[str, dict[str, Any]] = {}

    def done(plan: sil.RowPlan, result: dict[str, Any]) -> None:
        results[plan.row.id] = result

    run_rows(plans, False, args.jobs, "local", None, done)
    ordered = [results[p.row.id] for p in plans]
    sil.write_outputs(args.out, ordered, sil.summarize(ordered, reasons, len(rows)))
    print(f"wrote {args.out / 'predictions.csv'}")
    return 0


def changed(plan: sil.RowPlan, changes: list[tuple[str, str]]) -> sil.RowPlan:
    """``plan`` with its deployment changed by ``changes`` (module docstring)."""
    if not changes:
        return plan
    deployment = dict(plan.deployment)
    for key, text in changes:
        if text == "DEL":
            deployment.pop(key, None)
        elif text.startswith("c-"):
            if not text[2:].isdigit():
                raise ValueError(f"{key}={text}: expected c-N with N a whole number")
            deployment[key] = plan.concurrency - int(text[2:])
        else:
            deployment[key] = _literal(text)
    typed = typed_settings(RunArgs, deployment.items())  # a misspelt name: one line
    return dataclasses.replace(plan, deployment=typed)


def _literal(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)


if __name__ == "__main__":
    sys.exit(main())
