"""The fused-MoE price under skewed routing (issue 34): NVIDIA's power-law rows, priced.

Run: ``python benchmarks/bench_moe_routing.py [PROFILE ...]`` (needs ``aiconfigurator-core``;
default: the four profiles of the measured MoE rows' GPUs and engines). Writes
``benchmarks/results/moe-routing.json``.

The shipped fused-MoE fits are fitted on the ``balanced`` rows of NVIDIA's ``moe_perf``
tables only. The same tables time every shape again under ``power_law_1.01`` and
``power_law_1.2`` routing (aiconfigurator's collector: skewed expert loads, the busiest
expert-parallel rank timed), rows no fit has seen. Each such row is priced by its family's
fit and per-shape term, as the twin prices a step, with the rank load of each routing
rule of ``twin.costmodel.routing``: ``balanced`` (the loads the fit saw), ``uniform``
(independent draws, the mean rank) and the table's own power law. The rule that follows
the table's routing should price its rows best. Per family: median and P90 |relative
error| and the median log bias (price / measured - 1), over all rows and over the steps
of at most 256 tokens (decode-sized); per distribution and rule: the medians over families.
"""

from __future__ import annotations

import collections
import math
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from twin import precision as px
from twin.calibration import aic_moe
from twin.calibration import aic_tables as at
from twin.calibration.fit import predict_rows
from twin.calibration.series_fit import log_factors
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.profile_store import load_profile, shipped_profiles
from twin.costmodel.routing import ROUTINGS

RESULTS = Path(__file__).parent / "results" / "moe-routing.json"
PROFILES = ("h100-trtllm", "h200-sglang", "h200-vllm", "b200-vllm")
DISTRIBUTIONS = ("power_law_1.01", "power_law_1.2")
RULES = ("balanced", "uniform", "table")  # "table": the row's own power law
MAX_ROWS = 600  # rows per family and distribution, spread evenly (the run's length)
# Rows of at most this many tokens are reported apart as decode-sized: a decode step holds one
# token per running request, and the measured serving rows run at most 256 clients in most
# groups (silicon_sample.csv's concurrencies); larger steps are prefill-sized.
DECODE_TOKENS = 256


def _row(fmt: px.WeightFormat, raw: dict[str, Any], rule: str, l2: float | None) -> dict:
    t, d, inter, top, n_exp, mtp, ep = (int(raw[c]) for c in aic_moe.MOE_COLUMNS)
    load = ROUTINGS[rule].rank_load(t, n_exp, top, ep)
    act_e, w_e = (
        (float(at.ELEM_BYTES), float(at.ELEM_BYTES))
        if fmt.bytes_per_param is None
        else px.gemm_operand_bytes(fmt, at.ELEM_BYTES)
    )
    feats = moe_ft.moe_features(
        load.rows, t * top * d, load.active, d, inter // mtp, 2, at.ELEM_BYTES, act_e, w_e, l2
    )
    shape = {"t": t, "d": d, "i": inter, "k": top, "e": n_exp, "tp": mtp, "ep": ep}
    flops, nbytes, extras = feats
    return {
        "flops": flops,
        "bytes": nbytes,
        **extras,
        "median_s": raw["latency"] * 1e-3,
        "shape": shape,
    }


def _errors(log_ratio: np.ndarray) -> dict[str, float]:
    rel = np.abs(np.expm1(log_ratio))
    return {
        "median": float(np.median(rel)),
        "p90": float(np.quantile(rel, 0.9)),
        "bias": float(math.expm1(np.median(log_ratio))),
    }


def family_rows(name: str) -> list[dict[str, Any]]:
    """Per fused-MoE family of profile ``name`` and power-law distribution, each rule's errors."""
    prof = load_profile(shipped_profiles()[name])
    gpu, engine = name.rsplit("-", 1)
    system = at.system_dir(gpu)
    formats = {
        px.WEIGHT_FORMATS[n].moe_kernel: (dt, px.WEIGHT_FORMATS[n])
        for dt, n in px.MOE_TABLE_MODES.items()
    }
    out = []
    for fam in aic_moe.moe_rows(system, engine):
        fit = prof.kernels.get(fam.kernel)
        if fit is None or fam.kernel not in formats:
            continue  # the min-latency family: its own kernel source, few tokens
        dtype, fmt = formats[fam.kernel]
        for dist in DISTRIBUTIONS:
            raw = [
                r
                for table in fam.tables
                for r in aic_moe.moe_table_rows(system.parent / table, dtype, dist)
                if r.get("kernel_source") == fam.kernel_source
            ]
            if not raw:
                continue
            raw = raw[:: max(1, math.ceil(len(raw) / MAX_ROWS))]
            y = np.array([r["latency"] * 1e-3 for r in raw])
            small = np.array([int(r["num_tokens"]) <= DECODE_TOKENS for r in raw])
            row: dict[str, Any] = {
                "profile": name,
                "family": fam.kernel,
                "distribution": dist,
                "n_rows": len(raw),
            }
            for rule in RULES:
                routing = dist if rule == "table" else rule
                # the table's L2 where the fit was fitted reading it (aic_tables)
                l2 = at.system_l2(system) if aic_moe.reads_replay_l2(fit.params) else None
                rows = [_row(fmt, r, routing, l2) for r in raw]
                priced = predict_rows(fam.kernel, fit.params, prof.peaks, rows)
                lr = np.log(priced / y) + log_factors(fit.series, rows)
                row[rule] = _errors(lr)
                if small.any():
                    row[rule]["decode_bias"] = float(math.expm1(np.median(lr[small])))
            out.append(row)
            print(
                f"{name:14s} {fam.kernel:16s} {dist:15s} n={len(raw):4d} "
                + "  ".join(
                    f"{rule}: {row[rule]['median']:.1%} / {row[rule]['p90']:.1%} "
                    f"bias {row[rule]['bias']:+.1%}"
                    for rule in RULES
                ),
                flush=True,
            )
    return out


def main(argv: list[str]) -> None:
    import json

    t0 = time.perf_counter()
    rows = [r for name in (argv or PROFILES) for r in family_rows(name)]
    summary: dict[str, Any] = {}
    by: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for r in rows:
        by[r["distribution"]].append(r)
    for dist, group in sorted(by.items()):
        summary[dist] = {"families": len(group)}
        for rule in RULES:
            summary[dist][rule] = {
                k: median(g[rule][k] for g in group if k in g[rule])
                for k in ("median", "p90", "bias", "decode_bias")
            }
    print(json.dumps(summary, indent=1))
    out = {
        "benchmark": "bench_moe_routing",
        "command": "python benchmarks/bench_moe_routing.py " + " ".join(argv),
        "seconds": round(time.perf_counter() - t0, 2),
        "summary": summary,
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
