"""Rerun silicon rows by id with their harness deployment changed (issue 31, helper trt-h100).

A diagnosis aid, not a scorer: each row is planned as ``benchmarks/silicon_rows.py`` plans
it, then ``KEY=VALUE`` pairs replace or add deployment entries before the twin runs it
(``VALUE`` ``c-N`` is the row's concurrency minus N, ``DEL`` drops the key). One line per
row to stdout; ``--csv`` writes id, the variant, the measured and the twin's means.

    PYTHONPATH=. python benchmarks/results/trt-h100/variant_rows.py ID1,ID2 \\
        max_running=c-1 --csv out.csv
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import sys
from typing import Any

import twin.validate.silicon as sil


def _value(text: str, concurrency: int) -> Any:
    if text.startswith("c-"):
        return concurrency - int(text[2:])
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", help="comma-separated row ids")
    parser.add_argument("changes", nargs="*", help="KEY=VALUE deployment changes")
    parser.add_argument("--csv", default=None)
    args = parser.parse_args(argv)
    predict = importlib.import_module("twin.validate.silicon.predict").predict
    ids = set(args.ids.split(","))
    changes = dict(kv.split("=", 1) for kv in args.changes)
    variant = " ".join(args.changes) or "as planned"
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    out = []
    for plan in plans:
        dep = dict(plan.deployment)
        for key, text in changes.items():
            if text == "DEL":
                dep.pop(key, None)
            else:
                dep[key] = _value(text, plan.concurrency)
        res = predict(dataclasses.replace(plan, deployment=dep))
        r = plan.row
        line = {
            "id": r.id,
            "variant": variant,
            "silicon_ttft_ms": r.ttft_ms,
            "silicon_tpot_ms": r.tpot_ms,
            "twin_ttft_ms": res.get("twin_ttft_ms"),
            "twin_tpot_ms": res.get("twin_tpot_ms"),
            "twin_error": res.get("twin_error", ""),
        }
        print(line, flush=True)
        out.append(line)
    if args.csv and out:
        with open(args.csv, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=list(out[0]))
            w.writeheader()
            w.writerows(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
