"""No shipped GEMM fit prices a GEMM faster than its GPU can run it (issue 34).

Several shipped GEMM fits carry ``eff_flops`` above 1 (vLLM's Hopper ``gemm_fp8`` 1.95 / 2.65,
TensorRT-LLM's Blackwell ``gemm_nvfp4`` at the bound): their compute time is carried by the
waves term (``c_wave_k`` x waves x k, ``features.gemm_wave_k``), collinear with the FLOP term at
large m, so ``eff_flops`` alone says nothing physical. What must hold is the price: over large
and small shapes the FLOP rate a fit predicts stays under its tensor-core peak (session 40: at
most 0.93 of it over the grid below, on every shipped profile)."""

from __future__ import annotations

import pytest

from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel.formulas import get_formula
from twin.costmodel.profile import Profile
from twin.costmodel.profile_store import shipped_profiles
from twin.hardware import SM_COUNTS

ROWS = (1, 16, 128, 1024, 4096, 16384)
# (k, n): a 7-8B model's square and MLP projections, a 70B's, and a wide square.
SHAPES = ((4096, 4096), (8192, 8192), (8192, 28672), (28672, 8192), (16384, 16384))


def _gemm_fits() -> list[tuple[str, str]]:
    out = []
    for name, path in sorted(shipped_profiles().items()):
        prof = Profile.load(path)
        out += [(name, fam) for fam in prof.kernels if fam.startswith("gemm")]
    return out


@pytest.mark.parametrize(("profile", "family"), _gemm_fits())
def test_a_gemm_fit_never_beats_its_flop_peak(profile: str, family: str) -> None:
    prof = Profile.load(shipped_profiles()[profile])
    formula = get_formula(family)
    peak = prof.peaks.get(formula.flops_peak)
    if not peak:
        pytest.skip(f"{profile} has no {formula.flops_peak} peak")
    price = lat.compile_kernel(family, prof.kernels[family].params, prof.peaks)
    e = 2 if formula.flops_peak == "flops" else 1  # bf16 operands, else 8-bit or narrower
    sms = SM_COUNTS.get(prof.gpu)
    for m in ROWS:
        for k, n in SHAPES:
            flops, nbytes, extras = ft.gemm_features(m, k, n, e, sms)
            rate = flops / price(flops, nbytes, extras)
            assert rate < peak, f"{profile} {family} m={m} k={k} n={n}: {rate / peak:.2f}x peak"
