"""The writers under injected faults, and the commands' flags fuzzed, this tree against a
baseline revision (issue 32).

    python benchmarks/bench_reliability.py [--baseline REF] [--quick]

For each tree (this checkout, and the revision REF written out by ``benchmarks/trees.py``)
a child process imports the project from that tree and runs the fault sweep of
``tests/fault_injection.py`` (the same instrument for both trees: it patches ``os`` and
pyarrow, not the project): for ``simulate``, ``workload generate/import/export``,
``report capacity`` and ``calibrate``, the Nth write, rename or fsync fails with ENOSPC or
EIO, or the process dies there, for every N (a report: the first call and its last 12,
the render and its commit); after each, the outputs must be the previous complete ones
or the new complete set, with no temporary left by a failed run, and after a kill the
next run must clean up and complete.

Writes ``benchmarks/results/reliability.json``: per tree, per command and mode, the
faults injected and how many left something wrong (with up to three examples), and the
fuzz cases run and how many failed. Target: zero of either on this tree. ``--quick``
leaves out ``calibrate`` and the EIO mode.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trees import ROOT, child_env, export_tree

RESULTS = ROOT / "benchmarks" / "results" / "reliability.json"
COMMANDS = ("simulate", "generate", "import", "export", "report", "calibrate")
MODES = ("ENOSPC", "EIO", "kill", "term")
REPORT_TAIL = 12  # a report's calls: the first and its last 12 (figures, pages, commit)

_CHILD = """
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from fault_injection import CASES, sweep, tail
plan, out = json.loads(sys.argv[2]), sys.argv[3]
found = {}
for name, mode, k in plan:
    with tempfile.TemporaryDirectory() as d:
        n, wrong = sweep(CASES[name], Path(d), mode, None if k is None else tail(k))
    bad = {w.split(":")[0] for w in wrong}  # faults with anything wrong (one may break two rules)
    found[f"{name}/{mode}"] = {"faults": n, "wrong": len(bad), "examples": wrong[:3]}
import fuzz_commands as fc
pristine = Path(tempfile.mkdtemp()) / "inputs"
fc.make_inputs(pristine)
cases = fc.catalog()
failed = []
for case in cases:
    problems = fc.check(case, pristine, pristine.parent / "w", timeout_s=60)
    if problems:
        failed.append(f"{case.id}: {problems[0][:200]}")
found["fuzz"] = {"cases": len(cases), "failed": len(failed), "examples": failed}
Path(out).write_text(json.dumps(found))
"""


def measure(tree: Path, plan: list[tuple[str, str, int | None]]) -> dict:
    """Run the sweep of ``plan`` in a child importing the project from ``tree``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "found.json"
        env = {**child_env(tree), "TWIN_PROFILES_DIR": tmp}
        args = [str(ROOT / "tests"), json.dumps(plan), str(out)]
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, *args],
            env=env,
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            sys.exit(f"the sweep failed on {tree}:\n{proc.stderr[-3000:]}")
        found = json.loads(out.read_text())
    fuzz = found.pop("fuzz")
    faults = sum(v["faults"] for v in found.values())
    wrong = sum(v["wrong"] for v in found.values())
    return {
        "faults": faults,
        "wrong": wrong,
        "fuzz_cases": fuzz["cases"],
        "fuzz_failed": fuzz["failed"],
        "seconds": round(time.perf_counter() - t0, 1),
        "cases": found,
        "fuzz_failures": fuzz["examples"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", default="HEAD~1", help="git revision to compare with")
    ap.add_argument("--quick", action="store_true", help="no calibrate, no EIO mode")
    args = ap.parse_args()
    commands = [c for c in COMMANDS if not (args.quick and c == "calibrate")]
    modes = [m for m in MODES if not (args.quick and m == "EIO")]
    plan = [(c, m, REPORT_TAIL if c == "report" else None) for c in commands for m in modes]
    with tempfile.TemporaryDirectory() as tmp:
        base_tree = Path(tmp) / "baseline"
        sha = export_tree(args.baseline, base_tree)
        baseline = measure(base_tree, plan)
    this = measure(ROOT, plan)
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    result = {
        "what": "writers under injected faults: outcomes neither old nor new outputs",
        "command": " ".join(["python", "benchmarks/bench_reliability.py", *sys.argv[1:]]),
        "plan": plan,
        "baseline": {"revision": args.baseline, "commit": sha, **baseline},
        "this": {"commit": head, "dirty": bool(_dirty()), **this},
        "target": "this tree: 0 faults leaving anything wrong, 0 fuzz cases failed",
        "met": this["wrong"] == 0 and this["fuzz_failed"] == 0,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    for label, r in (("baseline", baseline), ("this tree", this)):
        wrong, faults, secs = r["wrong"], r["faults"], r["seconds"]
        print(f"{label}: {wrong} of {faults} faults left something wrong ({secs} s)")
        for key, v in r["cases"].items():
            if v["wrong"]:
                print(f"  {key}: {v['wrong']} of {v['faults']}, e.g. {v['examples'][0]}")
        print(f"{label}: {r['fuzz_failed']} of {r['fuzz_cases']} fuzz cases failed")
        for example in r["fuzz_failures"][:5]:
            print(f"  {example}")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


def _dirty() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "twin"],
        capture_output=True,
        text=True,
    ).stdout


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
