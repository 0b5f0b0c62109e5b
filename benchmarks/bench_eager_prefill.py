"""SGLang's eager prefill against measured serving runs (issue 31): the MoE rows' TTFT and
TPOT with and without the host floor of a prefill step, in one run.

SGLang runs its prefill batches without CUDA graphs before 0.5.10 (and in every release
for GLM-5's architecture and multimodal configs such as Qwen3.5's), so a step that
prefills takes the host's time to issue the model's kernels, in series with them
(``twin.validate.silicon.eager_prefill.eager_prefill_s``: launches by layer part x a host time
per launch per GPU; ``twin.engine.host_time.EagerPrefillPricer``). This benchmark takes
the rows the rule applies to (MoE models, GPUs with a fitted host time, at most
``--max-clients`` clients), spreads ``--per-split`` of each split over them (sorted by
id), and predicts each row twice: as planned (the floor) and with the floor removed (the
baseline, the twin without the rule). It writes per-row predictions and MAPE / MdAPE per
split, model and GPU. (Rows the rule does not apply to get the same plan as without it:
dense models, other engines, other models' SGLang rows from 0.5.10.)

    python benchmarks/bench_eager_prefill.py --per-split 20 \\
        --out benchmarks/results/silicon-ttftmoe2-eager

``--backend trtllm``: TensorRT-LLM's eager context steps (every release: its context
batches run without CUDA graphs), the same floor per launch with TensorRT-LLM's fitted
host time. ``--backend vllm``: vLLM's steps above its largest captured CUDA graph (releases
from 0.14.0 and nightlies; ``eager_prefill.vllm_prefills_eagerly``, ``vllm_graph_tokens``) with
vLLM's fitted host time per launch (``VLLM_EAGER_LAUNCH_S``). ``--rule batch-wait``:
instead of the floor, TensorRT-LLM's batch waiting
(``batch_wait_timeout_iters`` / ``batch_wait_max_tokens_ratio``) where a row's script sets
it (InferenceMAX's Llama-3.1-70B 1k/1k scripts below 8 GPUs), with and without.
``--aic-from``: aiconfigurator's estimate of the same rows from an earlier
``bench_silicon.py`` run's ``predictions.csv``, for the comparison. ``--grid-us 0,25,50``:
the fit of the host time per launch (fit split only): each sampled fit row predicted at
each value, the mean TTFT / TPOT APE per GPU and value, and per GPU the value of least
TTFT MAPE and of least TTFT + TPOT MAPE (the one chosen: the host time of a prefill step
also stalls the decodes batched with it):

    python benchmarks/bench_eager_prefill.py --backend trtllm --per-split 40 \\
        --grid-us 0,25,50,75,100,140 --out benchmarks/results/trtllm-eager-grid
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import twin.validate.silicon as sil
from twin.validate.silicon.predict import predict


def _spread(plans: list[sil.RowPlan], n: int) -> list[sil.RowPlan]:
    plans = sorted(plans, key=lambda p: p.row.id)
    if len(plans) <= n:
        return plans
    return [plans[i * len(plans) // n] for i in range(n)]


def _applies(plan: sil.RowPlan, rule: str) -> bool:
    if rule == "batch-wait":
        return "batch_wait_timeout_iters" in plan.deployment.get("sets", {})
    return bool(plan.deployment.get("eager_prefill_s"))


def _without(plan: sil.RowPlan, rule: str) -> dict[str, Any]:
    """``plan``'s deployment without the rule (the baseline)."""
    if rule == "batch-wait":
        sets = {k: v for k, v in plan.deployment["sets"].items() if not k.startswith("batch_wait")}
        bare = {k: v for k, v in plan.deployment.items() if k != "sets"}
        return {**bare, "sets": sets} if sets else bare
    return {k: v for k, v in plan.deployment.items() if k != "eager_prefill_s"}


def _sample(per_split: int, max_clients: int, backend: str, rule: str) -> list[sil.RowPlan]:
    by_split: dict[str, list[sil.RowPlan]] = {sil.FIT: [], sil.HELD_OUT: []}
    seen: set[tuple[object, ...]] = set()
    for row in sil.read_rows():
        if row.backend != backend or (row.concurrency or 0) > max_clients:
            continue
        # one row per measurement (the collections' dumps repeat each other's rows)
        key = row.measurement_key
        if key is not None and (row.split, key) in seen:
            continue
        plan = sil.plan_row(row)
        if isinstance(plan, str):
            continue
        if _applies(plan, rule):
            by_split[row.split].append(plan)
            if key is not None:
                seen.add((row.split, key))
    return [p for split in by_split.values() for p in _spread(split, per_split)]


