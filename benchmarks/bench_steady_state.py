"""Same load, same verdict, whatever the workload file's size (issue 30).

Run: ``python benchmarks/bench_steady_state.py [--quick] [--results PATH]``.

The issue's example: one H100 serving Qwen3.5-9B with vLLM (``--engine vllm``,
the shared KV pool) at 16 chat sessions/s. On main before issue 30 the
workload's session count set the answer: P95 TTFT 26.5 ms with 100 sessions,
171.8 ms with 1,000 and 174,741 ms with 4,000, each reported as if it were the
capacity. This benchmark runs the same three files (``chat``, seed 0):

- *as before* (no ``--duration``): each file's own length, and the verdict the
  summary now gives it;
- *with* ``--duration``: every file stretched to the same simulated time at the
  rate (a generated file is regenerated with more sessions, the first ones
  identical), so the three runs are the same run: one verdict;
- a *stable* rate with ``--duration`` and three seeds per file size: P95 TTFT
  with its 95% seed interval per size, which must agree.

Writes ``benchmarks/results/steady-state.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from twin.atomic import write_text_atomic
from twin.engine.run import build_run
from twin.workloads.generators import get_generator
from twin.workloads.writer import WorkloadWriter

RESULTS = Path(__file__).resolve().parent / "results" / "steady-state.json"
SIZES = (100, 1000, 4000)
OVERLOAD_RATE = 16.0  # sessions/s: the example
SETUP = {"model": "qwen3.5-9b", "gpu": "h100", "engine": "vllm", "cache_gb": "auto"}


def _generate(path: Path, sessions: int, seed: int = 0) -> Path:
    gen = get_generator("chat")()
    with WorkloadWriter(path, gen.metadata(sessions, 1.0, seed, 32768)) as w:
        w.write_all(gen.rows(sessions, 1.0, seed, 32768))
    return path


def _run(path: Path, cache: Path, **settings: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    summary = build_run(path, workload_cache=cache, **SETUP, **settings).simulate()
    steady, p95 = summary.steady_state, summary.latency.ttft_s.p95
    assert steady is not None  # a --duration run knows the end of its arrivals
    return {
        **{k: v for k, v in settings.items() if k != "workload_cache"},
        "sessions_in_file": summary.provenance.workload.sessions,
        "requests_measured": summary.requests.measured,
        "verdict": steady.verdict,
        "reason": steady.reason,
        "ttft_p95_ms": None if p95 is None else p95 * 1e3,
        "throughput_rps": summary.throughput.requests_per_s,
        "utilisation": summary.cluster.utilisation.mean,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def _interval(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% t-interval."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter durations (a smoke run)")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--stable-rate", type=float, default=0.5, help="sessions/s of the stable runs")
    args = ap.parse_args()
    overload_s = 120.0 if args.quick else 600.0
    stable_s, stable_warmup = (900.0, 450.0) if args.quick else (2400.0, 800.0)
    seeds = 3
    out: dict[str, Any] = {"setup": SETUP, "machine": platform.platform()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cache = root / "cache"
        files = {n: _generate(root / f"chat-{n}.parquet", n) for n in SIZES}
        out["as_before"] = [_run(files[n], cache, session_rate=OVERLOAD_RATE) for n in SIZES]
        out["with_duration"] = [
            _run(files[n], cache, session_rate=OVERLOAD_RATE, duration_s=overload_s) for n in SIZES
        ]
        stable = []
        for n in SIZES:
            runs = [
                _run(
                    files[n],
                    cache,
                    session_rate=args.stable_rate,
                    duration_s=stable_s,
                    warmup_s=stable_warmup,
                    seed=s,
                )
                for s in range(seeds)
            ]
            p95 = [r["ttft_p95_ms"] for r in runs]
            mean, half = _interval(p95)
            stable.append(
                {
                    "sessions_in_file": n,
                    "verdicts": [r["verdict"] for r in runs],
                    "ttft_p95_ms": p95,
                    "ttft_p95_mean_ms": mean,
                    "ttft_p95_ci_ms": half,
                    "runs": runs,
                }
            )
        out["stable"] = stable
    verdicts = {r["verdict"] for r in out["with_duration"]}
    intervals = [(s["ttft_p95_mean_ms"], s["ttft_p95_ci_ms"]) for s in stable]
    overlap = max(m - h for m, h in intervals) <= min(m + h for m, h in intervals)
    out["targets"] = {
        "one_verdict_with_duration": sorted(verdicts),
        "overloaded_at_16_sessions_per_s": verdicts == {"overloaded"},
        "stable_p95_intervals_overlap": overlap,
        "stable_all_stable": all(v == "stable" for s in stable for v in s["verdicts"]),
    }
    write_text_atomic(args.results, json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(json.dumps(out["targets"], indent=2))
    for s in stable:
        print(
            f"{s['sessions_in_file']:>5} sessions: P95 TTFT {s['ttft_p95_mean_ms']:.1f} "
            f"+- {s['ttft_p95_ci_ms']:.1f} ms ({', '.join(s['verdicts'])})"
        )


if __name__ == "__main__":
    main()
