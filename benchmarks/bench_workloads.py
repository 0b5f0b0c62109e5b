"""Benchmark: import the Mooncake trace, read it back, describe it.

    python benchmarks/bench_workloads.py [--trace PATH] [--out DIR]

Each step runs in a fresh child process so that its peak RSS is its own: a
small wrapper interpreter runs the step as *its* child and reports
``getrusage(RUSAGE_CHILDREN).ru_maxrss``, which then covers that one step only
(ru_maxrss of children is a running maximum, so measuring every step from this
process would report the largest step each time). Wall time is taken around
the step inside the wrapper, so it includes the step's interpreter start-up
and imports, as a user running the CLI would see.

Steps: (1) import through ``MooncakeImporter`` + ``WorkloadWriter``,
(2) ``Workload.open(...).requests()`` over every request, (3) ``twin workload
info OUT --json`` when that command exists. Numbers are printed as a table and
written atomically to ``benchmarks/results/workloads.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = Path("/work/shared/data/mooncake_synthetic_trace.jsonl")
RESULTS = ROOT / "benchmarks" / "results" / "workloads.json"
# Targets from the performance issue: import in < 20 s and < 2 GB RSS.
TARGET_IMPORT_S = 20.0
TARGET_IMPORT_RSS_MB = 2048.0

_IMPORT = """
import json, sys
from pathlib import Path
from twin.workloads.importers import get_importer
from twin.workloads.writer import WorkloadWriter
src, out = Path(sys.argv[1]), Path(sys.argv[2])
imp = get_importer("mooncake")()
with WorkloadWriter(out, imp.metadata(src)) as w:
    for row in imp.rows(src):
        w.write(row)
print(json.dumps({"requests": w.rows_written, "stored_tokens": w.input_tokens_written}))
"""

_READ = """
import json, sys
from twin.workloads.reader import Workload
w = Workload.open(sys.argv[1])
n = prompt = output = 0
for r in w.requests():
    n += 1
    prompt += len(r.prompt)
    output += len(r.output)
print(json.dumps({"requests": n, "prompt_tokens": prompt, "output_tokens": output}))
"""

# Runs argv[1:] as a child, times it and reports that child's peak RSS (KiB on Linux).
_WRAPPER = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"rc": p.returncode, "wall_s": wall, "rss_kib": rss,
                  "stdout": p.stdout, "stderr": p.stderr}))
"""


def measure(cmd: list[str]) -> dict[str, Any]:
    """Run ``cmd`` in a wrapper process; return wall time, peak RSS and its output."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    wrapped = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *cmd], capture_output=True, text=True, env=env, check=True
    )
    res = json.loads(wrapped.stdout)
    if res["rc"] != 0:
        sys.exit(f"step failed ({' '.join(cmd[:3])} ...):\n{res['stderr'][-2000:]}")
    # ru_maxrss is KiB on Linux and bytes on macOS.
    scale = 1 / 1024 if sys.platform != "darwin" else 1 / 2**20
    return {
        "wall_s": round(res["wall_s"], 3),
        "peak_rss_mb": round(res["rss_kib"] * scale, 1),
        "stdout": res["stdout"],
    }


def twin_info_available() -> bool:
    """True when the ``twin workload info`` command exists and starts."""
    if shutil.which("twin") is None:
        return False
    probe = subprocess.run(
        ["twin", "workload", "info", "--help"], capture_output=True, text=True, check=False
    )
    return probe.returncode == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake JSONL trace")
    parser.add_argument(
        "--out", type=Path, default=None, help="directory for the parquet (default: a temp dir)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="JSON results file")
    args = parser.parse_args()
    if not args.trace.is_file():
        sys.exit(f"{args.trace}: no such trace file")

    with tempfile.TemporaryDirectory() as tmp:
        out_dir = args.out or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        parquet = out_dir / "mooncake.parquet"
        steps: dict[str, dict[str, Any] | None] = {}
        imp = measure([sys.executable, "-c", _IMPORT, str(args.trace), str(parquet)])
        imported = json.loads(imp.pop("stdout"))
        steps["import"] = imp
        read = measure([sys.executable, "-c", _READ, str(parquet)])
        counts = json.loads(read.pop("stdout"))
        steps["read_requests"] = read
        if twin_info_available():
            info = measure(["twin", "workload", "info", str(parquet), "--json"])
            info.pop("stdout")
            steps["twin_workload_info"] = info
        else:
            steps["twin_workload_info"] = None
        parquet_bytes = parquet.stat().st_size

    results = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
        },
        "trace": str(args.trace),
        "trace_bytes": args.trace.stat().st_size,
        "requests": imported["requests"],
        "prompt_tokens": counts["prompt_tokens"],
        "output_tokens": counts["output_tokens"],
        "parquet_bytes": parquet_bytes,
        "steps": steps,
        "targets": {
            "import_wall_s": TARGET_IMPORT_S,
            "import_peak_rss_mb": TARGET_IMPORT_RSS_MB,
            "met": imp["wall_s"] < TARGET_IMPORT_S and imp["peak_rss_mb"] < TARGET_IMPORT_RSS_MB,
        },
    }
    assert counts["requests"] == imported["requests"], "read back a different request count"

    print(
        f"trace {args.trace} ({results['trace_bytes'] / 1e6:.1f} MB): "
        f"{results['requests']:,} requests, {results['prompt_tokens']:,} prompt tokens; "
        f"parquet {parquet_bytes / 1e6:.1f} MB"
    )
    print(f"{'step':<22}{'wall s':>10}{'peak RSS MB':>14}")
    for name, m in steps.items():
        if m is None:
            print(f"{name:<22}{'n/a (command not available)':>24}")
        else:
            print(f"{name:<22}{m['wall_s']:>10.2f}{m['peak_rss_mb']:>14.1f}")
    verdict = "met" if results["targets"]["met"] else "MISSED"
    print(f"import target (< {TARGET_IMPORT_S:g} s, < {TARGET_IMPORT_RSS_MB:g} MB): {verdict}")

    sys.path.insert(0, str(ROOT))
    from twin.atomic import write_text_atomic

    write_text_atomic(args.results, json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