def _aic(path: Path | None) -> dict[str, tuple[float | None, float | None]]:
    """aiconfigurator's TTFT and TPOT per row id from a ``bench_silicon.py`` run."""
    if path is None:
        return {}
    out: dict[str, tuple[float | None, float | None]] = {}
    with path.open(encoding="utf-8") as f:
        for rec in csv.DictReader(f):
            ttft, tpot = rec.get("aic_ttft_ms") or "", rec.get("aic_tpot_ms") or ""
            out[rec["id"]] = (float(ttft) if ttft else None, float(tpot) if tpot else None)
    return out


def _ape(twin: float | None, measured: float | None) -> float | None:
    if twin is None or measured is None or measured <= 0:
        return None
    return abs(twin - measured) / measured * 100


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": len(rows)}
    for side in ("baseline", "floor", "aic"):
        for metric in ("ttft", "tpot"):
            apes = [
                r[f"{side}_{metric}_ape"] for r in rows if r.get(f"{side}_{metric}_ape") is not None
            ]
            out[f"{side}_{metric}_mape"] = round(statistics.fmean(apes), 1) if apes else None
            out[f"{side}_{metric}_mdape"] = round(statistics.median(apes), 1) if apes else None
    return out


def predict_at(plan: sil.RowPlan, us: float) -> dict[str, Any]:
    """``plan`` predicted with ``us`` microseconds of host time per eager launch of its
    model and engine (:func:`sil.eager_prefill_s`; 0: no eager host time)."""
    dep = {k: v for k, v in plan.deployment.items() if k != "eager_prefill_s"}
    if us > 0:  # the plan's host time is the fitted one per launch times the launches
        launches = plan.deployment["eager_prefill_s"] / sil.launch_s(plan.row, plan.gpu)
        dep["eager_prefill_s"] = us * 1e-6 * launches
    return predict(dataclasses.replace(plan, deployment=dep))


def _fit_grid(plans: list[sil.RowPlan], grid_us: list[float], out: Path) -> int:
    """Predict each fit row at each host time per launch in ``grid_us`` (the launches of
    its model and engine, :func:`sil.eager_prefill_s`); write ``OUT/grid.csv`` and
    ``OUT.json`` (mean TTFT / TPOT APE per GPU and host time, and the least-TTFT one per
    GPU)."""
    records: list[dict[str, Any]] = []
    for i, plan in enumerate(plans):
        for us in grid_us:
            got = predict_at(plan, us)
            rec = {"id": plan.row.id, "gpu": plan.gpu, "us_per_launch": us}
            for metric, measured in (("ttft", plan.row.ttft_ms), ("tpot", plan.row.tpot_ms)):
                rec[f"twin_{metric}_ms"] = got.get(f"twin_{metric}_ms")
                rec[f"{metric}_ape"] = _ape(got.get(f"twin_{metric}_ms"), measured)
            records.append(rec)
        print(f"  {i + 1}/{len(plans)}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "grid.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(records[0]) if records else ["id"])
        writer.writeheader()
        writer.writerows(records)
    # rows with a prediction (TTFT and TPOT) at every grid point only, so each mean is over
    # the same rows and none averages a missing value
    missing = {r["id"] for r in records if r["ttft_ape"] is None or r["tpot_ape"] is None}
    complete = {r["id"] for r in records} - missing
    by_gpu: dict[str, dict[str, Any]] = {}
    for gpu in sorted({r["gpu"] for r in records if r["id"] in complete}):
        means = {}
        for us in grid_us:
            sel = [r for r in records if r["gpu"] == gpu and r["us_per_launch"] == us]
            sel = [r for r in sel if r["id"] in complete]
            means[f"{us:g}"] = {
                "rows": len(sel),
                "ttft_mape": round(statistics.fmean(r["ttft_ape"] for r in sel), 1),
                "tpot_mape": round(statistics.fmean(r["tpot_ape"] for r in sel), 1),
            }
        best = min(means, key=lambda k: means[k]["ttft_mape"])
        both = min(means, key=lambda k: means[k]["ttft_mape"] + means[k]["tpot_mape"])
        by_gpu[gpu] = {
            "by_us_per_launch": means,
            "least_ttft_us": float(best),
            "least_ttft_plus_tpot_us": float(both),  # the value chosen (the host time
            # stalls the decodes batched with a prefill: TPOT pays for it)
        }
    summary = {
        "benchmark": "eager_prefill_grid",
        "command": "python benchmarks/bench_eager_prefill.py " + " ".join(sys.argv[1:]),
        "split": sil.FIT,
        "by_gpu": by_gpu,
    }
    (out.parent / f"{out.name}.json").write_text(json.dumps(summary, indent=2) + "\n", "utf-8")
    print(json.dumps(by_gpu, indent=2))
    return 0


