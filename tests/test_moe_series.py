"""The fused-MoE fits' per-shape term (twin.costmodel.series_term, calibration.series_fit):
the kernel configuration of each shape and layout NVIDIA's tables measured."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import test_moe_kernels

from twin.calibration.aic_moe import moe_row
from twin.calibration.fit import fit_kernel, predict_rows
from twin.calibration.series_fit import attach_series, fit_series, log_factors
from twin.costmodel import CostModel
from twin.costmodel.profile import KernelFit, Profile
from twin.costmodel.profile_store import resolve_profile
from twin.costmodel.series_term import KNOTS, SeriesTerm, series_key
from twin.errors import TwinError
from twin.hardware import get_gpu
from twin.precision import WEIGHT_FORMATS
from twin.presets import get_model

# test_moe_kernels' true coefficients with a serial per-expert term.
TRUE = {**test_moe_kernels.TRUE, "c_active_experts": 1e-6}
TOKENS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
TOKENS += (3072, 4096, 6144, 8192, 12288, 16384)


def test_the_correction_is_linear_in_log_tokens_between_knots_and_flat_outside() -> None:
    term = SeriesTerm({"a": (0.1, 0.2, -0.4, 0.0, 0.3)})
    c = term.log_factor  # knots 4, 32, 256, 2048, 16384
    coefs = term.coefficients("a")
    assert coefs is not None and term.coefficients("b") is None
    assert c(coefs, 1) == c(coefs, 4) == 0.1
    assert c(coefs, 32) == pytest.approx(0.2)
    assert c(coefs, 256) == pytest.approx(-0.4)
    assert c(coefs, 2048 * math.sqrt(8)) == pytest.approx(0.15)  # halfway in log tokens
    assert c(coefs, 16384) == c(coefs, 1e6) == 0.3


def test_the_term_round_trips_through_the_profile_json(tmp_path: Path) -> None:
    prof = resolve_profile("h100", None, "vllm")
    term = SeriesTerm(
        {series_key(4096, 1536, 8, 128, 4, 1): (0.123, -0.004, 0.0, 0.5, -1.25)},
        formula_heldout_median_rel_err=0.1,
        formula_heldout_p90_rel_err=0.3,
    )
    moe = dataclasses.replace(prof.kernels["moe"], series=term)
    out = dataclasses.replace(prof, kernels={**prof.kernels, "moe": moe}).save(tmp_path / "p.json")
    text = json.loads(out.read_text())["kernels"]["moe"]["series"]
    assert text["log_scale"] == {"4096,1536,8,128,4,1": "0.123 -0.004 0 0.5 -1.25"}
    assert text["knots_tokens"] == list(KNOTS)
    back = Profile.load(out).kernels["moe"].series
    assert back is not None and back.log_scale == term.log_scale
    assert back.formula_heldout_p90_rel_err == 0.3


@pytest.mark.parametrize(
    ("series", "needle"),
    [
        ({"knots_tokens": [4, 4], "log_scale": {}}, "knots_tokens: must be two or more rising"),
        ({"knots_tokens": [4, 32], "log_scale": {"1,2,3": "0 0"}}, "six whole numbers"),
        ({"knots_tokens": [4, 32], "log_scale": {"1,2,3,4,5,6": "0"}}, "1 values for 2 knots"),
        ({"knots_tokens": [4, 32], "log_scale": {"1,2,3,4,5,6": "0 9"}}, "|v| <= 3"),
        ({"knots_tokens": [4, 32], "log_scale": {"1,2,3,4,5,6": "0 x"}}, "numbers separated"),
    ],
)
def test_a_malformed_term_is_one_line_naming_its_field(
    tmp_path: Path, series: dict[str, object], needle: str
) -> None:
    path = tmp_path / "p.json"
    data = resolve_profile("h100", None, "vllm").to_dict()
    data["kernels"]["moe"]["series"] = series
    path.write_text(json.dumps(data))
    with pytest.raises(TwinError, match=r"kernels\.moe\.series\..*" + _re(needle)):
        Profile.load(path)


def _re(text: str) -> str:
    import re

    return re.escape(text)


def test_only_a_fused_moe_family_takes_the_term() -> None:
    prof = resolve_profile("h100", None, "vllm")
    gemm = dataclasses.replace(prof.kernels["gemm"], series=SeriesTerm({}))
    with pytest.raises(TwinError, match="'gemm': series: only a fused-MoE family"):
        dataclasses.replace(prof, kernels={**prof.kernels, "gemm": gemm})


def _experts(prof: Profile, tp: int, ep: int, t: int) -> float:
    m = get_model("qwen3-235b-a22b")
    step = CostModel(m, prof, tp, ep=ep).step((), [300] * t, breakdown=True)
    return float(step.items["moe"]["moe"])  # type: ignore[union-attr]


def _with_term(prof: Profile, term: SeriesTerm | None) -> Profile:
    moe = dataclasses.replace(prof.kernels["moe"], series=term)
    return dataclasses.replace(prof, kernels={**prof.kernels, "moe": moe})


def test_a_measured_shape_is_priced_with_its_series_and_another_with_the_formula() -> None:
    prof = resolve_profile("h100", None, "vllm")
    m = get_model("qwen3-235b-a22b")
    key = series_key(m.d_model, m.moe_d_ff, m.moe_top_k, m.moe_n_experts, 4, 1)  # tp 4, ep 1
    term = SeriesTerm({key: (0.5, 0.5, -0.2, 0.1, 0.1)})
    bare, termed = _with_term(prof, None), _with_term(prof, term)
    for t, log_c in ((2, 0.5), (32, 0.5), (256, -0.2), (16384, 0.1)):
        ratio = _experts(termed, 4, 1, t) / _experts(bare, 4, 1, t)
        assert ratio == pytest.approx(math.exp(log_c), rel=1e-12)
    # tp 4 with ep 4 is another series (MoE TP 1, EP 4), which the term lacks: the formula.
    assert _experts(termed, 4, 4, 64) == _experts(bare, 4, 4, 64)
    assert CostModel(m, termed, 4).provenance.endswith("MoE shape: measured (its per-shape term)")
    assert CostModel(m, termed, 4, ep=4).provenance.endswith("not measured (the formula alone)")
    assert "MoE shape" not in CostModel(m, bare, 4).provenance


def _rows(offsets: dict[tuple[int, int, int, int, int, int], object]) -> list[dict[str, object]]:
    """Synthetic moe_perf rows of the TRUE formula times each series' own correction."""
    peaks = get_gpu("h100").peaks()
    rows = []
    for (d, i, k, e, tp, ep), off in offsets.items():
        for t in TOKENS:
            raw = {
                "num_tokens": t,
                "hidden_size": d,
                "inter_size": i,
                "topk": k,
                "num_experts": e,
                "moe_tp_size": tp,
                "moe_ep_size": ep,
            }
            row = moe_row(raw, WEIGHT_FORMATS["bf16"], "moe", 1.0)
            (true_s,) = predict_rows("moe", TRUE, peaks, [row])
            row["median_s"] = float(true_s) * math.exp(off(t))  # type: ignore[operator]
            rows.append(row)
    return rows


