"""vLLM's MLA decode-module floors bounded by a reference table's (``calibration.module_floor``)."""

from __future__ import annotations

import math

import pytest

from twin.calibration import module_floor as mf
from twin.costmodel.profile import KernelFit, Profile
from twin.costmodel.profile_store import load_profile


def _fit(t0: float, launch_waves: float = 0.0) -> KernelFit:
    params = {"t0_s": t0, "eff_flops": 0.5, "eff_bytes": 0.7, "p": 1.0, "c_tiles": 1e-7}
    params["c_launch_waves"] = launch_waves
    return KernelFit(model="m", params=params, provenance={"source": "measured"})


# A decode-module table's rows as the floor reads them: under a launch rule every row has
# at least one wave (``mla_decode_kernels.mla_decode_launch``), without one none.
RULE_ROWS = [{"launch_waves": 1.0, "tiles": 4.0}, {"launch_waves": 3.0, "tiles": 90.0}]
NO_RULE_ROWS = [{"launch_waves": 0.0, "tiles": 4.0}, {"launch_waves": 0.0, "tiles": 90.0}]
KERNEL = "mla_module_decode"


def test_a_floor_above_the_ratio_is_lowered_to_the_lowest_reference() -> None:
    fit = _fit(75e-6)
    out = mf.bound_floor(fit, 75e-6, {"trt": 35e-6, "sibling": 40e-6})
    assert out.params["t0_s"] == 35e-6
    assert {k: v for k, v in out.params.items() if k != "t0_s"} == {
        k: v for k, v in fit.params.items() if k != "t0_s"
    }
    assert out.provenance["floor_bound"]["fitted_t0_s"] == 75e-6
    assert out.provenance["floor_bound"]["floor_s"] == 35e-6
    assert out.provenance["floor_bound"]["reference"] == "trt"
    assert fit.params["t0_s"] == 75e-6 and "floor_bound" not in fit.provenance


def test_a_floor_within_the_ratio_or_without_reference_is_kept() -> None:
    fit = _fit(mf.COLLECTION_FLOOR_RATIO * 30e-6)
    assert mf.bound_floor(fit, mf.COLLECTION_FLOOR_RATIO * 30e-6, {"trt": 30e-6}) is fit
    assert mf.bound_floor(fit, mf.COLLECTION_FLOOR_RATIO * 30e-6, {}) is fit


def test_the_floor_is_t0_and_the_first_wave_every_row_pays() -> None:
    """A fit's floor: ``t0`` plus its wave term at the table's least wave count (one under a
    rule, none without); the per-CTA and work terms are not the floor."""
    fit = _fit(20e-6, launch_waves=10e-6)
    assert mf.launch_floor(KERNEL, fit, RULE_ROWS) == pytest.approx(30e-6, rel=1e-12)
    assert mf.launch_floor(KERNEL, fit, NO_RULE_ROWS) == 20e-6
    assert mf.launch_floor(KERNEL, fit, []) == 20e-6


def _bounded(reference: KernelFit, fit: KernelFit) -> KernelFit:
    """``fit`` (of a table with a launch rule) bounded by ``reference`` (another such
    table's), through ``apply`` as the import calls it."""
    return mf.apply(
        fit, RULE_ROWS, "h200", "vllm", KERNEL, "0.24.0", lambda ref, k: (reference, RULE_ROWS)
    )


def test_moving_a_constant_into_the_launch_term_does_not_move_the_floor() -> None:
    """Session 44's case: TensorRT-LLM's RTX PRO 6000 module fit moved ~10 us of its ``t0``
    (26.4 -> 18.4 us) into its one-wave launch term; the bound read ``t0`` alone and fell.
    The same fixed time split either way bounds a vLLM fit to the same price, and a vLLM
    fit split either way is bounded to the same price."""
    vllm = _fit(65e-6, launch_waves=3.8e-6)
    plain, launched = _fit(28.4e-6), _fit(18.4e-6, launch_waves=10e-6)
    a, b = _bounded(plain, vllm), _bounded(launched, vllm)
    assert a.params["t0_s"] == pytest.approx(b.params["t0_s"], rel=1e-9)
    for out in (a, b):  # the vLLM fit's own wave kept: its floor is the reference's
        assert out.params["c_launch_waves"] == 3.8e-6
        assert mf.launch_floor(KERNEL, out, RULE_ROWS) == pytest.approx(28.4e-6, rel=1e-9)
        assert out.provenance["floor_bound"]["floor_s"] == pytest.approx(28.4e-6, rel=1e-9)
    split = _bounded(launched, _fit(68.8e-6 - 10e-6, launch_waves=10e-6))
    assert mf.launch_floor(KERNEL, split, RULE_ROWS) == pytest.approx(28.4e-6, rel=1e-9)
    # the ratio reads the floors too: 1.5 x 28.4 = 42.6 us, a fit at 30 + 12 us is kept
    kept = _fit(30e-6, launch_waves=12e-6)
    assert _bounded(launched, kept) is kept