def _microseconds(text: str) -> list[float]:
    """``--grid-us``: a comma list of host times per launch, each >= 0 (argparse's one-line
    error and exit 2 otherwise, before any row is planned)."""
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give microseconds, e.g. 0,25,50") from None
    if not values or any(not v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: each value must be >= 0")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-split", type=int, default=40, help="rows per split (fit, held out)")
    parser.add_argument("--max-clients", type=int, default=64, help="rows with at most N clients")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/silicon-eager"))
    parser.add_argument("--backend", choices=("sglang", "trtllm", "vllm"), default="sglang")
    parser.add_argument("--rule", choices=("eager", "batch-wait"), default="eager")
    parser.add_argument("--aic-from", type=Path, default=None, help="a predictions.csv")
    parser.add_argument(
        "--grid-us",
        type=_microseconds,
        default=None,
        help="fit the host time per launch: predict the fit split's sampled rows at each of "
        "these microseconds a launch (comma list) and print the least mean TTFT APE per GPU",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    plans = _sample(args.per_split, args.max_clients, args.backend, args.rule)
    if args.grid_us is not None:
        return _fit_grid([p for p in plans if p.row.split == sil.FIT], args.grid_us, args.out)
    aic = _aic(args.aic_from)
    print(f"{len(plans)} rows", flush=True)
    rows: list[dict[str, Any]] = []
    for plan in plans:
        r = plan.row
        floor = float(plan.deployment.get("eager_prefill_s", 0.0))
        bare = _without(plan, args.rule)
        with_floor = predict(plan)
        baseline = predict(dataclasses.replace(plan, deployment=bare))
        rec: dict[str, Any] = {
            "id": r.id,
            "split": r.split,
            "group": f"{r.model_name}|{r.system}",
            "backend_version": r.backend_version,
            "isl": r.isl,
            "osl": r.osl,
            "concurrency": r.concurrency,
            "tp": plan.tp,
            "dp": plan.dp,
            "eager_prefill_s": floor,
            "silicon_ttft_ms": r.ttft_ms,
            "silicon_tpot_ms": r.tpot_ms,
        }
        for side, result in (("baseline", baseline), ("floor", with_floor)):
            for metric in ("ttft", "tpot"):
                value = result.get(f"twin_{metric}_ms")
                rec[f"{side}_{metric}_ms"] = value
                measured = r.ttft_ms if metric == "ttft" else r.tpot_ms
                rec[f"{side}_{metric}_ape"] = _ape(value, measured)
            rec[f"{side}_error"] = result.get("twin_error", "")
        if r.id in aic:
            for metric, value in zip(("ttft", "tpot"), aic[r.id], strict=True):
                rec[f"aic_{metric}_ms"] = value
                rec[f"aic_{metric}_ape"] = _ape(value, r.ttft_ms if metric == "ttft" else r.tpot_ms)
        rows.append(rec)
        print(f"  {len(rows)}/{len(plans)} {time.perf_counter() - started:,.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "predictions.csv").open("w", newline="", encoding="utf-8") as f:
        fields = list(dict.fromkeys(k for r in rows for k in r))
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    moe = rows
    summary: dict[str, Any] = {
        "benchmark": "eager_prefill",
        "command": "python benchmarks/bench_eager_prefill.py " + " ".join(sys.argv[1:]),
        "backend": args.backend,
        "rule": args.rule,
        "host_time_per_launch_s": {
            "trtllm": sil.TRTLLM_EAGER_LAUNCH_S,
            "vllm": sil.VLLM_EAGER_LAUNCH_S,
        }.get(args.backend, sil.SGLANG_EAGER_LAUNCH_S),
        "launches_per_layer_part": (
            sil.VLLM_EAGER_LAUNCHES if args.backend == "vllm" else sil.SGLANG_EAGER_LAUNCHES
        ),
        "by_split": {
            s: _summary([r for r in moe if r["split"] == s]) for s in (sil.FIT, sil.HELD_OUT)
        },
        "by_split_and_group": {
            f"{s}|{g}": _summary([r for r in moe if r["split"] == s and r["group"] == g])
            for s in (sil.FIT, sil.HELD_OUT)
            for g in sorted({r["group"] for r in moe})
            if any(r["split"] == s and r["group"] == g for r in moe)
        },
        "wall_s": round(time.perf_counter() - started, 1),
    }
    (args.out.parent / f"{args.out.name}.json").write_text(
        json.dumps(summary, indent=2) + "\n", encoding="utf-8"
    )
    print(json.dumps(summary["by_split"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
