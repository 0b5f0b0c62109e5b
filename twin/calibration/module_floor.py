"""vLLM's MLA decode-module floors bounded by the same module's floor in a reference table.

NVIDIA's vLLM 0.24.0 ``mla_generation_module_perf`` tables (aiconfigurator-core 0.12.0,
timed by ``collector/vllm/collect_mla_module.py``: the module forward, projections,
attention and o_proj) carry on most GPUs a flat launch floor about twice the one the
same module has in TensorRT-LLM's table on the same GPU. DeepSeek-V3's module at 8 heads
and batch 4: vLLM H200 (FLASH_ATTN_MLA) 86-90 us against TensorRT-LLM 1.3.0rc20 H200
46-52; vLLM B300 (FLASHINFER_MLA) 75-99 against TensorRT-LLM B300 29-50 and vLLM B200,
the same backend and release, 33-46. The gap is additive and the same at every context:
vLLM H200 minus TensorRT-LLM H200, bf16, 33-38 us at one sequence from 2 to 8,192
tokens, 38-42 at four, 44-49 at sixteen; vLLM B300 minus vLLM B200 36-38 at one sequence
from 2 to 131,072 tokens, 43-45 at four, 50-53 at sixteen. The module's bytes at 8 heads
are ~52 MB of bf16 weights, 11 us at H200's 4.8 TB/s, so ~45-50 us with a dozen launches
is what a kernel sequence takes (TensorRT-LLM's tables and vLLM's B200 table read that);
an extra 35-60 us at every context is time outside the kernels (an eager or host-bound
collection), not the module. And a serving run does not show it: Kimi-K2.5's H200 vLLM
decode step at 4 clients measures 10.5 ms, the twin 12.9 ms with the module at ~97 us a
layer, ~10.1 ms at ~50 us (``docs/decisions.md``, "the kernel tables' hot ranks").
The same GPU's vLLM 0.27.0 table agrees: GB300's floor is 74 us at 0.24.0, 26 us at
0.27.0 (its TensorRT-LLM table 23 us).

The rule (applied by ``aic_import`` to every vLLM decode-module fit, each release's): a
fit's launch floor (below) more than :data:`COLLECTION_FLOOR_RATIO` times the lowest
floor of the same family (projection format and KV dtype) in the reference tables is a
collection floor; it is lowered to that reference floor through ``t0``, the fit's other
parameters (the module's bytes, FLOPs, attention and launch terms) kept. The reference
tables: the same GPU's TensorRT-LLM module table (the same module, timed by the same
collector family on the same silicon), and on B300, GB200 and GB300 also vLLM's B200
table of the same release (the same backend, FLASHINFER_MLA, and HBM class, 8 TB/s
HBM3e; GB200 is the B200 die; B200's is the one vLLM 0.24.0 module table whose floor
agrees with TensorRT-LLM's: 25.6 against 24.2 us, bf16). The sibling matters for the
nvfp4 module, whose TensorRT-LLM table is itself slower than vLLM's (B300 47.1 us
against vLLM B200's 34.8; GB200 50.1, GB300 48.4): GB300's own later vLLM table (0.27.0,
the floor it collects without the extra) fits 34.9 us there, B200's 34.8.
Below the ratio the engines' own launch sequences differ and the table is kept as it is.
A row-by-row factor is not used: the tables' shapes (their bytes and FLOPs terms) are
the kernels', only the floor is the collection's.

A fit's floor (:func:`launch_floor`) is its price of its table's least launch with no
work: ``t0`` plus each term of :data:`FIXED_LAUNCH` at its least over the table's rows
(the decode attention kernel's first wave, which every row under a launch rule pays). Not
``t0`` alone: a fit may carry the same fixed time in ``t0`` or in a one-wave launch term
(TensorRT-LLM's RTX PRO 6000 module took the FMHA v2 launch in session 44: ``t0`` 26.4 ->
18.4 us, its one-wave term 10.0 us, its smallest row's price 36.6 -> 37.8 us), and the
bound must not follow that split. Not a price at a row either: that holds the row's work
(the module's weight bytes), which the bounded fit's own bytes term prices again. A
bounded fit's ``t0`` is set so that its own floor equals the reference's (its own
one-wave term kept: the same split does not move it either).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from twin.costmodel.formulas import get_formula
from twin.costmodel.profile import KernelFit

# The families the rule bounds: vLLM's decode modules (every GEMM mode and KV dtype).
BOUNDED_ENGINE = "vllm"
BOUNDED_PREFIX = "mla_module_decode"
# Above this ratio to the reference floor a fit's t0 is a collection floor (the bounded
# tables sit at 2.0-3.0x on H200, 2.3-3.9x on B300 against the lowest reference; vLLM's
# own B200 table at 0.67-1.12x of TensorRT-LLM's, GB300's 0.27.0 table at 0.72-1.19x).
# The rule also bounds vLLM 0.24.0's H100 (2.1-3.2x), GB200 (2.3-3.7x), GB300 (the
# 0.24.0 release fits, 2.3-3.8x) and RTX PRO 6000 (1.7-4.6x) decode modules: the same
# additive gap to TensorRT-LLM's table, 35-65 us flat in the context (RTX PRO 6000
# 25-45 us up to 512 tokens; its TensorRT-LLM kernel is the slower one at long contexts,
# a shape the rule leaves alone). L40S has no TensorRT-LLM module table: not bounded.
# (docs/decisions.md, "vLLM's MLA decode-module floors" and "... on H100, GB200, GB300
# and RTX PRO 6000".)
COLLECTION_FLOOR_RATIO = 1.5
# The reference tables of a GPU's vLLM decode module, besides its own TensorRT-LLM table:
# (GPU, engine) whose table of the newest release at or before the fit's counts too
# (vLLM's B200 table: B200 is GB200's die, and B300 / GB300 run the same backend on the
# same HBM class).
SIBLING_TABLES: dict[str, tuple[str, str]] = {
    "b300": ("b200", "vllm"),
    "gb200": ("b200", "vllm"),
    "gb300": ("b200", "vllm"),
}
REFERENCE_ENGINE = "trtllm"
# The launch features whose least over a table's rows is part of a fit's floor
# (:func:`launch_floor`): the decode attention kernel's waves (``mla_families.
# MLA_DECODE_LAUNCH``; ``mla_decode_kernels.mla_decode_launch``: at least one under a rule,
# zero at every row without one), a latency each launch pays once per wave whatever its
# work. Not ``launch_ctas``: a time per CTA, the work's (its least row's share is 1 CTA,
# 18-87 ns on the bounded fits and their references).
FIXED_LAUNCH = ("launch_waves",)
# A table's rows as the fits read them: each feature of the family's formula by name.
Rows = Sequence[Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class FloorReference:
    """Where a reference floor comes from: a table's GPU, engine and release."""

    gpu: str
    engine: str
    release: str | None  # None: the newest table


