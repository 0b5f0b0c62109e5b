"""Aggregated vs disaggregated serving on the same GPUs (issue 36, first part).

Run: ``python benchmarks/bench_disagg.py [--quick] [--results PATH] [--engine NAME]``
(``--engine sglang``: the same runs under SGLang's rules; the results file is vLLM's).

The load: the ``fixed`` generator's benchmark requests (4,096 input tokens, 256 output
tokens, no shared prefix), Poisson at several request rates for 300 simulated seconds
(the first 20% warm-up), llama-3-8b under ``--engine vllm`` on H200s (tp 1). Each rate
runs on 2 GPUs aggregated (2 replicas, vLLM's chunked prefill mixes prefills into the
decode steps) and as 1P1D (a prefill worker and a decode worker, the KV over a 400 Gb/s
NIC); and on 4 GPUs as 4 replicas, 1P3D and 2P2D. Reported per run: P95 TPOT, P95 TTFT,
whether P95 TPOT <= the target, and the run's CPU seconds; the CPU ratio of each
disaggregated run to the aggregated run with the same GPUs (the issue's target: <= 1.5x).

Then, per rate, ``twin plan`` over the layouts agg, 1p1d and 1p2d (H200, vLLM, tp 1,
the same target): the cheapest deployment meeting it, and the fewest GPUs aggregated
serving needs, so the crossover (the rates where a disaggregated layout is the cheapest)
is read off the table; and one 1P1D run with the decode worker on an H100 (per-pool
hardware, issue 36's second part).

Writes ``benchmarks/results/disagg.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from twin.atomic import write_text_atomic
from twin.engine import build_run
from twin.workloads.generators import get_generator
from twin.workloads.writer import WorkloadWriter

# Chosen after a first look at the TPOTs this load gives (5-7 ms): between the
# aggregated and the disaggregated P95 at 2 requests/s on 2 GPUs, not a product SLO.
TPOT_TARGET_S = 0.0065
MODEL, GPU, ENGINE = "llama-3-8b", "h200", "vllm"
DURATION_S = 300.0


def workload(path: Path, rate: float) -> Path:
    cls = get_generator("fixed")
    gen = cls(cls.parse_params({"isl": "4096", "osl": "256"}))
    sessions = int(rate * DURATION_S * 1.3) + 10
    with WorkloadWriter(path, gen.metadata(sessions, rate, 0, 8192)) as w:
        w.write_all(gen.rows(sessions, rate, 0, 8192))
    return path


def one(path: Path, rate: float, layout: dict[str, Any], engine: str = ENGINE) -> dict[str, Any]:
    run = build_run(
        path,
        model=MODEL,
        gpu=GPU,
        engine=engine,
        cache_gb="auto",
        session_rate=rate,
        duration_s=DURATION_S,
        workload_cache=path.parent,
        **layout,
    )
    cpu = time.process_time()
    s = run.simulate().to_dict()
    cpu = time.process_time() - cpu
    tpot95, ttft95 = s["tpot_s"]["p95"], s["ttft_s"]["p95"]
    out: dict[str, Any] = {
        "layout": layout,
        "gpus": layout.get("replicas")
        or layout.get("prefill_workers", 0) + layout.get("decode_workers", 0),
        "p95_tpot_s": tpot95,
        "p95_ttft_s": ttft95,
        "meets_tpot": tpot95 is not None and tpot95 <= TPOT_TARGET_S,
        "steady_state": s.get("steady_state", {}).get("verdict"),
        "cpu_s": cpu,
    }
    if "pools" in s:
        pools = s["pools"]
        out["prefill_utilisation"] = pools["prefill"]["utilisation"]["mean"]
        out["decode_utilisation"] = pools["decode"]["utilisation"]["mean"]
        out["p95_transfer_s"] = pools["transfer"]["seconds"]["p95"]
    else:
        out["utilisation"] = s["utilisation"]["mean"]
    return out


def plan_at(path: Path, rate: float, out: Path, engine: str = ENGINE) -> dict[str, Any]:
    """The plan over agg/1p1d/1p2d at ``rate``: the winner and aggregated serving's fewest."""
    from twin.reports.plan import plan

    cpu = time.process_time()
    found = plan(
        path,
        out,
        model=MODEL,
        slos=[f"p95_tpot<={TPOT_TARGET_S * 1e3:g}ms"],
        session_rate=rate,
        duration_s=DURATION_S,
        gpus=[GPU],
        engines=[engine],
        tp=[1],
        layouts=["agg", "1p1d", "1p2d"],
    )
    cpu = time.process_time() - cpu
    win = found.winner
    agg = next(c for c in found.candidates if c.candidate.layout == "agg")
    return {
        "rate": rate,
        "winner": None if win is None else win.candidate.layout,
        "winner_replicas": None if win is None else win.replicas,
        "winner_gpus": None if win is None else win.gpus,
        "winner_usd_per_hour": None if win is None else win.usd_per_hour,
        "aggregated_outcome": agg.outcome,
        "aggregated_gpus": agg.gpus,
        "outcomes": {c.candidate.layout: c.outcome for c in found.candidates},
        "points_run": found.counts["points_run"],
        "cpu_s": cpu,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--results", type=Path, default=Path("benchmarks/results/disagg.json"))
    ap.add_argument("--engine", default=ENGINE, help="engine mode (the results: vllm)")
    args = ap.parse_args()
    engine = args.engine
    rates = [1.0, 2.0] if args.quick else [1.0, 2.0, 3.0, 4.0]
    groups = {
        2: [{"replicas": 2}, {"prefill_workers": 1, "decode_workers": 1}],
        4: [
            {"replicas": 4},
            {"prefill_workers": 1, "decode_workers": 3},
            {"prefill_workers": 2, "decode_workers": 2},
        ],
    }
    rows: list[dict[str, Any]] = []
    plans: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in rates:
            path = workload(Path(tmp) / f"fixed-{rate:g}.parquet", rate)
            for gpus, layouts in groups.items():
                base = None
                for layout in layouts:
                    r = one(path, rate, layout, engine)
                    r["rate"] = rate
                    r["gpus"] = gpus
                    if base is None:
                        base = r
                    else:
                        r["cpu_vs_aggregated"] = r["cpu_s"] / base["cpu_s"]
                    rows.append(r)
                    print(json.dumps(r), flush=True)
            mixed = one(
                path,
                rate,
                {"prefill_workers": 1, "decode_workers": 1, "decode_gpu": "h100"},
                engine,
            )
            mixed["rate"], mixed["gpus"], mixed["decode_gpu"] = rate, 2, "h100"
            rows.append(mixed)
            print(json.dumps(mixed), flush=True)
            plans.append(plan_at(path, rate, Path(tmp) / f"plan-{rate:g}", engine))
            print(json.dumps(plans[-1]), flush=True)
    result = {
        "what": "aggregated vs disaggregated on the same GPUs; P95 TPOT against a target",
        "model": MODEL,
        "gpu": GPU,
        "engine": engine,
        "workload": "fixed: isl 4096, osl 256, Poisson requests",
        "duration_s": DURATION_S,
        "tpot_target_s": TPOT_TARGET_S,
        "machine": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "runs": rows,
        "plans": plans,
    }
    write_text_atomic(args.results, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
