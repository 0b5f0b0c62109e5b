"""Diagnosis (issue 31, helper vllm-aiperf, session 27): the Qwen3-32B H100 vLLM 0.12.0
aiperf rows under what-ifs. Each SPEC is ``;``-separated ``KEY=VALUE`` items:

- ``sets.NAME=V``: a vLLM setting of the row's deployment (``sets.max_num_batched_tokens=8192``);
- any other deployment entry (``frontend_s=0``), as ``silicon_rows.py --deployment``;
- ``pf=X``: the prefill share of a step that prefills scaled by X (monkeypatched pricer);
- ``pa=S``: S seconds added to every step that prefills (an eager step in series);
- ``jit=S``: each request reaches the engine a further U(0, S) seconds after its front end
  (seeded per row by ``seed=N``; needs a front end, so ``frontend_s`` > 0).

Never a scoring rule: the plan is changed in memory. From the worktree root:

    PYTHONPATH=. python benchmarks/results/vllm-aiperf-s27/whatif.py SPLIT SPEC [SPEC ...]

SPLIT ``fit`` / ``held_out``: the 1,500-row sample's rows (``silicon-sample1500-s26``);
``csv-fit``: every fit row of the group in the CSV.
"""

from __future__ import annotations

import csv
import dataclasses
import random
import sys
import zlib
from collections.abc import Generator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

import twin.validate.silicon as sil
from twin.engine import cluster as cl
from twin.engine import cost as ec
from twin.engine import typed_settings
from twin.engine.run import RunArgs
from twin.validate.silicon.predict import predict

GROUP = "Qwen3-32B|h100_sxm|vllm|unspecified"
SAMPLE = "benchmarks/results/silicon-sample1500-s26/predictions.csv"
KNOBS = {"pf": 1.0, "pa": 0.0, "jit": 0.0, "seed": 0.0}
_RNG = random.Random(0)
_step_time = ec.CostModelPricer.step_time


def step_time(self: Any, prefills: Sequence[Any], b: int, ctx: int) -> float:
    t = _step_time(self, prefills, b, ctx)
    if prefills and (KNOBS["pf"] != 1.0 or KNOBS["pa"]):
        d = _step_time(self, (), b, ctx) if b else 0.0
        t = d + KNOBS["pf"] * (t - d) + KNOBS["pa"]
    return t


def through_front(self: Any, req: Any, replica: Any) -> Generator[Any, Any, Any]:
    """``Cluster._through_front`` with a random delay after the front end."""
    if replica is None:
        replica = self._route(req)
    sent = self.env.now
    done = max(sent, self._front[replica.index]) + self.config.host_time.frontend_s
    self._front[replica.index] = done
    yield self.env.timeout(done - sent + _RNG.uniform(0.0, KNOBS["jit"]))
    return self._submit(req, replica, sent)


ec.CostModelPricer.step_time = step_time  # type: ignore[method-assign]
cl.Cluster._through_front = through_front  # type: ignore[method-assign]


def _literal(text: str) -> Any:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text, text)


def changed(plan: sil.RowPlan, spec: str) -> sil.RowPlan:
    deployment = dict(plan.deployment)
    sets = dict(deployment.get("sets", {}))
    for item in filter(None, spec.split(";")):
        key, _, value = item.partition("=")
        if key in KNOBS:
            continue
        if key.startswith("sets."):
            sets[key[5:]] = value
        else:
            deployment[key] = _literal(value)
    deployment["sets"] = sets
    return dataclasses.replace(plan, deployment=typed_settings(RunArgs, deployment.items()))


def one(job: tuple[sil.RowPlan, str]) -> tuple[Any, dict[str, Any]]:
    plan, spec = job
    _RNG.seed(zlib.crc32(plan.row.id.encode()) + int(KNOBS["seed"]))
    return plan.row, predict(changed(plan, spec))


def main() -> None:
    split, specs = sys.argv[1], sys.argv[2:] or [""]
    if split.startswith("csv-"):
        rows = [
            r for r in sil.read_rows(sil.default_csv()) if r.group == GROUP and r.split == split[4:]
        ]
    else:
        with open(SAMPLE, newline="", encoding="utf-8") as f:
            ids = {
                r["id"] for r in csv.DictReader(f) if r["group"] == GROUP and r["split"] == split
            }
        rows = [r for r in sil.read_rows(sil.default_csv()) if r.id in ids]
    plans, _ = sil.plan_rows(rows, sil.default_configs(), "benchmark")
    plans.sort(key=lambda p: (p.row.isl, p.row.tp, p.row.concurrency, p.row.osl))
    for spec in specs:
        for item in filter(None, spec.split(";")):
            key, _, value = item.partition("=")
            if key in KNOBS:
                KNOBS[key] = float(value)
        with ProcessPoolExecutor(2) as pool:  # forked: the knobs travel
            results = list(pool.map(one, [(p, spec) for p in plans]))
        for key, default in (("pf", 1.0), ("pa", 0.0), ("jit", 0.0), ("seed", 0.0)):
            KNOBS[key] = default
        print(f"== {spec!r}")
        ttft, tpot, signed = [], [], []
        for row, r in results:
            t, u = r.get("twin_ttft_ms"), r.get("twin_tpot_ms")
            if t is None or t != t:
                print(f"  {row.id} {r.get('twin_error')}")
                continue
            e1, e2 = (t - row.ttft_ms) / row.ttft_ms, (u - row.tpot_ms) / row.tpot_ms
            ttft.append(abs(e1))
            tpot.append(abs(e2))
            signed.append(e1)
            print(
                f"  tp{row.tp} {row.isl}x{row.osl} c{row.concurrency:<4d} TTFT {row.ttft_ms:8.1f}"
                f" {t:8.1f} {100 * e1:+6.1f}%  TPOT {row.tpot_ms:6.2f} {u:6.2f} {100 * e2:+5.1f}%"
            )
        print(
            f"  n {len(ttft)} TTFT MAPE {100 * np.mean(ttft):.1f} signed median "
            f"{100 * np.median(signed):+.1f}  TPOT MAPE {100 * np.mean(tpot):.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
