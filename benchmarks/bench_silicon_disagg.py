"""The disaggregated rows of NVIDIA's ``silicon_sample.csv`` as a held-out check (issue 36).

Run: ``python benchmarks/bench_silicon_disagg.py [--csv PATH] [--configs DIR]
[--limit N] [--jobs N] [--aic-from JSON] [--no-aiconfigurator]`` (needs the ``twin[aic]``
extra: the CSV and the model configs are read from the installed ``aiconfigurator-core``).

Every disaggregated row (``mode == disagg``) the twin can express
(:mod:`twin.validate.silicon_disagg`: each pool an aggregated row the twin expresses, its
expert and attention-DP layout included, an engine whose P/D serving is modelled, worker
counts given) is run as its benchmark ran (``c`` closed-loop clients, random prompts,
exactly ``osl`` tokens) on its pools, and the mean TTFT and TPOT are scored against the
measurement; nothing is fitted on these rows. The rows not expressed are counted by
reason. The per (model, system, backend) figures are set beside aiconfigurator's own
disaggregated estimate of the same rows (where the package is installed) and beside the
aggregated rows of the same models as ``benchmarks/bench_silicon.py`` last scored them
(the per-row files of ``benchmarks/results/silicon``, ``silicon-mla`` and ``silicon-dp``;
not rerun here).

``--limit N`` keeps N expressed rows spread evenly (a quick run); ``--aic-from`` reuses
aiconfigurator's estimates from an earlier ``silicon_disagg.json`` (they depend on the row
and aiconfigurator's release, not on the twin).

Writes ``benchmarks/results/silicon_disagg.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench_silicon import spread

from twin.atomic import write_text_atomic
from twin.errors import TwinError
from twin.validate import silicon as sil
from twin.validate import silicon_disagg as sd

RESULTS = Path(__file__).resolve().parent / "results"
# The aggregated rows' per-row files (benchmarks/bench_silicon.py --out ...).
AGGREGATED = ("silicon", "silicon-mla", "silicon-dp")


def model_system_backend(result: dict[str, Any]) -> str:
    """``DeepSeek-V3|gb200|sglang``: a result's model (the last part of its path), system
    and backend."""
    return f"{str(result['model_path']).rsplit('/', 1)[-1]}|{result['system']}|{result['backend']}"


def aggregated_results(folder: Path = RESULTS) -> list[dict[str, Any]]:
    """The aggregated rows' scored results from the per-row files (``predictions.csv``)."""
    out: list[dict[str, Any]] = []
    for name in AGGREGATED:
        path = folder / name / "predictions.csv"
        if not path.is_file():
            continue
        with path.open(newline="", encoding="utf-8") as f:
            for raw in csv.DictReader(f):
                row: dict[str, Any] = dict(raw)
                for key in list(row):
                    if key.endswith(("_ms", "_ape")):
                        text = (row[key] or "").strip()
                        row[key] = float(text) if text else None
                row["source"] = name
                out.append(row)
    return out


