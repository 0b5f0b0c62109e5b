"""Profiles: the shipped datasheet profiles, JSON round trips, labels, transfer."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from twin.calibration.datasheet import DEFAULTS, datasheet_profile
from twin.calibration.transfer import transfer_profile
from twin.costmodel.formulas import KERNELS
from twin.costmodel.profile import KernelFit, Profile
from twin.costmodel.profile_store import load_profile, shipped_profiles
from twin.errors import TwinError
from twin.hardware import get_gpu


def _measured(gpu: str = "h100") -> Profile:
    base = datasheet_profile(gpu)
    kernels = {
        k: KernelFit(
            model=f.model,
            params={
                **f.params,
                **({"c_score_elems": 1e-13} if "c_score_elems" in f.params else {}),
            },
            heldout_median_rel_err=0.03,
            heldout_max_rel_err=0.1,
            n_shapes=20,
            n_heldout=5,
        )
        for k, f in base.kernels.items()
    }
    return Profile(
        gpu=gpu,
        device="NVIDIA H100 80GB HBM3",
        source="measured",
        peaks=base.peaks,
        kernels=kernels,
        provenance={"date": "2026-11-22", "torch": "2.13.0"},
    )


@pytest.mark.parametrize("gpu", ["a100", "a100-80gb", "h100", "h200", "l4", "b200", "l40s"])
def test_datasheet_profiles_ship_and_are_labelled(gpu: str) -> None:
    assert f"{gpu}-datasheet" in shipped_profiles()
    p = load_profile(f"{gpu}-datasheet")
    assert p.source == "datasheet"
    assert p.provenance_label == "datasheet roofline (uncalibrated)"
    assert set(p.kernels) == set(KERNELS)
    assert p.peaks["flops"] == get_gpu(gpu).flops
    for name, fit in p.kernels.items():
        assert fit.params == DEFAULTS[name]  # the documented defaults, nothing else


def test_shipped_files_match_the_generator() -> None:
    """twin/calibration/profiles/*.json are what ``python -m twin.calibration.datasheet`` writes."""
    for path in shipped_profiles().values():
        data = json.loads(path.read_text())
        if data["source"] == "datasheet":
            assert path.stem == f"{data['gpu']}-datasheet"
            assert data == datasheet_profile(data["gpu"]).to_dict()


def test_round_trip_and_labels(tmp_path: Path) -> None:
    p = _measured()
    assert p.provenance_label == "measured on NVIDIA H100 80GB HBM3, 2026-11-22"
    path = p.save(tmp_path / "sub" / "h100.json")
    again = Profile.load(path)
    assert again.to_dict() == p.to_dict()
    assert json.loads(path.read_text())["provenance_label"] == p.provenance_label
    assert not list(path.parent.glob(".*tmp*"))  # atomic write left nothing behind


def test_transfer_scales_to_target_peaks_and_says_so() -> None:
    src = _measured("h100")
    out = transfer_profile(src, "a100")
    assert out.source == "transferred" and out.transferred_from == "h100"
    assert out.provenance_label == "transferred from h100"
    assert out.peaks["flops"] == get_gpu("a100").flops
    g_src, g_out = src.kernels["gemm"].params, out.kernels["gemm"].params
    assert g_out["eff_flops"] == g_src["eff_flops"] and g_out["t0_s"] == g_src["t0_s"]
    ratio = get_gpu("h100").flops / get_gpu("a100").flops
    c_src = src.kernels["attn_prefill"].params["c_score_elems"]
    assert out.kernels["attn_prefill"].params["c_score_elems"] == pytest.approx(c_src * ratio)
    assert "transferred from h100" in out.kernels["gemm"].note


def test_transfer_scales_a_per_sm_coefficient_by_one_sms_peak() -> None:
    """The GEMM's wave term is one SM's time a k-step: H100 -> A100 scales it by the FLOP
    ratio times 108 / 132 SMs, not the FLOP ratio alone."""
    src = _measured("h100")
    src.kernels["gemm"].params["c_wave_k"] = 1e-9
    out = transfer_profile(src, "a100")
    ratio = get_gpu("h100").flops / get_gpu("a100").flops
    got = out.kernels["gemm"].params["c_wave_k"]
    assert got == pytest.approx(1e-9 * ratio * 108 / 132)
    assert out.kernels["gemm"].params["c_weight_elems"] == pytest.approx(
        src.kernels["gemm"].params["c_weight_elems"] * ratio
    )


def test_transfer_sets_a_fixed_rate_coefficient_to_the_targets_rate() -> None:
    """vLLM's fp8 GEMM prices its activation quantisation pass at the HBM peak, never fitted
    (``KernelFormula.fixed_rates``): moved to another GPU the coefficient is that GPU's
    ``1 / mem_bw`` exactly, not the source's scaled by the FLOP ratio (review39's sixth item)."""
    import dataclasses

    from twin.costmodel.formulas import get_formula

    shipped = load_profile("h100", "vllm")
    src = dataclasses.replace(shipped, source="measured")
    assert src.kernels["gemm_fp8"].params["c_act_quant_bytes"] == 1.0 / src.peaks["mem_bw"]
    out = transfer_profile(src, "h200")
    assert out.kernels["gemm_fp8"].params["c_act_quant_bytes"] == 1.0 / get_gpu("h200").hbm_bw
    ratio = src.peaks["flops"] / out.peaks["flops"]
    assert out.kernels["gemm_fp8"].params["c_weight_elems"] == pytest.approx(
        src.kernels["gemm_fp8"].params["c_weight_elems"] * ratio
    )
    assert get_formula("gemm_fp8").fixed_coefficients(out.peaks) == {
        "c_act_quant_bytes": 1.0 / out.peaks["mem_bw"]
    }


@pytest.mark.parametrize(
    "coefficient", ["c_waves", "c_small_waves", "c_launch_waves", "c_cta_waves"]
)
def test_transfer_scales_every_wave_coefficient_by_one_sms_peak(coefficient: str) -> None:
    """A wave over the SMs is one CTA's time on one SM whatever its feature (the BMMs' and
    the MLA prefill's waves, the small tiles', the decode launch's, the conv update's CTAs):
    H100 -> A100 by the FLOP ratio times 108 / 132, as the GEMM's ``c_wave_k``."""
    src = _measured("h100")
    shipped = load_profile("h100", "trtllm")  # the MLA fits: a datasheet profile has none
    for name in ("mla_bmm", "mla_decode", "conv1d_update"):
        src.kernels[name] = dataclasses.replace(
            shipped.kernels[name], params=dict(shipped.kernels[name].params)
        )
    names = [k for k, f in src.kernels.items() if coefficient in f.params]
    assert names, f"no kernel of the H100 profile has {coefficient}"
    for name in names:
        src.kernels[name].params[coefficient] = 1e-9
    out = transfer_profile(src, "a100")
    ratio = get_gpu("h100").flops / get_gpu("a100").flops
    for name in names:
        got = out.kernels[name].params[coefficient]
        assert got == pytest.approx(1e-9 * ratio * 108 / 132), name


def test_transfer_refuses_a_datasheet_source() -> None:
    with pytest.raises(TwinError, match="needs a measured profile"):
        transfer_profile(datasheet_profile("h100"), "a100")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.update(source="guessed"), "source must be one of"),
        (lambda d: d["peaks"].update(flops=0), r"peaks.flops: must be > 0"),
        (lambda d: d["kernels"]["gemm"]["params"].update(eff_flops=-1), "eff_flops"),
        (lambda d: d["kernels"]["gemm"].update(model="cubic"), "is not this version's"),
        (lambda d: d.pop("kernels"), "not a valid profile"),
        (lambda d: d.update(schema=99), "schema 99"),
    ],
)
def test_malformed_profiles_are_refused_in_one_line(tmp_path: Path, edit, message: str) -> None:
    data = datasheet_profile("h100").to_dict()
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TwinError, match=message) as err:
        Profile.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_load_profile_by_name_or_path_and_unknown(tmp_path: Path) -> None:
    path = datasheet_profile("l4").save(tmp_path / "mine.json")
    assert load_profile(path).gpu == "l4"
    with pytest.raises(TwinError, match="no profile 'v100'"):
        load_profile("v100")
    with pytest.raises(TwinError, match="no such profile file"):
        load_profile(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (
            lambda d: d["peaks"].update(mem_bytes=math.nan),
            "peaks.mem_bytes: must be finite (got nan)",
        ),
        (lambda d: d["peaks"].update(flops=1e300), "peaks.flops: must be > 0 and <= 1e+17 FLOP/s"),
        (lambda d: d["peaks"].update(mem_bw=-3.0), "peaks.mem_bw: must be > 0 and <= 1e+14 B/s"),
        (
            lambda d: d["peaks"].update(mem_bytes=1e14),
            "peaks.mem_bytes: must be > 0 and <= 1e+13 bytes",
        ),
        (lambda d: d["peaks"].update(flops="1e15"), "peaks.flops: must be a number (got str"),
        (lambda d: d["peaks"].update(flops=True), "peaks.flops: must be a number (got bool"),
        (
            lambda d: d["kernels"]["gemm"]["params"].update(t0_s=math.nan),
            "kernels.gemm.params.t0_s: must be finite",
        ),
        (
            lambda d: d["kernels"]["gemm"]["params"].update(t0_s=-1e-6),
            "kernels.gemm.params.t0_s: must be >= 0",
        ),
        (
            lambda d: d["kernels"]["gemm"]["params"].update(c_weight_elems=1e300),
            "kernels.gemm.params.c_weight_elems: must be >= 0 and <= 1 s",
        ),
        (
            lambda d: d["kernels"]["gemm"]["params"].update(eff_flops=1e-300),
            "kernels.gemm.params.eff_flops: must be >= 1e-06",
        ),
        (
            lambda d: d["kernels"]["gemm"]["params"].update(p=0.5),
            "kernels.gemm.params.p: must be >= 1",
        ),
        (
            lambda d: d["kernels"]["gemm"]["params"].update(c_typo=0.0),
            "kernels.gemm.params.c_typo: not a parameter",
        ),
        (
            lambda d: d["kernels"]["gemm"].update(n_shapes=-1),
            "kernels.gemm.n_shapes: must be a whole number",
        ),
        (
            lambda d: d["kernels"]["gemm"].update(heldout_max_rel_err=math.inf),
            "kernels.gemm.heldout_max_rel_err: must be finite",
        ),
        (lambda d: d.update(peaks=[1, 2]), "peaks: must be a JSON object"),
        (lambda d: d.update(gpu=7), "gpu: must be a string"),
        (lambda d: d.pop("gpu"), "not a valid profile (field 'gpu' missing)"),
    ],
)
def test_profile_numbers_are_checked_on_load(tmp_path: Path, edit, field: str) -> None:
    """NaN, negative, astronomical or mistyped numbers: one line naming the file and the
    field path (issue 32); a NaN device memory names the profile field, not a flag."""
    data = datasheet_profile("h100").to_dict()
    edit(data)
    path = tmp_path / "my.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TwinError) as err:
        Profile.load(path)
    assert str(err.value).startswith(f"{path}: {field}"), str(err.value)
    assert "\n" not in str(err.value) and "--" not in str(err.value)


def test_a_profile_nested_too_deeply_is_refused_before_decoding(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(TwinError, match="JSON nested deeper than 64 levels"):
        Profile.load(path)


def test_every_shipped_profile_is_within_the_ranges() -> None:
    for path in shipped_profiles().values():
        Profile.load(path)
