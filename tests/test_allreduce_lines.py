"""The all-reduce families as the least of three latency-plus-bandwidth lines
(``collective_families.ALLREDUCE_LINES``, ``KernelFormula.lines``): each compiled form prices the
least line, a fit recovers three lines it was generated from, and the shipped H200
SGLang fit follows NVIDIA's table at a small and a large message, where one line missed
by a third either way."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from twin.calibration.fit import fit_kernel, predict_rows
from twin.costmodel import collective_families as colf
from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel import kernel_formula as kf
from twin.costmodel import latency as lat
from twin.costmodel.profile_store import load_profile
from twin.errors import TwinError

PEAKS = {"interconnect_bw": 450e9}
# One-shot, two-shot, NCCL: each later line slower to start and faster per byte.
LINES = {
    "t0_s": 3e-6,
    "eff_bytes": 0.15,
    "t0_2_s": 7e-6,
    "eff_bytes_2": 0.6,
    "t0_3_s": 7e-5,
    "eff_bytes_3": 1.0,
}
SIZES = [256 << i for i in range(23)]  # the tables' 256 B to 1 GiB


def _least(nbytes: float, params: dict[str, float]) -> float:
    ring = ft.allreduce_features(nbytes, 8)[1]
    return min(
        params[t0] + ring / (params[eff] * PEAKS["interconnect_bw"])
        for t0, eff in (kf.line_params(i) for i in (1, 2, 3))
    )


def test_every_form_prices_the_least_line() -> None:
    kernel = colf.allreduce_kernel(8)
    assert fm.get_formula(kernel).model_name == "min3_bandwidth"
    assert fm.get_formula(colf.nccl_allreduce_kernel(8)).param_names == tuple(LINES)
    fast = lat.compile_fast(kernel, LINES, PEAKS)
    rows = [{"flops": 0.0, "bytes": ft.allreduce_features(b, 8)[1], "median_s": 1.0} for b in SIZES]
    batch = predict_rows(kernel, LINES, PEAKS, rows)
    for b, row, got in zip(SIZES, rows, batch, strict=True):
        want = _least(b, LINES)
        assert fast(0.0, row["bytes"]) == pytest.approx(want, rel=1e-12)
        assert lat.predict(kernel, LINES, PEAKS, 0.0, row["bytes"]) == pytest.approx(
            want, rel=1e-12
        )
        assert got == pytest.approx(want, rel=1e-12)
    # Each line is the least somewhere: the smallest, a middle and the largest message.
    ring = [r["bytes"] for r in rows]
    assert fast(0.0, ring[0]) < LINES["t0_2_s"]
    assert LINES["t0_2_s"] < fast(0.0, ring[14]) < LINES["t0_3_s"]
    assert fast(0.0, ring[-1]) == pytest.approx(
        LINES["t0_3_s"] + ring[-1] / (LINES["eff_bytes_3"] * PEAKS["interconnect_bw"])
    )
    with pytest.raises(AssertionError, match="one line"):
        lat.kernel_constants(kernel, LINES, PEAKS)
    with pytest.raises(TwinError, match="several lines"):
        lat.compile_affine(kernel, LINES, PEAKS)


def test_a_fit_recovers_three_lines() -> None:
    rng = np.random.default_rng(3)
    rows = [
        {
            "flops": 0.0,
            "bytes": ft.allreduce_features(b, 8)[1],
            "median_s": _least(b, LINES) * float(rng.normal(1.0, 0.01)),
        }
        for b in SIZES
    ]
    fit = fit_kernel(colf.allreduce_kernel(8), rows, PEAKS)
    assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err < 0.02
    assert fit.heldout_p90_rel_err is not None and fit.heldout_p90_rel_err < 0.05
    # The lines come out ordered by latency, as generated.
    for name, want in LINES.items():
        assert fit.params[name] == pytest.approx(want, rel=0.25), name


def test_shipped_h200_sglang_fit_follows_its_table() -> None:
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration.aic_collectives import allreduce_rows
    from twin.calibration.aic_tables import system_dir

    profile = load_profile("h200-sglang")
    kernel = colf.allreduce_kernel(8)
    fam = next(
        f for f in allreduce_rows(system_dir("h200"), "sglang", "0.5.14") if f.kernel == kernel
    )
    table = {r["shape"]["bytes"]: r["median_s"] for r in fam.rows}
    price = lat.compile_fast(kernel, profile.kernels[kernel].params, profile.peaks)
    # 128 KiB (9 tokens of DeepSeek's 7168-wide bf16 hidden state: the one-shot kernel)
    # and 128 MiB (9362 tokens: NCCL), 6.7 us and 563 us in SGLang 0.5.14's table; one
    # line priced them 4.4 us (-35%) and 816 us (+45%).
    for nbytes in (128 << 10, 128 << 20):
        got = price(*ft.allreduce_features(nbytes, 8)[:2])
        assert got == pytest.approx(table[nbytes], rel=0.1), nbytes


def test_a_one_line_profile_still_loads_at_its_prices(tmp_path: Path) -> None:
    """A profile saved before the all-reduce had three lines (``"model": "bandwidth"``,
    ``t0_s`` and ``eff_bytes``) loads with that line repeated: the same prices."""
    data = json.loads(
        resources.files("twin.calibration").joinpath("profiles/h200-sglang.json").read_text()
    )
    kernel = colf.allreduce_kernel(8)
    old = {"t0_s": 5e-6, "eff_bytes": 0.4}
    data["kernels"][kernel]["model"] = "bandwidth"
    data["kernels"][kernel]["params"] = dict(old)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    profile = load_profile(path)
    fit = profile.kernels[kernel]
    assert fit.model == "min3_bandwidth"
    price = lat.compile_fast(kernel, fit.params, profile.peaks)
    for nbytes in (4 << 10, 1 << 20, 256 << 20):
        ring = ft.allreduce_features(nbytes, 8)[1]
        want = old["t0_s"] + ring / (old["eff_bytes"] * profile.peaks["interconnect_bw"])
        assert price(0.0, ring) == pytest.approx(want, rel=1e-12)