def bounded(engine: str, kernel: str) -> bool:
    """Whether ``engine``'s family ``kernel`` falls under the rule."""
    return engine == BOUNDED_ENGINE and kernel.startswith(BOUNDED_PREFIX)


def references(gpu: str, release: str) -> list[FloorReference]:
    """The reference tables of ``gpu``'s vLLM decode module at vLLM release ``release``."""
    out = [FloorReference(gpu, REFERENCE_ENGINE, None)]
    if gpu in SIBLING_TABLES:
        sibling, engine = SIBLING_TABLES[gpu]
        out.append(FloorReference(sibling, engine, release))
    return out


def launch_floor(kernel: str, fit: KernelFit, rows: Rows) -> float:
    """``fit``'s floor over ``rows`` (its table's): its price of the least launch they hold
    with no work, ``t0_s`` plus each :data:`FIXED_LAUNCH` term at its least over ``rows``
    (flops, bytes and every other feature zero; the launch terms sit on the compute side
    of the smooth maximum, so with no bytes they add). The same however the fit splits its
    fixed time between ``t0_s`` and those terms."""
    f = get_formula(kernel)
    floor = float(fit.params["t0_s"])
    for x in FIXED_LAUNCH:
        if x in f.extras and rows:
            floor += f.coefficient(fit.params, x) * min(float(r[x]) for r in rows)
    return floor


def bound_floor(fit: KernelFit, own: float, floors: dict[str, float]) -> KernelFit:
    """``fit``, whose floor (:func:`launch_floor`) is ``own``, with its ``t0_s`` lowered so
    that its floor is the lowest of ``floors`` (a label per reference fit's floor) where
    ``own`` is above :data:`COLLECTION_FLOOR_RATIO` times that floor; its launch terms kept.
    The provenance records the fitted ``t0_s``, the floor and the reference. ``fit`` itself
    is unchanged."""
    if not floors:
        return fit
    label, floor = min(floors.items(), key=lambda kv: kv[1])
    if own <= COLLECTION_FLOOR_RATIO * floor:
        return fit
    t0 = float(fit.params["t0_s"])
    bounded_t0 = max(0.0, floor - (own - t0))  # the fit's own launch share kept
    provenance = {
        **fit.provenance,
        "floor_bound": {
            "fitted_t0_s": t0,
            "t0_s": bounded_t0,
            "floor_s": floor,
            "reference": label,
            "rule": "twin.calibration.module_floor: a vLLM decode-module floor above "
            f"{COLLECTION_FLOOR_RATIO}x the reference tables' is the collection's",
        },
    }
    params = {**fit.params, "t0_s": bounded_t0}
    return dataclasses.replace(fit, params=params, provenance=provenance)


def apply(
    fit: KernelFit,
    rows: Rows,
    gpu: str,
    engine: str,
    kernel: str,
    release: str,
    reference_fit: Callable[[FloorReference, str], tuple[KernelFit, Rows] | None],
) -> KernelFit:
    """``fit`` of ``engine``'s family ``kernel`` (table release ``release``) on ``gpu``,
    fitted on ``rows``, bounded by the rule where it applies; ``reference_fit(ref, kernel)``
    fits the same family from a reference table and gives that table's rows (None where
    that table lacks it)."""
    if not bounded(engine, kernel):
        return fit
    floors = {}
    for ref in references(gpu, release):
        found = reference_fit(ref, kernel)
        if found is not None:
            ref_fit, ref_rows = found
            who = (ref_fit.provenance.get(k, "") for k in ("framework", "version", "device"))
            floors[f"{' '.join(who)} {kernel}"] = launch_floor(kernel, ref_fit, ref_rows)
    return bound_floor(fit, launch_floor(kernel, fit, rows), floors)


__all__ = [
    "COLLECTION_FLOOR_RATIO",
    "FIXED_LAUNCH",
    "FloorReference",
    "Rows",
    "apply",
    "bound_floor",
    "bounded",
    "launch_floor",
    "references",
]