def side_by_side(
    results: Sequence[dict[str, Any]], aggregated: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """Per (model, system, backend): the disaggregated rows' twin (and aiconfigurator)
    figures, the aggregated rows' of the same (model, system, backend), and of the same
    model on any system and backend."""
    disagg_keys = sorted({model_system_backend(r) for r in results})
    out: dict[str, Any] = {}
    for key in disagg_keys:
        model = key.split("|", 1)[0]
        same = [r for r in aggregated if model_system_backend(r) == key]
        any_system = [r for r in aggregated if model_system_backend(r).split("|", 1)[0] == model]
        out[key] = {
            "disaggregated": sil.side_by_side(
                [r for r in results if model_system_backend(r) == key]
            ),
            "aggregated_same_system": sil.side_by_side(same) if same else None,
            "aggregated_same_model": sil.side_by_side(any_system) if any_system else None,
            "aggregated_sources": sorted({r["source"] for r in any_system}),
        }
    return out


def read_aic(path: Path) -> dict[str, dict[str, Any]]:
    """aiconfigurator's estimates by row id from an earlier ``silicon_disagg.json``."""
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TwinError(f"--aic-from {path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise TwinError(f"--aic-from {path}: not a readable JSON file ({err})") from None
    keys = ("aic_ttft_ms", "aic_tpot_ms", "aic_error")
    return {
        r["id"]: {k: r.get(k) for k in keys}
        for r in earlier.get("results", [])
        if isinstance(r, dict) and "id" in r and any(r.get(k) is not None for k in keys)
    }


def score(plan: sil.RowPlan, d: sd.DisaggRow, aic: bool) -> dict[str, Any]:
    """One row scored (a worker's task)."""
    return sd.score_disagg_row(plan, d, aic)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--configs", type=Path, default=None)
    ap.add_argument("--no-aiconfigurator", action="store_true")
    ap.add_argument("--limit", type=int, default=None, help="at most N rows, spread evenly")
    ap.add_argument("--jobs", type=int, default=1, help="local worker processes")
    ap.add_argument("--aic-from", type=Path, default=None, help="reuse an earlier run's estimates")
    ap.add_argument("--results", type=Path, default=RESULTS / "silicon_disagg.json")
    args = ap.parse_args()
    if args.jobs < 1:
        raise SystemExit("error: --jobs: must be at least 1")
    started = time.perf_counter()
    rows = sd.read_disagg_rows(args.csv)
    expressible, reasons = sd.plan_disagg_rows(rows, args.configs)
    plans = spread(expressible, args.limit)
    by_id = {d.row.id: d for d in rows}
    earlier = read_aic(args.aic_from) if args.aic_from else {}
    aic = not args.no_aiconfigurator
    results: list[dict[str, Any]] = []

    def done(plan: sil.RowPlan, result: dict[str, Any]) -> None:
        estimate = earlier.get(plan.row.id)
        if aic and estimate is not None:
            result.update({k: v for k, v in estimate.items() if v is not None})
            for metric in ("ttft", "tpot"):
                pred = result.get(f"aic_{metric}_ms")
                result[f"aic_{metric}_ape"] = (
                    sil.ape(pred, result[f"silicon_{metric}_ms"]) if pred is not None else None
                )
        results.append(result)
        print(json.dumps(result), flush=True)

    def task(p: sil.RowPlan) -> tuple[Any, ...]:
        return (p, by_id[p.row.id], aic and p.row.id not in earlier)

    if args.jobs <= 1:
        for p in plans:
            done(p, score(*task(p)))
    else:
        from twin.workers import run_in_pool

        run_in_pool(score, plans, task, args.jobs, done)
    results.sort(key=lambda r: str(r["id"]))
    summary = sil.summarize(results, reasons, len(rows))
    summary["rows"]["left_out_by_limit"] = len(expressible) - len(plans)
    out = {
        "what": "the twin against the measured disaggregated rows of silicon_sample.csv "
        "(held out: nothing fitted on them), per (model, system, backend) beside "
        "aiconfigurator's disaggregated estimate and the aggregated rows of the same models",
        "csv": str(args.csv or sil.default_csv()),
        "command": {"limit": args.limit, "jobs": args.jobs, "aic_from": str(args.aic_from or "")},
        "summary": summary,
        "by_model_system_backend": side_by_side(results, aggregated_results()),
        "results": results,
        "machine": platform.processor() or platform.machine(),
        "wall_s": time.perf_counter() - started,
    }
    write_text_atomic(args.results, json.dumps(out, indent=1, default=str) + "\n")
    n = summary["rows"]
    why = ", ".join(f"{v} {k}" for k, v in summary["not_expressed"].items())
    print(
        f"{n['read']} disaggregated rows: {n['expressed']} expressed and run "
        f"({n['left_out_by_limit']} more left out by --limit), {n['twin_refused']} refused by "
        f"the twin, {n['not_expressed']} not expressed ({why})"
    )
    for key, block in out["by_model_system_backend"].items():
        print(key, json.dumps(block, default=str))


if __name__ == "__main__":
    main()