def _ramp(t: float) -> float:  # -0.25 up to 256 tokens, then +0.25 per factor 8
    return -0.25 + 0.25 * max(0.0, math.log(t / 256) / math.log(8))


def test_the_fit_recovers_each_series_correction_from_its_fit_rows() -> None:
    rows = _rows(
        {
            (2048, 768, 8, 128, 1, 1): lambda t: 0.3,
            (4096, 1536, 8, 128, 1, 4): _ramp,
            (7168, 2048, 8, 256, 1, 8): lambda t: 0.0,
        }
    )
    y = np.array([r["median_s"] for r in rows], dtype=float)
    peaks = get_gpu("h100").peaks()
    resid = np.log(y / predict_rows("moe", TRUE, peaks, rows))
    scale = fit_series(rows, resid)
    assert scale["2048,768,8,128,1,1"] == pytest.approx((0.3,) * 5, abs=0.04)  # the ridge shrinks
    assert scale["4096,1536,8,128,1,4"] == pytest.approx((-0.25, -0.25, -0.25, 0.0, 0.25), abs=0.05)
    assert scale["7168,2048,8,256,1,8"] == (0.0,) * 5


def test_the_term_prices_the_held_out_rows_the_formula_misses() -> None:
    # Per-series offsets of +-30% no shape variable explains: the formula alone misses the
    # held-out rows by ~25%; with the term fitted on the fit rows they are within a few %.
    signs = (1, -1, 1, -1, -1, 1)
    shapes = [(2048, 768, 8, 128, 1, 1), (2048, 768, 8, 128, 1, 4), (2048, 768, 8, 128, 4, 1)]
    shapes += [(4096, 1536, 8, 128, 1, 1), (4096, 1536, 8, 128, 2, 2), (4096, 1536, 8, 128, 1, 8)]
    rows = _rows({s: (lambda t, v=0.3 * g: v) for s, g in zip(shapes, signs, strict=True)})
    peaks = get_gpu("h100").peaks()
    fit = fit_kernel("moe", rows, peaks)
    alone = fit.heldout_median_rel_err
    attach_series(fit, "moe", rows, peaks)
    assert fit.series is not None and fit.series.formula_heldout_median_rel_err == alone
    assert alone is not None and alone > 0.15
    assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err < 0.03
    assert fit.heldout_p90_rel_err is not None and fit.heldout_p90_rel_err < 0.06
    # the profile prices with exactly what the fit measured
    lf = log_factors(fit.series, rows)
    assert lf[0] == fit.series.log_factor(fit.series.log_scale[series_key(*shapes[0])], 1)


def test_a_fit_without_the_term_writes_none_and_reads_none() -> None:
    # (its pricing: the formula alone, test_a_measured_shape_is_priced_with_its_series_...)
    fit = resolve_profile("h100", None, "vllm").kernels["moe"]
    bare = KernelFit(model=fit.model, params=dict(fit.params))
    assert "series" not in bare.to_dict()
    assert KernelFit.from_dict(bare.to_dict()).series is None
