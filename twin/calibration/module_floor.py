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
fit's launch floor ``t0`` more than :data:`COLLECTION_FLOOR_RATIO` times the lowest
floor of the same family (projection format and KV dtype) in the reference tables is a
collection floor; it is lowered to that reference floor, the fit's other parameters
(the module's bytes, FLOPs and attention terms) kept. The reference tables: the same
GPU's TensorRT-LLM module table (the same module, timed by the same collector family on
the same silicon), and on B300, GB200 and GB300 also vLLM's B200 table of the same
release (the same backend, FLASHINFER_MLA, and HBM class, 8 TB/s HBM3e; GB200 is the
B200 die; B200's is the one vLLM 0.24.0 module table whose floor agrees with
TensorRT-LLM's: 25.6 against 24.2 us, bf16). The sibling matters for the nvfp4 module,
whose TensorRT-LLM table is itself slower than vLLM's (B300 47.1 us against vLLM B200's
34.8; GB200 50.1, GB300 48.4): GB300's own later vLLM table (0.27.0, the floor it
collects without the extra) fits 34.9 us there, B200's 34.8.
Below the ratio the engines' own launch sequences differ and the table is kept as it is.
A row-by-row factor is not used: the tables' shapes (their bytes and FLOPs terms) are
the kernels', only the floor is the collection's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

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


def bound_floor(fit: KernelFit, floors: dict[str, float]) -> KernelFit:
    """``fit`` with its ``t0_s`` lowered to the lowest of ``floors`` (a label per reference
    fit's ``t0_s``) where it is above :data:`COLLECTION_FLOOR_RATIO` times that floor; the
    provenance records the fitted floor and the reference. ``fit`` itself is unchanged."""
    if not floors:
        return fit
    label, floor = min(floors.items(), key=lambda kv: kv[1])
    t0 = float(fit.params["t0_s"])
    if t0 <= COLLECTION_FLOOR_RATIO * floor:
        return fit
    provenance = {
        **fit.provenance,
        "floor_bound": {
            "fitted_t0_s": t0,
            "t0_s": floor,
            "reference": label,
            "rule": "twin.calibration.module_floor: a vLLM decode-module floor above "
            f"{COLLECTION_FLOOR_RATIO}x the reference tables' is the collection's",
        },
    }
    return dataclasses.replace(fit, params={**fit.params, "t0_s": floor}, provenance=provenance)


def apply(
    fit: KernelFit,
    gpu: str,
    engine: str,
    kernel: str,
    release: str,
    reference_fit: Callable[[FloorReference, str], KernelFit | None],
) -> KernelFit:
    """``fit`` of ``engine``'s family ``kernel`` (table release ``release``) on ``gpu``,
    bounded by the rule where it applies; ``reference_fit(ref, kernel)`` fits the same
    family from a reference table (None where that table lacks it)."""
    if not bounded(engine, kernel):
        return fit
    floors = {}
    for ref in references(gpu, release):
        ref_fit = reference_fit(ref, kernel)
        if ref_fit is not None:
            who = (ref_fit.provenance.get(k, "") for k in ("framework", "version", "device"))
            floors[f"{' '.join(who)} {kernel}"] = float(ref_fit.params["t0_s"])
    return bound_floor(fit, floors)


__all__ = [
    "COLLECTION_FLOOR_RATIO",
    "FloorReference",
    "apply",
    "bound_floor",
    "bounded",
    "references",
]
