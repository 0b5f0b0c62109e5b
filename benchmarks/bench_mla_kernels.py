"""The MLA kernel families (issue 34): held-out error per family, GPU and engine.

Run: ``python benchmarks/bench_mla_kernels.py`` (reads the shipped profiles only; no
``aiconfigurator-core`` needed). Writes ``benchmarks/results/mla-kernels.json`` and
prints every miss of issue #12's targets (held-out median |relative error| <= 5%,
P90 <= 15%). The held-out rows are a seeded quarter of each family's table rows
(``twin.calibration.fit.split_holdout``) that the fit never saw; nothing is tuned on
them. Families (``twin.costmodel.formulas.mla_kernel``): the attention kernels
(``mla_prefill``, ``mla_decode``; ``_fp8kv`` over an fp8 cache), the absorbed decode's
BMMs (``mla_bmm``, ``mla_bmm_fp8``) and the whole attention module per phase
(``mla_module_prefill``/``_decode``, per GEMM mode and KV dtype), fitted by
``twin calibrate --from aiconfigurator`` (``twin.calibration.aic_mla``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from statistics import median

from twin.costmodel.formulas import MLA_VARIANTS
from twin.costmodel.profile_store import load_profile, shipped_profiles

RESULTS = Path(__file__).parent / "results" / "mla-kernels.json"
TARGET_MEDIAN, TARGET_P90 = 0.05, 0.15


def _group(kernel: str) -> str:
    """``attention kernel``, ``bmm`` or ``module``: the summary's rows."""
    if kernel.startswith("mla_module"):
        return "module"
    return "bmm" if kernel.startswith("mla_bmm") else "attention kernel"


def main() -> None:
    t0 = time.perf_counter()
    rows = []
    for name, path in sorted(shipped_profiles().items()):
        if name.endswith("-datasheet") or "-" not in name:
            continue
        prof = load_profile(path)
        for kernel in MLA_VARIANTS:
            fit = prof.kernels.get(kernel)
            if fit is None:
                continue
            med, p90 = fit.heldout_median_rel_err, fit.heldout_p90_rel_err
            rows.append(
                {
                    "profile": name,
                    "family": kernel,
                    "group": _group(kernel),
                    "kernel_source": fit.provenance.get("kernel_source"),
                    "version": fit.provenance.get("version"),
                    "tables": fit.provenance.get("tables"),
                    "n_shapes": fit.n_shapes,
                    "n_heldout": fit.n_heldout,
                    "n_flagged": fit.n_flagged,
                    "heldout_median": med,
                    "heldout_p90": p90,
                    "meets_median": med is not None and med <= TARGET_MEDIAN,
                    "meets_p90": p90 is not None and p90 <= TARGET_P90,
                }
            )
    for r in rows:
        r["meets_target"] = r["meets_median"] and r["meets_p90"]
        mark = "ok  " if r["meets_target"] else "MISS"
        print(
            f"{mark} {r['profile']:22s} {r['family']:36s} median {r['heldout_median']:6.1%} "
            f"P90 {r['heldout_p90']:6.1%}  ({r['n_shapes']} shapes, {r['kernel_source']})"
        )

    def summarise(sel: list[dict]) -> dict:
        meds = [r["heldout_median"] for r in sel]
        p90s = [r["heldout_p90"] for r in sel]
        return {
            "families": len(sel),
            "meeting_target": sum(r["meets_target"] for r in sel),
            "meeting_median": sum(r["meets_median"] for r in sel),
            "meeting_p90": sum(r["meets_p90"] for r in sel),
            "median_of_medians": median(meds) if meds else None,
            "median_of_p90s": median(p90s) if p90s else None,
        }

    summary = {
        **summarise(rows),
        "targets": {"median": TARGET_MEDIAN, "p90": TARGET_P90},
        "by_group": {
            g: summarise([r for r in rows if r["group"] == g])
            for g in ("attention kernel", "bmm", "module")
        },
    }
    print(json.dumps(summary, indent=1))
    out = {
        "benchmark": "bench_mla_kernels",
        "command": "python benchmarks/bench_mla_kernels.py",
        "seconds": round(time.perf_counter() - t0, 2),
        "summary": summary,
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
