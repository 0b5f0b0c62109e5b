"""Diagnosis only (issue 31, helper qwen35, session 27): ``benchmarks/silicon_rows.py``
with the routed experts of an expert-parallel (priced ep > 1) MoE layer of more than MINT
tokens (a prefill; decode batches stay below) scaled by MSCALE, patched in this process.
Run from the repository root:

    MSCALE=2 PYTHONPATH=. python benchmarks/results/qwen35-s27/moescale_rows.py ROWS.csv \\
        --split fit --out DIR --jobs 2
"""

import os
import sys
from typing import Any

sys.path.insert(0, "benchmarks")

import silicon_rows

import twin.costmodel.dense_pricing as dp

F = float(os.environ.get("MSCALE", "1"))
MINT = int(os.environ.get("MINT", "1024"))
_orig = dp.DensePricing._moe_fused


def patched(self: Any, t: int, norm: float, ar: float) -> tuple[tuple[str, float], ...]:
    out = _orig(self, t, norm, ar)
    if self._moe_ep > 1 and t > MINT:
        out = tuple((k, v * F) if k == "moe" else (k, v) for k, v in out)
    return out


dp.DensePricing._moe_fused = patched  # type: ignore[method-assign]
print("mscale", F, "min tokens", MINT, flush=True)
sys.exit(silicon_rows.main(sys.argv[1:]))