def test_only_vllm_decode_modules_are_bounded_and_b300_gb200_gb300_also_read_b200() -> None:
    def reference(ref: mf.FloorReference, kernel: str) -> tuple[KernelFit, mf.Rows]:
        return _fit(20e-6), NO_RULE_ROWS

    fit = _fit(80e-6)
    for engine, kernel in (
        ("trtllm", "mla_module_decode"),
        ("sglang", "mla_module_decode_fp8_fp8kv"),
        ("vllm", "mla_module_prefill"),
        ("vllm", "mla_decode"),
    ):
        assert mf.apply(fit, NO_RULE_ROWS, "h200", engine, kernel, "0.24.0", reference) is fit
    bounded = mf.apply(
        fit, NO_RULE_ROWS, "h200", "vllm", "mla_module_decode_fp8kv", "0.24.0", reference
    )
    assert bounded.params["t0_s"] == 20e-6
    assert mf.references("h200", "0.24.0") == [mf.FloorReference("h200", "trtllm", None)]
    for gpu in ("b300", "gb200", "gb300"):
        assert mf.references(gpu, "0.24.0") == [
            mf.FloorReference(gpu, "trtllm", None),
            mf.FloorReference("b200", "vllm", "0.24.0"),
        ]


def _shipped_floor(fit: KernelFit) -> float:
    """A shipped decode-module fit's floor (``launch_floor``) without its table: ``t0`` and
    one wave. Every bounded table and reference table with a launch rule has rows of one
    wave; a fit without a rule carries at most ~1e-11 s of wave term (an unread
    coefficient), under the tests' 1e-6 tolerance."""
    return float(fit.params["t0_s"]) + float(fit.params.get("c_launch_waves", 0.0))


def _assert_bounded(fit: KernelFit, kernel: str, refs: list[Profile]) -> None:
    """``fit``'s floor is the lowest floor of ``kernel`` among ``refs``, and was fitted above
    the ratio to it."""
    floor = min(_shipped_floor(r.kernels[kernel]) for r in refs if kernel in r.kernels)
    assert math.isclose(_shipped_floor(fit), floor, rel_tol=1e-6)
    bound = fit.provenance["floor_bound"]
    fitted = _shipped_floor(fit) - fit.params["t0_s"] + bound["fitted_t0_s"]
    assert fitted > mf.COLLECTION_FLOOR_RATIO * floor


def _references(gpu: str) -> list[Profile]:
    """The shipped profiles holding ``gpu``'s reference floors (``module_floor.references``:
    the GPU's TensorRT-LLM table, and the sibling's vLLM table where it has one)."""
    refs = [load_profile(f"{gpu}-trtllm")]
    if gpu in mf.SIBLING_TABLES:
        sibling, engine = mf.SIBLING_TABLES[gpu]
        refs.append(load_profile(f"{sibling}-{engine}"))
    return refs


@pytest.mark.parametrize("gpu", ["h200", "b300", "h100", "gb200", "rtx-pro-6000"])
def test_shipped_vllm_decode_modules_take_the_reference_floor(gpu: str) -> None:
    """The shipped vLLM profiles refitted with ``--refit mla_module``: every decode-module
    floor is a reference table's, the same family's floor in the TensorRT-LLM profile of
    the GPU or (B300, GB200) in the B200 vLLM profile; the prefill modules are not bounded."""
    vllm = load_profile(f"{gpu}-vllm")
    refs = _references(gpu)
    decode = [k for k in vllm.kernels if k.startswith("mla_module_decode")]
    assert decode
    for kernel in decode:
        _assert_bounded(vllm.kernels[kernel], kernel, refs)
    for kernel in (k for k in vllm.kernels if k.startswith("mla_module_prefill")):
        assert "floor_bound" not in vllm.kernels[kernel].provenance


