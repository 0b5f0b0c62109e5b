"""Issue 31, helper vllm-8bfp8: the diagnosis runs of docs/decisions.md ("Issue 31, step:
the vLLM 0.12.0 H200 aiperf rows diagnosed"), fit rows only.

    PYTHONPATH=. python benchmarks/results/vllm-8bfp8/diagnose.py bound SAMPLE.csv
    PYTHONPATH=. python benchmarks/results/vllm-8bfp8/diagnose.py whatif SAMPLE.csv MODE

``bound``: per Llama-3.1-8B-FP8 H200 vLLM fit row, the GPU time the measured throughput
leaves each request (``c / (TTFT + (osl - 1) TPOT)`` requests a second on one replica)
against the twin's price of the row's prefill alone and of a decode step of ``c``.
``whatif``: the fit rows of the three groups rerun with one planning change, a
diagnosis and no rule: ``block`` prices a block-scaled checkpoint's linear layers
(Qwen3-235B-A22B-FP8, MiniMax-M2.5) as fp8-block GEMMs, not only its experts; ``dp``
reads a Qwen3-235B row whose ``tp_size`` is below ``moe_tp_size x moe_ep_size`` as
vLLM's data-parallel attention over that many GPUs (vLLM 0.12.0
``fused_moe/config.py`` ``FusedMoEParallelConfig.make``: without expert parallelism
the MoE runs tensor-parallel over ``dp x tp``).
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import twin.validate.silicon as sil
from twin.engine.run import build_run
from twin.validate.silicon.predict import predict, write_workload

GROUPS = (
    "Llama-3.1-8B-Instruct-FP8|h200_sxm|vllm|fp8",
    "Qwen3-235B-A22B-FP8|h200_sxm|vllm|fp8",
    "MiniMax-M2.5|h200_sxm|vllm|fp8",
)


def fit_plans(sample: Path, groups: tuple[str, ...]) -> list[Any]:
    with sample.open(newline="", encoding="utf-8") as f:
        ids = {r["id"] for r in csv.DictReader(f) if r["split"] == "fit" and r["group"] in groups}
    rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    return sorted(plans, key=lambda p: (p.row.model_path, p.row.backend_version, p.row.tp))


def bound(sample: Path) -> None:
    path = write_workload(Path("/tmp/vllm-8bfp8-bound.parquet"), 100, 10, 4, 1)
    print("isl osl c tp | req/s | GPU ms a request | twin prefill ms | twin decode(c) ms")
    for p in fit_plans(sample, GROUPS[:1]):
        r = p.row
        run = build_run(
            path, model=p.model, gpu="h200", engine="vllm==0.19.0", kernel_tables="0.12.0",
            tp=r.tp, cache_gb="auto",
        )  # fmt: skip
        cm = run.pricer.cost_model
        rps = r.concurrency / (r.ttft_ms + (r.osl - 1) * r.tpot_ms) * 1e3
        prefill = cm.prefill(r.isl, 0) * 1e3
        decode = cm.decode([r.isl + r.osl // 2] * r.concurrency) * 1e3
        print(
            f"{r.isl} {r.osl} {r.concurrency} {r.tp} | {rps:.1f} | {1e3 / rps:.1f} | "
            f"{prefill:.1f} | {decode:.2f}"
        )


def changed(plan: Any, mode: str) -> Any:
    r = plan.row
    if mode == "block" and "fp8-block experts" in plan.precision:
        fields = {**plan.model_fields, "precision": "fp8-block"}
        return dataclasses.replace(plan, model_fields=fields)
    gpus = (r.moe_tp or 1) * (r.moe_ep or 1)
    if mode == "dp" and "Qwen3-235B" in r.model_path and gpus > (r.tp or 1):
        return dataclasses.replace(plan, tp=gpus, dp=gpus // (r.tp or 1))
    return plan


def one(args: tuple[Any, str]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    plan, mode = args
    new = changed(plan, mode)
    if new is plan:
        return plan.row, {}, {}
    return plan.row, predict(plan), predict(new)


def whatif(sample: Path, mode: str) -> None:
    plans = fit_plans(sample, GROUPS[1:])
    with ProcessPoolExecutor(2) as ex:
        results = list(ex.map(one, [(p, mode) for p in plans]))
    for r, before, after in results:
        if not after:
            continue
        cells = [
            f"{o.get('twin_ttft_ms', float('nan')):.0f} / {o.get('twin_tpot_ms', float('nan')):.1f}"
            if "twin_error" not in o
            else "error"
            for o in (before, after)
        ]
        print(
            f"{r.model_path} {r.backend_version} tp {r.tp} moe_tp {r.moe_tp} c {r.concurrency} "
            f"{r.isl}x{r.osl} | measured {r.ttft_ms:.0f} / {r.tpot_ms:.1f} | twin "
            f"{cells[0]} -> {cells[1]}"
        )


if __name__ == "__main__":
    if sys.argv[1] == "bound":
        bound(Path(sys.argv[2]))
    else:
        whatif(Path(sys.argv[2]), sys.argv[3])
