"""Benchmark a 1,000-point capacity sweep on a local two-node Ray cluster against the same
sweep run locally, point for point.

    python benchmarks/bench_ray_sweep.py [--quick] [--client] [--local-jobs 2] [--results PATH]

1. **Workload.** A small closed-loop chat workload (``twin workload generate
   chat -n 8 --seed 1``, about 90 requests) on ``tiny-hybrid`` with the
   shipped H100 profile, so one point takes a fraction of a second and the
   sweep measures the executors, not the engine.
2. **Sweep.** ``twin report capacity`` over 12 cache sizes x 4 policies
   (``vanilla``, ``vllm+``, ``sglang+``, ``marconi``) plus 2 engine modes
   (``vllm``, ``sglang``: one shared-pool point each, whatever the cache) =
   50 configurations, x 10 session rates x 2 seeds = 1,000 points, with an
   SLO so the recommendation runs too (``--quick``: 20 points).
3. **Local.** The command with ``--jobs 2`` (this machine's cores), before
   any ray runs.
4. **Ray.** A head and a second node started on this machine
   (``ray.cluster_utils.Cluster``, one CPU each, the second with its own
   ``second_node`` resource), both without ``PYTHONPATH``: they can import
   the project only from what the driver ships (``twin/reports/ray_executor.py``).
   The same command with ``--executor ray --ray-address HEAD`` (``--client``:
   ``ray://HOST:PORT``, through Ray Client as from a laptop), run from a
   driver process that has the project. The cluster is shut down at the end,
   also on a failure.
5. **Compare.** Both ``results.parquet`` files must be byte-identical (the
   same rows, the same numbers, in the same order), every point's row equal,
   and ``report.md`` / ``report.html`` identical but for the command line
   they quote.

Recorded: wall seconds and points per second of each run (and their ratio),
also up to the results file's last write (the sweep without rendering the
report, whose 61 figures at 10 session rates take a minute or more here),
the points each ray node computed (from the command's ``ray: points per
node`` line, mapped to head and second node), the peak RSS of each command's
own process (and of the local run's largest pool worker), and the peak summed
RSS of every process under this benchmark (the local run's command and pool
workers; the ray run's driver, GCS, raylets and workers), sampled twice a
second; and the load average, since the machine is shared. Results are
printed and written atomically to ``benchmarks/results/ray_sweep.json``; the
exit status is 1 if the runs differ or a node computed nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import os
import platform
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "ray_sweep.json"
CACHES_GB = (0.0002, 0.0003, 0.0005, 0.0007, 0.001, 0.0015)
CACHES_GB += (0.002, 0.003, 0.004, 0.006, 0.008, 0.012)
POLICIES = ("vanilla", "vllm+", "sglang+", "marconi", "vllm", "sglang")  # the last two: modes
RATES = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)
SEEDS = 2
SLO = "p95_ttft<=0.3ms"  # tiny-hybrid's TTFTs are a few tenths of a millisecond
NODES_LINE = re.compile(r"^ray: points per node: (.*)$", re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _page_kb() -> int:
    return os.sysconf("SC_PAGE_SIZE") // 1024


def _tree_rss_mb(root: int) -> float:
    """Summed resident memory of every process under ``root`` (not ``root`` itself)."""
    parent: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/statm") as f:
                pages = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        parent[int(entry)] = int(fields[1])
        rss[int(entry)] = pages
    total, stack = 0, [p for p, pp in parent.items() if pp == root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(p for p, pp in parent.items() if pp == pid)
    return total * _page_kb() / 1024


class TreeMemory:
    """Samples :func:`_tree_rss_mb` of this process every half second; ``peak_mb``."""

    def __init__(self) -> None:
        self.peak_mb, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.peak_mb = max(self.peak_mb, _tree_rss_mb(os.getpid()))

    def __enter__(self) -> TreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


# Runs the CLI as ``python -m twin`` does, then reports its own peak RSS and its children's.
_TWIN_WITH_RSS = """
import atexit, resource, runpy, sys
def peak():
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"PEAK_RSS_KB {own} {kids}", file=sys.stderr)
atexit.register(peak)
sys.argv = ["twin", *sys.argv[1:]]
runpy.run_module("twin", run_name="__main__")
"""
PEAK_LINE = re.compile(r"^PEAK_RSS_KB (\d+) (\d+)$", re.M)


def _twin(args: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    """Run ``twin ARGS``; its wall time, stderr and peak memory (fails loudly)."""
    start, started_at = time.perf_counter(), time.time()
    with TreeMemory() as tree:
        proc = subprocess.Popen(
            [sys.executable, "-c", _TWIN_WITH_RSS, *args],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            out, err = proc.communicate()
        except BaseException:
            proc.kill()  # ours, by its id
            proc.wait()
            raise
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"twin {' '.join(args)} failed ({proc.returncode}):\n{out}\n{err}")
    peak = PEAK_LINE.search(err)
    own, kids = (int(peak.group(1)), int(peak.group(2))) if peak else (0, 0)
    return {
        "wall_s": round(wall, 2),
        "started_at": started_at,
        "stderr": err,
        "peak_rss_mb_command": round(own / 1024, 1),
        "peak_rss_mb_largest_local_worker": round(kids / 1024, 1),
        "peak_tree_rss_mb": round(tree.peak_mb, 1),
    }


def _without_command(text: str, command: str) -> str:
    """``text`` with the quoted command line (as the report prints it, or HTML-escaped) cut."""
    return text.replace(command, "COMMAND").replace(html.escape(command), "COMMAND")


def _compare(local: Path, ray_out: Path, commands: dict[str, str]) -> dict[str, Any]:
    """How the ray run's files compare with the local run's."""
    import pyarrow.parquet as pq

    a, b = pq.read_table(local / "results.parquet"), pq.read_table(ray_out / "results.parquet")
    rows_a = {r["key"]: r for r in a.to_pylist()}
    rows_b = {r["key"]: r for r in b.to_pylist()}
    differing = sorted(k for k in rows_a.keys() | rows_b.keys() if rows_a.get(k) != rows_b.get(k))
    found: dict[str, Any] = {
        "rows_local": a.num_rows,
        "rows_ray": b.num_rows,
        "points_differing": len(differing),
        "tables_equal": a.equals(b),
        "results_parquet_byte_identical": (local / "results.parquet").read_bytes()
        == (ray_out / "results.parquet").read_bytes(),
    }
    for name in ("report.md", "report.html"):
        ta = _without_command((local / name).read_text(), commands["local"])
        tb = _without_command((ray_out / name).read_text(), commands["ray"])
        found[f"{name}_identical_but_command"] = ta == tb
    found["equal"] = (
        not differing
        and found["tables_equal"]
        and found["results_parquet_byte_identical"]
        and found["report.md_identical_but_command"]
        and found["report.html_identical_but_command"]
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="20 points (a smoke run)")
    parser.add_argument("--sessions", type=int, default=8, help="chat sessions in the workload")
    parser.add_argument(
        "--local-jobs", type=int, default=2, help="--jobs of the local run (default: 2)"
    )
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help=f"where to write (default: {RESULTS})"
    )
    parser.add_argument(
        "--client",
        action="store_true",
        help="join through Ray Client (--ray-address ray://HOST:PORT, as from a laptop) "
        "instead of the head's own address",
    )
    parser.add_argument(
        "--keep", type=Path, help="keep both runs' output folders (and the workload) here"
    )
    args = parser.parse_args()
    caches, rates, seeds = (
        (CACHES_GB[4:6], RATES[2:4], 1) if args.quick else (CACHES_GB, RATES, SEEDS)
    )
    n_points = ((len(caches) * 4 + 2) * len(rates)) * seeds

    import ray
    from ray.cluster_utils import Cluster

    driver_env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # The nodes get no PYTHONPATH: they inherit this process's environment.
    os.environ.pop("PYTHONPATH", None)
    results: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "ray": ray.__version__,
            "cpus": os.cpu_count(),
            "load_avg_at_start": [round(x, 2) for x in os.getloadavg()],
        },
    }
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name) if args.keep is None else args.keep.resolve()
        tmp.mkdir(parents=True, exist_ok=True)
        workload = tmp / "chat.parquet"
        gen = ["workload", "generate", "chat", "-n", str(args.sessions), "--session-rate", "1"]
        _twin([*gen, "--seed", "1", "-o", str(workload)], driver_env, tmp)
        sweep = ["report", "capacity", str(workload), "-m", "tiny-hybrid", "--gpu", "h100"]
        sweep += ["--cache-gb", ",".join(f"{c:g}" for c in caches), "--policies"]
        sweep += [",".join(POLICIES), "--session-rates", ",".join(f"{r:g}" for r in rates)]
        sweep += ["--seeds", str(seeds), "--slo", SLO]
        local_args = [*sweep, "--out", str(tmp / "local"), "--jobs", str(args.local_jobs)]
        print(f"local sweep of {n_points} points (--jobs {args.local_jobs}) ...", flush=True)
        local = _twin(local_args, driver_env, tmp)
        print(f"  {local['wall_s']:.1f} s", flush=True)

        head: dict[str, Any] = {"num_cpus": 1}
        if args.client:
            head["ray_client_server_port"] = _free_port()
        cluster = Cluster(initialize_head=True, head_node_args=head)
        try:
            second = cluster.add_node(num_cpus=1, resources={"second_node": 1})
            cluster.wait_for_nodes()
            node_ids = {"head": cluster.head_node.node_id, "second": second.node_id}
            ray_args = [*sweep, "--out", str(tmp / "ray"), "--executor", "ray"]
            address = cluster.address
            if args.client:
                address = f"ray://127.0.0.1:{head['ray_client_server_port']}"
            ray_args += ["--ray-address", address]
            print(f"ray sweep on {address} (head + second node) ...", flush=True)
            on_ray = _twin(ray_args, driver_env, tmp)
            print(f"  {on_ray['wall_s']:.1f} s", flush=True)
        finally:
            cluster.shutdown()

        match = NODES_LINE.search(on_ray["stderr"])
        shares = dict(s.rsplit(" ", 1) for s in match.group(1).split(", ")) if match else {}
        per_node = {
            name: sum(int(n) for short, n in shares.items() if node.startswith(short))
            for name, node in node_ids.items()
        }
        commands = {
            "local": shlex.join(["twin", *local_args]),
            "ray": shlex.join(["twin", *ray_args]),
        }
        compared = _compare(tmp / "local", tmp / "ray", commands)
        for run, name in ((local, "local"), (on_ray, "ray")):
            written = (tmp / name / "results.parquet").stat().st_mtime
            run["points_done_s"] = round(written - run["started_at"], 2)

    def run_facts(run: dict[str, Any]) -> dict[str, Any]:
        return {
            "wall_s": run["wall_s"],
            "points_per_s": round(n_points / run["wall_s"], 2),
            # Start to the results file's last write: the sweep without the report's figures.
            "points_done_s": run["points_done_s"],
            "points_per_s_sweep": round(n_points / run["points_done_s"], 2),
            "peak_rss_mb_command": run["peak_rss_mb_command"],
            "peak_tree_rss_mb": run["peak_tree_rss_mb"],
        }

    results["sweep"] = {
        "points": n_points,
        "workload": f"twin workload generate chat -n {args.sessions} --session-rate 1 --seed 1",
        "command": shlex.join(["twin", *sweep]).replace(str(workload), "chat.parquet"),
        "local_jobs": args.local_jobs,
    }
    results["local"] = {
        **run_facts(local),
        "peak_rss_mb_largest_worker": local["peak_rss_mb_largest_local_worker"],
    }
    results["ray"] = {
        **run_facts(on_ray),
        "cluster": "ray.cluster_utils.Cluster: head (1 CPU) + second node (1 CPU), no PYTHONPATH",
        "joined_through": "Ray Client (ray://)" if args.client else "the head's address",
        "points_per_node": per_node,
    }
    results["ray_over_local_wall"] = round(on_ray["wall_s"] / local["wall_s"], 3)
    results["ray_over_local_sweep"] = round(on_ray["points_done_s"] / local["points_done_s"], 3)
    results["compare"] = compared
    results["machine"]["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["target_met"] = bool(
        compared["equal"]
        and sum(per_node.values()) == n_points
        and all(n > 0 for n in per_node.values())
    )
    print(
        f"{n_points} points: local {local['wall_s']:.1f} s "
        f"({n_points / local['wall_s']:.1f} points/s), "
        f"ray {on_ray['wall_s']:.1f} s ({n_points / on_ray['wall_s']:.1f} points/s), "
        f"ray/local {results['ray_over_local_wall']:.2f} (sweeps alone: local "
        f"{local['points_done_s']:.1f} s, ray {on_ray['points_done_s']:.1f} s, "
        f"{results['ray_over_local_sweep']:.2f}); per node {per_node}; "
        f"{'equal' if compared['equal'] else 'DIFFERENT'} ({compared})"
    )
    sys.path.insert(0, str(ROOT))
    from twin.atomic import write_text_atomic

    write_text_atomic(args.results, json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.results}")
    if not results["target_met"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
