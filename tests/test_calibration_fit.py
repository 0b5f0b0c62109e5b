"""Fitting: the models reproduce synthetic timings generated from known parameters."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from twin.calibration.fit import fit_kernel, fit_params, predict_rows, split_holdout
from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import ssm_features as ssm_ft

PEAKS = {"flops": 1e14, "mem_bw": 2e12, "host_bw": 3e10}


def _rows(
    kernel: str,
    params: dict[str, float],
    features: list[ft.Features],
    noise: float = 0.0,
    seed: int = 0,
) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for flops, nbytes, extras in features:
        t = lat.predict(kernel, params, PEAKS, flops, nbytes, extras)
        row = {
            "kernel": kernel,
            "flops": flops,
            "bytes": nbytes,
            "median_s": t * math.exp(rng.gauss(0.0, noise)),
        }
        row.update({x: extras.get(x, 0.0) for x in fm.get_formula(kernel).extras})
        rows.append(row)
    return rows


GEMM_TRUE = {
    "t0_s": 6e-6,
    "eff_flops": 0.65,
    "eff_bytes": 0.8,
    "p": 3.0,
    "c_weight_elems": 2e-13,
    "c_wave_k": 0.0,  # no SM count: GEMM_SHAPES have no waves (ft.gemm_wave_k)
}
GEMM_SHAPES = [
    ft.gemm_features(m, k, n, 2)
    for m in (1, 8, 64, 512, 4096, 16384)
    for k, n in ((1024, 1024), (4096, 4096), (4096, 14336), (8192, 2048))
]


def test_gemm_fit_recovers_known_parameters() -> None:
    rows = _rows("gemm", GEMM_TRUE, GEMM_SHAPES)
    fitted = fit_params("gemm", rows, PEAKS)
    pred = predict_rows("gemm", fitted, PEAKS, rows)
    y = np.array([r["median_s"] for r in rows])
    assert np.max(np.abs(pred - y) / y) < 0.02
    # The roofline's two efficiencies are identifiable from the two regimes.
    assert fitted["eff_flops"] == pytest.approx(0.65, rel=0.05)
    assert fitted["eff_bytes"] == pytest.approx(0.8, rel=0.05)


def test_attention_fit_with_score_term_and_noise_generalises() -> None:
    true = {
        "t0_s": 1e-5,
        "eff_flops": 0.5,
        "eff_bytes": 0.6,
        "p": 4.0,
        "c_score_elems": 3e-13,
        "c_tiles": 2e-8,
    }
    shapes = [
        ft.attn_prefill_features(n, c, h, h // 4, d, 2)
        for n in (64, 256, 1024, 4096)
        for c in (0, 1024, 8192)
        for h in (8, 32)
        for d in (64, 128)
    ]
    rows = _rows("attn_prefill", true, shapes, noise=0.02, seed=3)
    fit = fit_kernel("attn_prefill", rows, PEAKS, seed=1)
    assert fit.n_heldout == len(rows) // 4
    assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err < 0.05
    assert fit.heldout_max_rel_err is not None and fit.heldout_max_rel_err < 0.15


@pytest.mark.parametrize("kernel", ["copy_d2d", "copy_h2d", "elementwise"])
def test_bandwidth_kernels_fit_launch_and_bandwidth(kernel: str) -> None:
    true = {"t0_s": 8e-6, "eff_bytes": 0.85}
    sizes = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20, 1 << 30]
    feats = [
        ft.copy_features(s, kernel)
        if kernel.startswith("copy")
        else ft.elementwise_features(s // 8192 + 1, 4096, 2)
        for s in sizes
    ]
    fitted = fit_params(kernel, _rows(kernel, true, feats), PEAKS)
    assert fitted["t0_s"] == pytest.approx(8e-6, rel=0.05)
    assert fitted["eff_bytes"] == pytest.approx(0.85, rel=0.02)


def test_scan_fit_reproduces_linear_in_tokens() -> None:
    true = {"t0_s": 3e-5, "eff_flops": 0.3, "eff_bytes": 0.5, "p": 4.0, "c_chunks": 2e-8}
    shapes = [
        ssm_ft.ssm_scan_features(b, L, h, 64, n, g, q, 2)
        for b in (1, 4)
        for L in (256, 1024, 4096, 16384)
        for h in (32, 128)
        for n in (64, 128)
        for g in (1, 8)
        for q in (128, 256)
    ]
    rows = _rows("ssm_scan", true, shapes)
    fitted = fit_params("ssm_scan", rows, PEAKS)
    pred = predict_rows("ssm_scan", fitted, PEAKS, rows)
    y = np.array([r["median_s"] for r in rows])
    assert np.median(np.abs(pred - y) / y) < 0.01


def test_holdout_split_is_seeded_and_disjoint() -> None:
    train, held = split_holdout(40, 0.25, seed=7)
    assert split_holdout(40, 0.25, seed=7) == (train, held)
    assert len(held) == 10 and not set(train) & set(held)
    assert sorted(train + held) == list(range(40))
    assert split_holdout(4)[1] == []  # too few shapes: nothing held out


def test_vectorised_and_scalar_predictions_agree() -> None:
    rows = _rows("gemm", GEMM_TRUE, GEMM_SHAPES)
    vec = predict_rows("gemm", GEMM_TRUE, PEAKS, rows)
    fast = lat.compile_fast("gemm", GEMM_TRUE, PEAKS)
    for r, v in zip(rows, vec, strict=True):
        assert v == pytest.approx(r["median_s"], rel=1e-12)
        assert fast(r["flops"], r["bytes"], r["weight_elems"]) == pytest.approx(v, rel=1e-12)


def test_smooth_max_is_between_max_and_sum() -> None:
    for a, b, p in ((1.0, 2.0, 1.0), (1.0, 2.0, 4.0), (3.0, 3.0, 20.0), (0.0, 2.0, 3.0)):
        s = lat.smooth_max(a, b, p)
        assert max(a, b) - 1e-12 <= s <= a + b + 1e-12
    assert lat.smooth_max(1.0, 2.0, 1.0) == pytest.approx(3.0)
