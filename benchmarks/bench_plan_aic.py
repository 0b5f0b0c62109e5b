"""``twin plan`` beside aiconfigurator's own search, and what real prefix reuse saves (issue 37).

Run: ``python benchmarks/bench_plan_aic.py [--jobs N] [--skip-aic] [--skip-mooncake]
[--models llama,qwen] [--results PATH]``.

**Side by side** (needs the ``aic`` extra's ``aiconfigurator`` command; without it this
part is skipped and the results say so). A fixed ISL/OSL load without prefix reuse
(``workload generate fixed``: random prompts, every request its own session), the same
targets for both tools, H200s under vLLM:

- aiconfigurator's own search, ``aiconfigurator cli default --model HF_ID --system
  h200_sxm --backend vllm --isl ISL --osl OSL --ttft T --tpot P --target-request-rate R``
  (its "find the minimum GPUs" mode: every TP, aggregated and disaggregated; its TTFT and
  TPOT are its estimates for a steady batch, not percentiles), read from the CSVs it saves;
- ``twin plan`` at R requests/s (Poisson), the targets as P95s, over tp 1 and 2 and the
  layouts agg and 1P1D, 120 simulated seconds a point (a judgement call for this 2-core
  machine: long enough for a stable verdict at this rate, short enough for minutes).

Both answers are priced on the twin's shipped table (aiconfigurator has no cost).
Models: Llama-3.1-8B (``meta-llama/Meta-Llama-3.1-8B``) and the Qwen3.5 hybrid MoE
``Qwen/Qwen3.5-35B-A3B`` (aiconfigurator 0.12 ships its config; the twin's preset
``qwen3.5-35b-a3b``). ``qwen-moe`` is the same MoE model with expert parallelism and
attention data parallelism searched on both sides, and ``qwen3-moe`` the dense-attention
MoE ``Qwen/Qwen3-235B-A22B`` (``qwen3-235b-a22b``, 470 GB of bf16 weights: tp 4 and 8):
aiconfigurator's default agg search for a MoE model under vLLM already enumerates ``tp``,
``dp``, ``moe_tp`` and ``moe_ep`` (``aiconfigurator/sdk/task_v2.py``, 0.12.0: 1-16 GPUs a
worker) and reports its pick's ``moe_tp``/``moe_ep``/``dp`` columns, read here; the twin
plans tp 1, 2, 4 with ``--ep auto --dp-attention auto`` (1 and tp each; tp 4 and 8 for
``qwen3-moe``). ``--rate`` sets the load (default 10/s).

**Prefix reuse** (Mooncake FAST'25 conversation trace, ``../shared/data``, its first
900 s: 2,728 requests; an unbounded prefix cache would hit 30.9% of their prompt
tokens): ``twin plan`` on the trace as recorded, and on the same traffic with every
prompt's blocks made unique (each request's hash ids replaced by fresh ones: the same
lengths and arrival times, nothing shared; done on the JSONL here, before the importer),
llama-3.1-8b on H200 under vLLM and SGLang (each in its own prefix-cached pool,
``--cache-gb auto``), tp 1, the prefix-aware router, the trace's
own arrival times for 900 s (180 s warm-up). The saving is the cost ratio of the two
answers; the winner says which engine's cache policy won.

**Routers** (``--routers round-robin,prefix-aware``, default prefix-aware alone, as the
results above were measured): each traffic is planned once per router, the same space and
targets, so the answer says what routing by prefix is worth on top of the caches
(``routers`` in the results: each router's winner on each traffic, and the saving of the
prefix-aware router's answer against round-robin's).

**The router as an axis** (``--routers a,b,... --router-axis``): each traffic is planned
once with the routers as one more axis of the search (``twin plan --routers``), so the
routers' candidates share the pruning and the answer names its router; the results say,
per traffic, the winner and what became of each router's candidates (``router_axis``).
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from twin.atomic import write_text_atomic
from twin.cli.main import run as twin
from twin.reports.plan import plan
from twin.reports.plan_result import PlanResult
from twin.reports.prices import load_prices
from twin.reports.sweep import RESULTS_FILE

RESULTS = Path(__file__).resolve().parent / "results" / "plan_aic.json"
# ../shared/data beside the repository (the trace is not shipped).
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
TRACE = SHARED / "mooncake_conversation_trace.jsonl"
ISL, OSL, RATE = 2048, 256, 10.0
TTFT_MS, TPOT_MS = 500.0, 25.0
MODELS = {
    "llama": ("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B"),
    "qwen": ("qwen3.5-35b-a3b", "Qwen/Qwen3.5-35B-A3B"),
    "qwen-moe": ("qwen3.5-35b-a3b", "Qwen/Qwen3.5-35B-A3B"),
    "qwen3-moe": ("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B"),
}
# The twin's space per model: tp 1-2 x agg/1P1D; with the MoE axes for ``qwen-moe``.
SPACES: dict[str, dict[str, Any]] = {
    "llama": {"tp": [1, 2]},
    "qwen": {"tp": [1, 2]},
    "qwen-moe": {"tp": [1, 2, 4], "ep": ["auto"], "dp_attention": ["auto"]},
    # 470 GB of bf16 weights: 4 H200s at least.
    "qwen3-moe": {"tp": [4, 8], "ep": ["auto"], "dp_attention": ["auto"]},
}
GPU, AIC_SYSTEM = "h200", "h200_sxm"
SIDE_DURATION_S = 120.0
# The trace's first 900 s (2,728 requests): an unbounded prefix cache hits 30.9% of its
# prompt tokens (20.7% over 300 s, 37.4% over the whole hour: conversations build up).
TRACE_S = 900.0
TRACE_WARMUP_S = 180.0
TRACE_SLOS = ("p95_ttft<=5s", "p95_tpot<=60ms")
# Columns of aiconfigurator's best_config_topn.csv read here (0.12.0).
AIC_AGG = ("tp", "pp", "dp", "moe_tp", "moe_ep", "bs", "concurrency", "request_rate", "ttft")
AIC_AGG += ("tpot",)
AIC_DISAGG = ("(p)workers", "(p)tp", "(p)dp", "(p)moe_tp", "(p)moe_ep", "(p)bs")
AIC_DISAGG += ("(d)workers", "(d)tp", "(d)dp", "(d)moe_tp", "(d)moe_ep", "(d)bs")
AIC_BOTH = ("ttft", "tpot", "request_rate", "replicas_needed", "total_gpus_needed")


def _row_values(out: Path, key: str | None) -> dict[str, Any]:
    """P50 and P95 TTFT/TPOT of the winner's seed-0 point (aiconfigurator's numbers are a
    steady batch's, nearer a median than a P95)."""
    if key is None:
        return {}
    rows = pq.read_table(out / RESULTS_FILE).to_pylist()
    row = next((r for r in rows if r["key"] == key), None)
    names = ("ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms")
    return {} if row is None else {n: row.get(n) for n in names}


