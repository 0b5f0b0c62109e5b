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

import time
from pathlib import Path

from kernel_targets import fitted, heldout_row, summarise, write_results

from twin.costmodel.formulas import MLA_VARIANTS

RESULTS = Path(__file__).parent / "results" / "mla-kernels.json"


def _group(kernel: str) -> str:
    """``attention kernel``, ``bmm`` or ``module``: the summary's rows."""
    if kernel.startswith("mla_module"):
        return "module"
    return "bmm" if kernel.startswith("mla_bmm") else "attention kernel"


def main() -> None:
    t0 = time.perf_counter()
    rows = [
        {"profile": name, "family": kernel, "group": _group(kernel), **heldout_row(fit)}
        for name, _, kernel, fit in fitted(MLA_VARIANTS)
    ]
    for r in rows:
        mark = "ok  " if r["meets_target"] else "MISS"
        print(
            f"{mark} {r['profile']:22s} {r['family']:36s} median {r['heldout_median']:6.1%} "
            f"P90 {r['heldout_p90']:6.1%}  ({r['n_shapes']} shapes, {r['kernel_source']})"
        )
    summary = {
        **summarise(rows),
        "by_group": {
            g: summarise([r for r in rows if r["group"] == g])
            for g in ("attention kernel", "bmm", "module")
        },
    }
    write_results(RESULTS, "bench_mla_kernels", summary, rows, t0)


if __name__ == "__main__":
    main()
