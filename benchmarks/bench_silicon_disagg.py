"""The disaggregated rows of NVIDIA's ``silicon_sample.csv`` as a held-out check (issue 36).

Run: ``python benchmarks/bench_silicon_disagg.py [--csv PATH] [--configs DIR]
[--no-aiconfigurator]`` (needs the ``twin[aic]`` extra: the CSV and the model configs are
read from the installed ``aiconfigurator-core``).

Every disaggregated row (``mode == disagg``) the twin can express
(:mod:`twin.validate.silicon_disagg`: each pool an aggregated row the twin expresses, an
engine whose P/D serving is modelled, worker counts given) is run as its benchmark ran
(``c`` closed-loop clients, random prompts, exactly ``osl`` tokens) on its pools, and the
mean TTFT and TPOT are scored against the measurement; nothing is fitted on these rows.
The rows not expressed are counted by reason. Beside them: the aggregated rows' figures
from ``benchmarks/results/silicon.json`` (not rerun here), and aiconfigurator's own
disaggregated estimate where the package is installed.

Writes ``benchmarks/results/silicon_disagg.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from twin.atomic import write_text_atomic
from twin.validate import silicon as sil
from twin.validate import silicon_disagg as sd

RESULTS = Path(__file__).resolve().parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--csv", type=Path, default=None)
    ap.add_argument("--configs", type=Path, default=None)
    ap.add_argument("--no-aiconfigurator", action="store_true")
    ap.add_argument("--results", type=Path, default=RESULTS / "silicon_disagg.json")
    args = ap.parse_args()
    started = time.perf_counter()
    rows = sd.read_disagg_rows(args.csv)
    plans, reasons = sd.plan_disagg_rows(rows, args.configs)
    by_id = {d.row.id: d for d in rows}
    results: list[dict[str, Any]] = []
    for plan in plans:
        result = sd.score_disagg_row(plan, by_id[plan.row.id], not args.no_aiconfigurator)
        results.append(result)
        print(json.dumps(result), flush=True)
    summary = sil.summarize(results, reasons, len(rows))
    aggregated = RESULTS / "silicon.json"
    out = {
        "what": "the twin against the measured disaggregated rows of silicon_sample.csv "
        "(held out: nothing fitted on them)",
        "csv": str(args.csv or sil.default_csv()),
        "summary": summary,
        "results": results,
        # The aggregated rows' overall figures, as benchmarks/bench_silicon.py last wrote them.
        "aggregated_rows": (
            json.loads(aggregated.read_text()).get("summary", {}).get("splits", {}).get("all", {})
            if aggregated.is_file()
            else None
        ),
        "machine": platform.processor() or platform.machine(),
        "wall_s": time.perf_counter() - started,
    }
    write_text_atomic(args.results, json.dumps(out, indent=1, default=str) + "\n")
    n = summary["rows"]
    why = ", ".join(f"{v} {k}" for k, v in summary["not_expressed"].items())
    print(
        f"{n['read']} disaggregated rows: {n['expressed']} expressed, "
        f"{n['not_expressed']} not ({why})"
    )


if __name__ == "__main__":
    main()