def _winner(found: PlanResult, out: Path, wall_s: float) -> dict[str, Any]:
    n = found.counts
    w = found.winner
    doc: dict[str, Any] = {
        "wall_s": round(wall_s, 1),
        "candidates": n["candidates"],
        "full_simulations": n["points_run"] + n["points_found"],
        "confirmation_simulations": n.get("confirm_points_run", 0)
        + n.get("confirm_points_found", 0),
        "seeds": list(found.seeds),
        "notes": found.notes,
        "candidates_detail": [
            {
                "candidate": c.candidate.label,
                "router": c.candidate.router,
                "outcome": c.outcome,
                "replicas": c.replicas,
                "reason": c.reason,
                "trials": {
                    t.replicas: {
                        "meets": t.meets,
                        "verdict": t.verdict,
                        **{k: None if v is None else round(v, 2) for k, v in t.values_ms.items()},
                    }
                    for t in sorted(c.trials, key=lambda t: t.replicas)
                },
            }
            for c in found.candidates
        ],
    }
    if w is None:
        return {**doc, "winner": None}
    t = w.trial(w.replicas)
    doc["winner"] = {
        "candidate": w.candidate.label,
        "engine": w.candidate.engine,
        "tp": w.candidate.tp,
        "ep": w.candidate.ep,
        "dp_attention": w.candidate.dp_attention,
        "layout": w.candidate.layout,
        "router": w.candidate.router,
        "replicas": w.replicas,
        "gpus": w.gpus,
        "usd_per_hour": w.usd_per_hour,
        "values_ms": t.values_ms if t else None,
        "interval_ms": {s.text: t.interval(s.text) for s in found.slos} if t else None,
        "seed0_point": _row_values(out, t.key if t else None),
        "simulate_command": found.simulate_command(w),
    }
    return doc


