"""Mutation check of session 27's rules (helper review27): each entry of mutations.json
replaces one line of a rule, runs the tests that should catch it, and restores the file.

    cd WORKTREE && python benchmarks/results/review27/mutations.py [NAME ...]
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path.cwd()
PY = sys.executable


def main() -> None:
    here = Path(__file__).with_name("mutations.json")
    only = sys.argv[1:]
    for m in json.loads(here.read_text()):
        if only and m["name"] not in only:
            continue
        path = ROOT / m["file"]
        src = path.read_text()
        assert src.count(m["old"]) == 1, m["name"]
        path.write_text(src.replace(m["old"], m["new"]))
        try:
            pytest = f"{PY} -m pytest -x -q -p no:cacheprovider -m 'not slow or slow'"
            cmd = f"PYTHONPATH=. nice -n 5 {pytest} {m['tests']}"
            run = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True)
            last = run.stdout.strip().splitlines()[-1]
            verdict = "CAUGHT" if run.returncode else "SURVIVED"
            print(f"{m['name']:22s} {verdict}: {last}", flush=True)
        finally:
            path.write_text(src)


if __name__ == "__main__":
    main()
