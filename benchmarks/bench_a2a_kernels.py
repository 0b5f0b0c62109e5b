"""The MoE all-to-all kernel families (issue 34): held-out error per family and GPU.

Run: ``python benchmarks/bench_a2a_kernels.py``. Writes
``benchmarks/results/a2a-kernels.json`` and prints every miss of issue #34's kernel
target (held-out median |relative error| <= 5%, P90 <= 15%, per family per GPU).
The families are DeepEP's dispatch and combine, high-throughput (``ht``) and
low-latency (``ll``), per engine (``twin.calibration.aic_a2a``); the numbers are the
shipped profiles' own (``twin calibrate --from aiconfigurator``: the held-out rows are a
seeded quarter of each family's shapes the fit never saw,
``twin.calibration.fit.split_holdout``; nothing is tuned on them).

Every miss gets its reasons, read from NVIDIA's rows (``aiconfigurator-core`` installed;
without it the misses are listed with no reasons): the held-out shapes furthest off,
and how noisy the table is where one model must follow it:

- ``drops``: of the steps from one token count to the next in one shape (hidden, top-k,
  experts, EP), the share that ran more than 10% *faster* with more tokens, which no
  monotone model can follow;
- ``flat_spread``: in the latency-bound rows (16 tokens or fewer, where the time should
  be flat in the tokens), the median over shapes of ``max / min - 1``: the repeatability
  of one timing;
- ``flat_until``: the median over shapes of the most tokens whose time is still within
  15% of the fewest tokens' time: a floor that the work hides under up to that many
  tokens (the model's fitted floor, the time a maximum of it and the work).
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
from kernel_targets import fitted, heldout_row, summarise, write_results

from twin.costmodel.formulas import A2A_VARIANTS

RESULTS = Path(__file__).parent / "results" / "a2a-kernels.json"
DROP = 0.10  # a step that runs this much faster with more tokens counts as a drop
FLAT_TOKENS = 16
FLOOR = 0.15  # within this of the fewest tokens' time, a row is still on the floor
FLOOR_TOKENS = 256  # a floor this long is named in a miss's reason
WORST = 3


def _noise(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """``drops``, ``flat_spread`` and ``flat_until`` of one family's rows (module
    docstring)."""
    groups: dict[tuple, list[tuple[int, float]]] = {}
    for r in rows:
        s = r["shape"]
        groups.setdefault((s["d"], s["k"], s["e"], s["ep"]), []).append((s["t"], r["median_s"]))
    steps = drops = 0
    spreads, floors = [], []
    for points in groups.values():
        points.sort()
        first = points[0][1]
        floors.append(max(t for t, y in points if y <= (1 + FLOOR) * first))
        for (_, a), (_, b) in itertools.pairwise(points):
            steps += 1
            drops += b < (1 - DROP) * a
        flat = [y for t, y in points if t <= FLAT_TOKENS]
        if len(flat) >= 2:
            spreads.append(max(flat) / min(flat) - 1)
    return {
        "drops": drops / steps if steps else None,
        "flat_spread": median(spreads) if spreads else None,
        "flat_until": median(floors) if floors else None,
    }


def _diagnose(gpu: str, engine: str, kernel: str, fit: Any, peaks: dict) -> dict[str, Any]:
    """The family's table noise and its worst held-out shapes (needs the tables): the
    rows the fit read, less the flagged ones, split as the fit split them."""
    from twin.calibration.aic_a2a import a2a_rows
    from twin.calibration.aic_import import split_impossible
    from twin.calibration.aic_tables import system_dir
    from twin.calibration.fit import predict_rows, split_holdout

    release = fit.provenance.get("version") or None
    fam = next(f for f in a2a_rows(system_dir(gpu), engine, release) if f.kernel == kernel)
    ok, _ = split_impossible(kernel, fam.rows, peaks)
    _, held_idx = split_holdout(len(ok))
    held = [ok[i] for i in held_idx]
    pred = predict_rows(kernel, fit.params, peaks, held) if held else np.zeros(0)
    scored = sorted(
        zip(held, pred, strict=True),
        key=lambda rp: -abs(rp[1] - rp[0]["median_s"]) / rp[0]["median_s"],
    )
    worst = [
        {
            "shape": r["shape"],
            "measured_us": round(r["median_s"] * 1e6, 2),
            "predicted_us": round(float(p) * 1e6, 2),
            "rel_err": round(float(abs(p - r["median_s"]) / r["median_s"]), 4),
        }
        for r, p in scored[:WORST]
    ]
    return {**_noise(fam.rows), "worst_heldout": worst}


def _reason(row: dict[str, Any]) -> str:
    """One line saying why a family misses (from its diagnosis)."""
    parts = []
    drops, spread = row.get("drops"), row.get("flat_spread")
    if drops is not None and drops >= 0.05:
        parts.append(
            f"noisy table: {drops:.0%} of token-count steps run >10% faster with more tokens"
        )
    if spread is not None and spread >= 0.15:
        parts.append(f"flat (<= {FLAT_TOKENS}-token) timings spread {spread:.0%} within a shape")
    until = row.get("flat_until")
    if until is not None and until >= FLOOR_TOKENS:
        parts.append(
            f"a floor up to {until:.0f} tokens (within {FLOOR:.0%} of one token's time), "
            "the work hidden under it"
        )
    worst = row.get("worst_heldout") or []
    if worst:
        w = worst[0]
        s = w["shape"]
        parts.append(
            f"worst held-out t={s['t']} d={s['d']} topk={s['k']} experts={s['e']} ep={s['ep']}: "
            f"{w['measured_us']} us measured, {w['predicted_us']} us predicted"
        )
    if not parts:
        return "no diagnosis (aiconfigurator-core not installed)"
    return "; ".join(parts)


def main() -> None:
    t0 = time.perf_counter()
    try:
        import aiconfigurator_core  # noqa: F401

        have_tables = True
    except ImportError:
        have_tables = False
    rows = []
    for name, prof, kernel, fit in fitted(A2A_VARIANTS):
        gpu, engine = name.rsplit("-", 1)
        row: dict[str, Any] = {"gpu": gpu, "engine": engine, "family": kernel, **heldout_row(fit)}
        if not row["meets_target"]:
            if have_tables:
                row.update(_diagnose(gpu, engine, kernel, fit, prof.peaks))
            row["reason"] = _reason(row)
        rows.append(row)
    for r in rows:
        mark = "ok  " if r["meets_target"] else "MISS"
        print(
            f"{mark} {r['gpu']:6s} {r['engine']:7s} {r['family']:16s} median "
            f"{r['heldout_median']:6.1%} P90 {r['heldout_p90']:6.1%} ({r['n_shapes']} shapes)"
            + (f"\n       {r['reason']}" if "reason" in r else "")
        )
    write_results(RESULTS, "bench_a2a_kernels", summarise(rows), rows, t0)


if __name__ == "__main__":
    main()
