"""Diagnosis only (issue 31, helper qwen35, session 27): ``benchmarks/silicon_rows.py``
with the kernels of every eagerly run step that prefills scaled by KSCALE and its eager
host time by HSCALE, patched in this process (and its forked workers). Run from the
repository root:

    KSCALE=2 PYTHONPATH=. python benchmarks/results/qwen35-s27/kscale_rows.py ROWS.csv \\
        --split fit --out DIR --jobs 2
"""

import os
import sys
from collections.abc import Sequence
from typing import Any

sys.path.insert(0, "benchmarks")

import silicon_rows

import twin.engine.host_time as ht

K = float(os.environ.get("KSCALE", "1"))
H = float(os.environ.get("HSCALE", "1"))


def step_time(self: Any, prefills: Sequence[Any], decode_batch: int, decode_context: int) -> float:
    kernels = float(self.inner.step_time(prefills, decode_batch, decode_context))
    if not prefills:
        return kernels
    if self.graph_tokens and sum(c[0] for c in prefills) + decode_batch <= self.graph_tokens:
        return kernels
    return kernels * K + self.floor_s * H


ht.EagerPrefillPricer.step_time = step_time  # type: ignore[method-assign]
print("kscale", K, "hscale", H, flush=True)
sys.exit(silicon_rows.main(sys.argv[1:]))
