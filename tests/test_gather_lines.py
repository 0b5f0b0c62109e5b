"""NCCL's all-gather and reduce-scatter families as the least of three latency-plus-
bandwidth lines (``collective_families.GATHER_LINES``, ``KernelFormula.lines``): the cost model's
gather and scatter price the least line on the ring's bytes, a fit of NCCL's rows (what
``twin calibrate --refit allgather`` runs) comes out in that form, and the shipped H200
TensorRT-LLM fit follows NVIDIA's table where one line missed by a fifth either way."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest

from twin.calibration.fit import fit_kernel, predict_rows
from twin.costmodel import CostModel
from twin.costmodel import collective_families as colf
from twin.costmodel import features as ft
from twin.costmodel import formulas as fm
from twin.costmodel import kernel_formula as kf
from twin.costmodel import latency as lat
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import load_profile, resolve_profile
from twin.presets import get_model

# Ring LL, LL128 and Simple / NVLS: each later line slower to start, faster per byte.
LINES = {
    "t0_s": 8e-6,
    "eff_bytes": 0.1,
    "t0_2_s": 1.2e-5,
    "eff_bytes_2": 0.4,
    "t0_3_s": 2.5e-5,
    "eff_bytes_3": 0.75,
}
OPS = ("allgather", "reducescatter")


def _least(ring_bytes: float, params: dict[str, float], bw: float) -> float:
    return min(
        params[t0] + ring_bytes / (params[eff] * bw)
        for t0, eff in (kf.line_params(i) for i in (1, 2, 3))
    )


def test_the_formula_has_the_lines() -> None:
    for op in OPS:
        f = fm.get_formula(colf.collective_kernel(op, 8))
        assert f.lines == colf.GATHER_LINES == 3
        assert f.model_name == "min3_bandwidth"
        assert f.param_names == tuple(LINES)


def test_the_cost_model_prices_the_least_line_of_a_gather_and_a_scatter() -> None:
    model, prof = get_model("deepseek-r1"), resolve_profile("b200", None, "trtllm")
    fits = {colf.collective_kernel(op, 8): KernelFit("min3_bandwidth", dict(LINES)) for op in OPS}
    cost = CostModel(model, dataclasses.replace(prof, kernels={**prof.kernels, **fits}), 8, ep=8)
    bw = prof.peaks["interconnect_bw"]
    ring_sizes = []
    for nbytes in (4e3, 1e6, 4e6, 256e6):
        ring = ft.gather_features(nbytes, 8)[1]
        ring_sizes.append(ring)
        want = _least(ring, LINES, bw)
        assert cost.gather_time(nbytes) == pytest.approx(want, rel=1e-12)
        assert cost.scatter_time(nbytes) == pytest.approx(want, rel=1e-12)
        # The fit's vectorised model and the one-off predict: the same least line.
        kernel = colf.collective_kernel("allgather", 8)
        row = {"flops": 0.0, "bytes": ring, "median_s": 1.0}
        assert predict_rows(kernel, LINES, prof.peaks, [row])[0] == pytest.approx(want, rel=1e-12)
        assert lat.predict(kernel, LINES, prof.peaks, 0.0, ring) == pytest.approx(want, rel=1e-12)
    # Each line is the least somewhere among these sizes (a small buffer on the first,
    # 256 MB on the third): a one-line form would price them all on one.
    first = [LINES["t0_s"] + r / (LINES["eff_bytes"] * bw) for r in ring_sizes]
    third = [LINES["t0_3_s"] + r / (LINES["eff_bytes_3"] * bw) for r in ring_sizes]
    assert cost.gather_time(4e3) == pytest.approx(first[0], rel=1e-12)
    assert cost.gather_time(256e6) == pytest.approx(third[-1], rel=1e-12)
    assert first[1] > cost.gather_time(1e6) and third[1] > cost.gather_time(1e6)


def test_a_refit_of_nccl_s_rows_has_three_lines() -> None:
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration.aic_collectives import gather_rows
    from twin.calibration.aic_tables import system_dir

    prof = load_profile("h200-trtllm")
    for fam in gather_rows(system_dir("h200")):
        if fam.kernel not in ("allgather_4gpu", "reducescatter_8gpu"):
            continue
        fit = fit_kernel(fam.kernel, fam.rows, prof.peaks)
        assert fit.model == "min3_bandwidth"
        assert set(fit.params) == set(LINES)
        # Stored by latency (the shipped files' order, the same prices on a reload).
        assert fit.params["t0_s"] <= fit.params["t0_2_s"] <= fit.params["t0_3_s"]
        assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err < 0.05
        # The shipped profile carries this refit's form.
        assert prof.kernels[fam.kernel].model == "min3_bandwidth"


def test_shipped_h200_trtllm_gather_follows_its_table() -> None:
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration.aic_collectives import gather_rows
    from twin.calibration.aic_tables import system_dir

    prof = load_profile("h200-trtllm")
    kernel = colf.collective_kernel("allgather", 4)
    fam = next(f for f in gather_rows(system_dir("h200")) if f.kernel == kernel)
    table = {r["shape"]["bytes"]: r["median_s"] for r in fam.rows}
    price = lat.compile_fast(kernel, prof.kernels[kernel].params, prof.peaks)
    # NCCL 2.29.2's 4-GPU all-gather of 2 MiB and 256 MiB: 18.7 us and 660 us; the one
    # line priced them 14.6 (-22%) and 791 (+20%).
    for nbytes in (2 << 20, 256 << 20):
        got = price(*ft.gather_features(nbytes, 4)[:2])
        assert got == pytest.approx(table[nbytes], rel=0.1), nbytes


def test_a_one_line_gather_still_loads_at_its_prices(tmp_path: Path) -> None:
    """A profile saved with the one-line all-gather (``"model": "bandwidth"``) loads with
    that line repeated: the same prices."""
    data = json.loads(
        resources.files("twin.calibration").joinpath("profiles/h200-trtllm.json").read_text()
    )
    kernel = colf.collective_kernel("reducescatter", 8)
    old = {"t0_s": 1.1e-5, "eff_bytes": 0.6}
    data["kernels"][kernel]["model"] = "bandwidth"
    data["kernels"][kernel]["params"] = dict(old)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    profile = load_profile(path)
    fit = profile.kernels[kernel]
    assert fit.model == "min3_bandwidth"
    price = lat.compile_fast(kernel, fit.params, profile.peaks)
    bw = profile.peaks["interconnect_bw"]
    for nbytes in (4 << 10, 1 << 20, 256 << 20):
        ring = ft.gather_features(nbytes, 8)[1]
        assert price(0.0, ring) == pytest.approx(old["t0_s"] + ring / (old["eff_bytes"] * bw))
