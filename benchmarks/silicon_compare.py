"""Two ``bench_silicon.py`` runs of the same rows, side by side (issue 31): TTFT and TPOT
MAPE per split and (model, system, backend) before and after a change, the rows whose
prediction changed, and, from a third ``predictions.csv`` (an earlier run's
aiconfigurator columns, as ``--aic-from`` reads them), aiconfigurator's MAPE on the rows
it estimated next to the twin's on the same rows.

    python benchmarks/silicon_compare.py BEFORE/predictions.csv AFTER/predictions.csv \\
        --aic benchmarks/results/silicon-mla/predictions.csv --out compare.json
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, NoReturn


def _refuse(message: str) -> NoReturn:
    print(f"silicon_compare: {message}", file=sys.stderr)
    raise SystemExit(2)


def _read(path: Path) -> dict[str, dict[str, str]]:
    """The rows of a predictions CSV by id; a missing or unreadable file, or one without an
    ``id`` column, is one line on stderr and exit status 2."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        _refuse(f"{path}: not a readable CSV file ({err})")
    if "id" not in (reader.fieldnames or ()):  # the header, so a file of no rows is read too
        _refuse(f"{path}: no 'id' column")
    return {r["id"]: r for r in rows}


def _ape(value: str | None, measured: str | None) -> float | None:
    try:
        v, m = float(value or ""), float(measured or "")
    except ValueError:
        return None
    return abs(v - m) / m * 100 if m > 0 else None


def _mape(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(statistics.fmean(kept), 1) if kept else None


def compare(
    before: dict[str, dict[str, str]],
    after: dict[str, dict[str, str]],
    aic: dict[str, dict[str, str]],
) -> dict[str, dict[str, Any]]:
    """Per ``split|group`` (and ``split|ALL``): rows, MAPE before/after, rows changed,
    aiconfigurator's MAPE and the twin's (after) on the rows aiconfigurator estimated."""
    groups: dict[str, list[str]] = defaultdict(list)
    for rid, row in after.items():
        if rid not in before:
            continue
        group = f"{row['model_path'].split('/')[-1]}|{row['system']}|{row['backend']}"
        groups[f"{row['split']}|{group}"].append(rid)
        groups[f"{row['split']}|ALL"].append(rid)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(groups):
        ids = groups[key]
        rec: dict[str, Any] = {"rows": len(ids)}
        for metric in ("ttft", "tpot"):
            truth = f"silicon_{metric}_ms"
            for side, rows in (("before", before), ("after", after)):
                rec[f"{metric}_mape_{side}"] = _mape(
                    [_ape(rows[i][f"twin_{metric}_ms"], rows[i][truth]) for i in ids]
                )
            estimated = [i for i in ids if aic.get(i, {}).get(f"aic_{metric}_ms")]
            rec[f"aic_{metric}_rows"] = len(estimated)
            rec[f"aic_{metric}_mape"] = _mape(
                [_ape(aic[i][f"aic_{metric}_ms"], after[i][truth]) for i in estimated]
            )
            rec[f"twin_{metric}_mape_on_aic_rows"] = _mape(
                [_ape(after[i][f"twin_{metric}_ms"], after[i][truth]) for i in estimated]
            )
        rec["rows_changed"] = sum(
            1
            for i in ids
            if (before[i]["twin_ttft_ms"], before[i]["twin_tpot_ms"])
            != (after[i]["twin_ttft_ms"], after[i]["twin_tpot_ms"])
        )
        out[key] = rec
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="predictions.csv of the run before")
    parser.add_argument("after", type=Path, help="predictions.csv of the run after")
    parser.add_argument("--aic", type=Path, action="append", default=[], help="aic columns")
    parser.add_argument("--out", type=Path, help="write the table as JSON here")
    args = parser.parse_args(argv)
    aic: dict[str, dict[str, str]] = {}
    for path in args.aic:
        for rid, row in _read(path).items():
            aic.setdefault(rid, row)
    table = compare(_read(args.before), _read(args.after), aic)
    for key, rec in table.items():
        print(
            f"{key:55} {rec['rows']:4} TTFT {rec['ttft_mape_before']} -> "
            f"{rec['ttft_mape_after']} (aic {rec['aic_ttft_mape']} on {rec['aic_ttft_rows']}, "
            f"twin {rec['twin_ttft_mape_on_aic_rows']}) TPOT {rec['tpot_mape_before']} -> "
            f"{rec['tpot_mape_after']} (aic {rec['aic_tpot_mape']}) changed {rec['rows_changed']}"
        )
    if args.out:
        args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