def _aic(hf_id: str, save: Path, rate: float = RATE) -> dict[str, Any]:
    """aiconfigurator's own minimum-GPU search; its answer read from the CSVs it saves."""
    # The command of the installed package (the interpreter's bin, then PATH).
    where = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    exe = shutil.which("aiconfigurator", path=where)
    if exe is None or importlib.util.find_spec("aiconfigurator") is None:
        return {"skipped": "aiconfigurator is not installed (pip install '.[aic]')"}
    cmd = [exe, "cli", "default", "--model", hf_id, "--system", AIC_SYSTEM]
    cmd += ["--backend", "vllm", "--isl", str(ISL), "--osl", str(OSL)]
    cmd += ["--ttft", f"{TTFT_MS:g}", "--tpot", f"{TPOT_MS:g}"]
    cmd += ["--target-request-rate", f"{rate:g}", "--top-n", "1", "--no-color"]
    cmd += ["--save-dir", str(save)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    shown = " ".join(cmd[:-2])  # without the temporary folder
    log = done.stdout + done.stderr
    if done.returncode != 0:
        tail = [line for line in log.splitlines() if line.strip()][-3:]
        return {"command": shown, "error": " | ".join(tail)[-600:], "wall_s": round(wall, 1)}
    chosen = next(
        (line.split(":", 1)[1].strip() for line in log.splitlines() if "Best Experiment" in line),
        None,
    )
    price = load_prices().price(GPU).usd_per_gpu_hour
    modes: dict[str, Any] = {}
    for mode, cols in (("agg", AIC_AGG), ("disagg", AIC_DISAGG)):
        found = sorted(save.rglob(f"{mode}/best_config_topn.csv"))
        rows = list(csv.DictReader(found[0].open())) if found else []
        if not rows:
            modes[mode] = None
            continue
        row = rows[0]
        got: dict[str, Any] = {c: _num(row.get(c)) for c in (*AIC_BOTH, *cols)}
        gpus = got["total_gpus_needed"]
        got["usd_per_hour"] = None if gpus is None else gpus * price
        modes[mode] = got
    return {"command": shown, "chosen": chosen, "wall_s": round(wall, 1), **modes}


def _num(text: str | None) -> float | int | str | None:
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() else value


def side_by_side(
    key: str, tmp: Path, jobs: int, skip_aic: bool, rate: float = RATE
) -> dict[str, Any]:
    preset, hf_id = MODELS[key]
    wl = tmp / f"fixed-{key}.parquet"
    sessions = int(rate * SIDE_DURATION_S * 1.2)
    argv = ["workload", "generate", "fixed", "--isl", str(ISL), "--osl", str(OSL)]
    assert twin([*argv, "-n", str(sessions), "--session-rate", "1", "-o", str(wl)]) == 0
    out = tmp / f"plan-{key}"
    t0 = time.perf_counter()
    found = plan(
        wl,
        out,
        model=preset,
        slos=[f"p95_ttft<={TTFT_MS:g}ms", f"p95_tpot<={TPOT_MS:g}ms"],
        session_rate=rate,
        duration_s=SIDE_DURATION_S,
        gpus=[GPU],
        engines=["vllm"],
        layouts=["agg", "1p1d"],
        **SPACES[key],
        jobs=jobs,
        command="benchmarks/bench_plan_aic.py",
    )
    doc = {
        "model": preset,
        "hf_id": hf_id,
        "request_rate": rate,
        "twin_space": SPACES[key],
        "twin": _winner(found, out, time.perf_counter() - t0),
        "aiconfigurator": (
            {"skipped": "--skip-aic"} if skip_aic else _aic(hf_id, tmp / f"aic-{key}", rate)
        ),
    }
    return doc


def _trace_copies(tmp: Path) -> tuple[Path, Path]:
    """The trace's first TRACE_S seconds as recorded, and with every prompt's blocks unique
    (fresh hash ids for each request: lengths and arrivals unchanged, nothing shared)."""
    rows = [json.loads(line) for line in TRACE.open() if line.strip()]
    cut = [r for r in rows if r["timestamp"] < TRACE_S * 1e3]
    fresh = max(h for r in rows for h in r["hash_ids"]) + 1
    reuse, unique = tmp / "reuse.jsonl", tmp / "unique.jsonl"
    with reuse.open("w") as a, unique.open("w") as b:
        for r in cut:
            ids = list(range(fresh, fresh + len(r["hash_ids"])))
            fresh += len(ids)
            a.write(json.dumps(r) + "\n")
            b.write(json.dumps({**r, "hash_ids": ids}) + "\n")
    out = []
    for src in (reuse, unique):
        dst = src.with_suffix(".parquet")
        assert twin(["workload", "import", "mooncake", str(src), "-o", str(dst)]) == 0
        out.append(dst)
    return out[0], out[1]


PREFIX_ROUTER = "prefix-aware"


def _trace_plan(
    path: Path, out: Path, jobs: int, router: str, axis: tuple[str, ...] = ()
) -> dict[str, Any]:
    """One plan of the trace (the space and targets of the module docstring), under
    ``router``, or with the routers ``axis`` as an axis of the search when given."""
    from twin.reports.plan_bound import workload_stats

    t0 = time.perf_counter()
    found = plan(
        path,
        out,
        model="llama-3.1-8b",
        slos=TRACE_SLOS,
        duration_s=TRACE_S,
        warmup_s=TRACE_WARMUP_S,
        gpus=[GPU],
        engines=["vllm", "sglang"],
        tp=[1],
        **({"routers": list(axis)} if axis else {"router": router}),
        jobs=jobs,
        command="benchmarks/bench_plan_aic.py",
    )
    stats = workload_stats(path)
    return {
        "router": list(axis) if axis else router,
        "infinite_cache_token_hit_rate": stats["infinite_cache_token_hit_rate"],
        **_winner(found, out, time.perf_counter() - t0),
    }


def _saving(cheap: dict[str, Any] | None, dear: dict[str, Any] | None) -> float | None:
    """1 - cheap's cost / dear's (None without both answers)."""
    if not (cheap and dear):
        return None
    return round(1 - cheap["usd_per_hour"] / dear["usd_per_hour"], 3)


def _by_router(got: dict[str, Any]) -> dict[str, Any]:
    """Each router's candidates in one plan of the router axis: outcome, replicas, values."""
    out: dict[str, Any] = {}
    for c in got["candidates_detail"]:
        out.setdefault(c["router"], {})[c["candidate"]] = {
            k: c[k] for k in ("outcome", "replicas", "reason", "trials")
        }
    return out


def _trace_doc(tmp: Path) -> tuple[dict[str, Any], Path, Path]:
    """The trace's two copies (as recorded, prefixes made unique) and what every Mooncake
    result says of them."""
    reuse, unique = _trace_copies(tmp)
    doc: dict[str, Any] = {
        "trace": str(TRACE),
        "window_s": TRACE_S,
        "slos": list(TRACE_SLOS),
        "model": "llama-3.1-8b",
    }
    return doc, reuse, unique


def mooncake_router_axis(tmp: Path, jobs: int, routers: tuple[str, ...]) -> dict[str, Any]:
    """Each traffic planned once, the routers an axis of the search."""
    if not TRACE.is_file():
        return {"skipped": f"{TRACE} not found"}
    doc, reuse, unique = _trace_doc(tmp)
    doc["routers"] = list(routers)
    for name, path in (("with_reuse", reuse), ("prefixes_unique", unique)):
        got = _trace_plan(path, tmp / f"plan-axis-{name}", jobs, "", routers)
        doc[name] = {**got, "by_router": _by_router(got)}
    a, b = doc["with_reuse"].get("winner"), doc["prefixes_unique"].get("winner")
    if a and b:
        doc["saving_with_reuse"] = _saving(a, b)
    return doc


def mooncake(tmp: Path, jobs: int, routers: tuple[str, ...] = (PREFIX_ROUTER,)) -> dict[str, Any]:
    if not TRACE.is_file():
        return {"skipped": f"{TRACE} not found"}
    doc, reuse, unique = _trace_doc(tmp)
    doc["router"] = PREFIX_ROUTER if PREFIX_ROUTER in routers else routers[0]
    by: dict[str, dict[str, Any]] = {}
    for router in routers:
        for name, path in (("with_reuse", reuse), ("prefixes_unique", unique)):
            got = _trace_plan(path, tmp / f"plan-{name}-{router}", jobs, router)
            by.setdefault(router, {})[name] = got
    # The prefix-aware answers keep their old places in the results (as first measured).
    main = by[doc["router"]]
    doc["with_reuse"], doc["prefixes_unique"] = main["with_reuse"], main["prefixes_unique"]
    a, b = doc["with_reuse"].get("winner"), doc["prefixes_unique"].get("winner")
    if a and b:
        doc["cost_ratio_unique_to_reuse"] = round(b["usd_per_hour"] / a["usd_per_hour"], 3)
        doc["saving_with_reuse"] = _saving(a, b)
    if len(routers) > 1:
        doc["routers"] = {
            router: {
                name: {
                    "winner": (got.get("winner") or {}).get("candidate"),
                    "replicas": (got.get("winner") or {}).get("replicas"),
                    "usd_per_hour": (got.get("winner") or {}).get("usd_per_hour"),
                    "values_ms": (got.get("winner") or {}).get("values_ms"),
                    "wall_s": got["wall_s"],
                    "full_simulations": got["full_simulations"],
                }
                for name, got in runs.items()
            }
            for router, runs in by.items()
        }
        doc["routers_detail"] = by
        if PREFIX_ROUTER in by and "round-robin" in by:
            doc["saving_prefix_aware_over_round_robin"] = {
                name: _saving(
                    by[PREFIX_ROUTER][name].get("winner"), by["round-robin"][name].get("winner")
                )
                for name in ("with_reuse", "prefixes_unique")
            }
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument(
        "--models",
        default="llama,qwen",
        help="any of llama, qwen, qwen-moe, qwen3-moe (comma list)",
    )
    parser.add_argument("--rate", type=float, default=RATE, help="requests/s of the side by side")
    parser.add_argument("--skip-aic", action="store_true", help="the twin's side only")
    parser.add_argument("--skip-mooncake", action="store_true")
    parser.add_argument(
        "--routers",
        default=PREFIX_ROUTER,
        help="routers to plan the trace under, comma-separated (e.g. round-robin,prefix-aware)",
    )
    parser.add_argument(
        "--router-axis",
        action="store_true",
        help="plan each traffic once with --routers as an axis of the search",
    )
    args = parser.parse_args()
    doc: dict[str, Any] = {
        "benchmark": "bench_plan_aic",
        "machine": {"python": platform.python_version(), "processor": platform.processor()},
        "load": {"isl": ISL, "osl": OSL, "request_rate": args.rate, "gpu": GPU},
        "slos": {"ttft_ms": TTFT_MS, "tpot_ms": TPOT_MS},
        "prices": load_prices().label,
    }
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        doc["side_by_side"] = [
            side_by_side(k.strip(), tmp, args.jobs, args.skip_aic, args.rate)
            for k in args.models.split(",")
            if k.strip()
        ]
        routers = tuple(r.strip() for r in args.routers.split(",") if r.strip())
        if args.skip_mooncake:
            doc["mooncake"] = {"skipped": "--skip-mooncake"}
        elif args.router_axis:
            doc["mooncake_router_axis"] = mooncake_router_axis(tmp, args.jobs, routers)
        else:
            doc["mooncake"] = mooncake(tmp, args.jobs, routers)
    write_text_atomic(args.results, json.dumps(doc, indent=2, default=str) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "machine"}, indent=2, default=str))


if __name__ == "__main__":
    main()