def test_gb300_bounds_its_0_24_release_and_keeps_its_0_27_table() -> None:
    """GB300's newest vLLM table (0.27.0) agrees with TensorRT-LLM's (1.0-1.2x its floor)
    and is kept; its 0.24.0 release fits, which rows of releases before 0.27.0 read, are bounded
    (the nvfp4 ones by vLLM's B200 table, 34.8 us, where GB300's own 0.27.0 fit is 34.9)."""
    vllm = load_profile("gb300-vllm")
    refs = _references("gb300")
    decode = [k for k in vllm.kernels if k.startswith("mla_module_decode")]
    assert len(decode) == 6
    for kernel in decode:
        assert "floor_bound" not in vllm.kernels[kernel].provenance
        _assert_bounded(vllm.table_releases[kernel].fits["0.24.0"], kernel, refs)
    nvfp4 = vllm.table_releases["mla_module_decode_nvfp4"].fits["0.24.0"]
    assert nvfp4.provenance["floor_bound"]["reference"].startswith("vLLM 0.24.0 NVIDIA B200")


def test_b200_vllm_floors_agree_with_tensorrt_llm_and_are_not_bounded() -> None:
    vllm, trt = load_profile("b200-vllm"), load_profile("b200-trtllm")
    for kernel, fit in vllm.kernels.items():
        if kernel.startswith("mla_module_decode"):
            ratio = fit.params["t0_s"] / trt.kernels[kernel].params["t0_s"]
            assert ratio <= mf.COLLECTION_FLOOR_RATIO


def test_the_import_bounds_h200_vllm_by_its_tensorrt_llm_table() -> None:
    pytest.importorskip("aiconfigurator_core")  # the aic extra; CI does not install it
    from twin.calibration.aic_import import engine_fit, fit_family, reference_fit
    from twin.calibration.aic_mla import module_rows
    from twin.calibration.aic_tables import system_dir
    from twin.calibration.datasheet import datasheet_profile
    from twin.hardware import get_gpu

    spec = get_gpu("h200")
    peaks = {**datasheet_profile(spec.name).peaks, **spec.low_precision_peaks()}
    fams = module_rows(system_dir("h200"), "vllm")
    fam = next(f for f in fams if f.kernel == "mla_module_decode")
    plain = fit_family(fam, peaks, spec.display_name)
    fit = engine_fit(fam, "h200", "vllm", peaks, spec.display_name)
    ref = reference_fit(mf.FloorReference("h200", "trtllm", None), "mla_module_decode")
    assert plain is not None and fit is not None and ref is not None
    assert mf.launch_floor("mla_module_decode", ref[0], ref[1]) == ref[0].params["t0_s"]
    assert fit.params["t0_s"] == ref[0].params["t0_s"] < plain.params["t0_s"] / 2
    assert fit.provenance["floor_bound"]["reference"].startswith("TensorRT-LLM")


def test_rtx_pro_6000_vllm_takes_tensorrt_llms_floor_with_its_fmha_v2_wave() -> None:
    """TensorRT-LLM's RTX PRO 6000 ``mla_module_decode`` fit carries 10 us of its floor in its
    FMHA v2 one-wave term (session 44); the vLLM fit bounded by it takes the whole floor
    (t0 18.4 + 10.0 us), not ``t0`` alone, less its own wave term (3.8 us)."""
    trt = load_profile("rtx-pro-6000-trtllm").kernels["mla_module_decode"]
    vllm = load_profile("rtx-pro-6000-vllm").kernels["mla_module_decode"]
    assert trt.params["c_launch_waves"] > 9e-6
    floor = trt.params["t0_s"] + trt.params["c_launch_waves"]
    assert vllm.provenance["floor_bound"]["floor_s"] == pytest.approx(floor, rel=1e-6)
    assert vllm.params["t0_s"] > trt.params["t0_s"] + 5e-6
    assert vllm.params["t0_s"] + vllm.params["c_launch_waves"] == pytest.approx(floor, rel=1e-6)
