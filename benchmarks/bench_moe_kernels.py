"""The fused-MoE kernel families (issue 34): held-out error per family, GPU and engine.

Run: ``python benchmarks/bench_moe_kernels.py`` (reads the shipped profiles only; no
``aiconfigurator-core`` needed). Writes ``benchmarks/results/moe-kernels.json`` and
prints every miss of issue #12's targets (held-out median |relative error| <= 5%,
P90 <= 15%). The held-out rows are a seeded quarter of each family's balanced
``moe_perf`` shapes that the fit never saw (``twin.calibration.fit.split_holdout``);
nothing is tuned on them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from statistics import median

from twin.costmodel.formulas import MOE_VARIANTS
from twin.costmodel.profile_store import load_profile, shipped_profiles

RESULTS = Path(__file__).parent / "results" / "moe-kernels.json"
TARGET_MEDIAN, TARGET_P90 = 0.05, 0.15


def main() -> None:
    t0 = time.perf_counter()
    rows = []
    for name, path in sorted(shipped_profiles().items()):
        if name.endswith("-datasheet") or "-" not in name:
            continue
        prof = load_profile(path)
        for kernel in MOE_VARIANTS:
            fit = prof.kernels.get(kernel)
            if fit is None:
                continue
            rows.append(
                {
                    "profile": name,
                    "family": kernel,
                    "kernel_source": fit.provenance.get("kernel_source"),
                    "version": fit.provenance.get("version"),
                    "n_shapes": fit.n_shapes,
                    "n_heldout": fit.n_heldout,
                    "n_flagged": fit.n_flagged,
                    "heldout_median": fit.heldout_median_rel_err,
                    "heldout_p90": fit.heldout_p90_rel_err,
                    "meets_target": (fit.heldout_median_rel_err or 0) <= TARGET_MEDIAN
                    and (fit.heldout_p90_rel_err or 0) <= TARGET_P90,
                }
            )
    for r in rows:
        mark = "ok  " if r["meets_target"] else "MISS"
        print(
            f"{mark} {r['profile']:22s} {r['family']:14s} median {r['heldout_median']:6.1%} "
            f"P90 {r['heldout_p90']:6.1%}  ({r['n_shapes']} shapes, {r['kernel_source']})"
        )
    meds = [r["heldout_median"] for r in rows]
    p90s = [r["heldout_p90"] for r in rows]
    summary = {
        "families": len(rows),
        "meeting_target": sum(r["meets_target"] for r in rows),
        "median_of_medians": median(meds) if meds else None,
        "median_of_p90s": median(p90s) if p90s else None,
        "targets": {"median": TARGET_MEDIAN, "p90": TARGET_P90},
    }
    print(json.dumps(summary, indent=1))
    out = {
        "benchmark": "bench_moe_kernels",
        "command": "python benchmarks/bench_moe_kernels.py",
        "seconds": round(time.perf_counter() - t0, 2),
        "summary": summary,
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
