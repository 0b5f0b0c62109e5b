"""TensorRT-LLM's fp8 block-scale linears on SM120 quantise their activation in a serial Triton
loop before each GEMM (``mla_bmm.module_quant_rule``), as its fp8 BMMs do there: the MLA
modules' ``quant_steps`` (``mla_module.module_quant_steps``; issue 34, helper mla44): the
rule's scope, the steps, the module table rows, the refitted fits and the serving price."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from profile_edits import with_fit

from twin.calibration.aic_mla import dims
from twin.costmodel import CostModel
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mla_bmm as mbmm
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_module as mmod
from twin.costmodel.profile_store import load_profile
from twin.costmodel.step_features import aggregate_step
from twin.presets import get_model

DSV3 = get_model("deepseek-v3")  # fp8-block weights, as its checkpoint
RTX_SMS = 188
REFITTED = {  # held out, median / P90 %, before -> after (docs/decisions.md, helper mla44)
    "mla_module_prefill_fp8_block": (0.05, 0.15),  # 7.62 / 30.77 -> 3.05 / 8.29
    "mla_module_prefill_fp8_block_fp8kv": (0.05, 0.15),  # 9.03 / 29.29 -> 3.90 / 8.82
    "mla_module_decode_fp8_block": (0.05, 0.15),  # 3.14 / 9.80 -> 2.97 / 9.54
    "mla_module_decode_fp8_block_fp8kv": (0.05, 0.21),  # 5.54 / 21.83 -> 4.60 / 20.00
}


def test_the_rule_is_tensorrt_llms_fp8_block_module_on_sm120() -> None:
    assert mbmm.module_quant_rule("rtx-pro-6000", "default", "fp8_block")
    assert not mbmm.module_quant_rule("rtx-pro-6000", "default", "bfloat16")
    assert not mbmm.module_quant_rule("rtx-pro-6000", "default", "nvfp4")
    assert not mbmm.module_quant_rule("h200", "default", "fp8_block")  # fp8_quantize_1x128
    assert not mbmm.module_quant_rule("b200", "default", "fp8_block")
    assert not mbmm.module_quant_rule("rtx-pro-6000", "TRITON_MLA", "fp8_block")  # vLLM's


def test_the_steps_are_each_launchs_tokens_a_program_times_its_waves() -> None:
    """64 prompt tokens at 8 heads: one step in each of q_a + kv_a, q_b, o_proj and kv_b
    (each grid one wave of the 188 x 32 resident one-warp programs); 65 tokens two each.
    A decode of 64 sequences at 128 heads: the three linears one step each, the two absorbed
    BMMs (64 x 128 programs: two waves) two each."""
    assert mmod.module_quant_steps(dims(8), 64, 64, RTX_SMS) == 4.0
    assert mmod.module_quant_steps(dims(8), 65, 65, RTX_SMS) == 8.0
    assert mmod.module_quant_steps(dims(8), 64, 1_000, RTX_SMS) == 3.0 + 16.0
    assert mmod.module_quant_steps(dims(128), 64, 0, RTX_SMS) == 3.0 + 2 * 2.0
    assert mmod.module_quant_steps(dims(16), 64, 0, RTX_SMS) == 3.0 + 2 * 1.0
    assert mmod.module_quant_steps(dims(16), 64, 0, 0) == 0.0  # no SM count


def test_rtx_pro_6000_module_rows_carry_the_steps() -> None:
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration.aic_mla import module_rows
    from twin.calibration.aic_tables import system_dir

    fams = {f.kernel: f for f in module_rows(system_dir("rtx-pro-6000"), "trtllm")}
    for kernel in REFITTED:
        assert {r["quant_steps"] > 0 for r in fams[kernel].rows} == {True}, kernel
    row = next(
        r
        for r in fams["mla_module_prefill_fp8_block"].rows
        if r["shape"] == {"b": 2, "s": 64, "h": 8}
    )
    assert row["quant_steps"] == 8.0  # 128 tokens: two steps in each of the four linears
    for kernel in ("mla_module_prefill", "mla_module_decode_nvfp4", "mla_module_decode"):
        assert {r["quant_steps"] for r in fams[kernel].rows} == {0.0}, kernel


@pytest.mark.parametrize("family", sorted(REFITTED))
def test_refitted_fits_price_a_step_and_meet(family: str) -> None:
    """~1.8 us a step on the fp8-block fits (the fp8 BMM's own fit: ~1.26 us); their held-out
    errors (the bf16-GEMM fits keep their form: no step to price)."""
    prof = load_profile("rtx-pro-6000", "trtllm")
    fit = prof.kernels[family]
    assert 1e-6 < fit.params["c_quant_steps"] < 5e-6
    median, p90 = REFITTED[family]
    assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err <= median
    assert fit.heldout_p90_rel_err is not None and fit.heldout_p90_rel_err <= p90
    assert prof.kernels[family.replace("_fp8_block", "")].params.get("c_quant_steps", 0.0) < 1e-14


def _fit(cm: CostModel, family: str) -> Callable[..., float]:
    key = cm.priced.keys[family]
    return lat.compile_fast(key, cm.profile.kernels[key].params, cm.profile.peaks)


def test_rtx_pro_6000_trtllm_serving_prices_the_steps() -> None:
    """A 4,096-token prefill on the shipped profile: zero the fit's step coefficient and the
    step's MLA prefill drops by exactly ``c_quant_steps`` x its steps (64 a linear, four
    linears); the decode module's price reads its steps beside its FMHA v2 launch."""
    prof = load_profile("rtx-pro-6000", "trtllm")
    cm = CostModel(DSV3, prof, tp=8)
    assert cm.mla_modes == ("module", "module")
    key = cm.priced.keys["mla_module_prefill"]
    assert key.startswith("mla_module_prefill_fp8_block")
    assert cm._module_quant == (True, True)
    fit = prof.kernels[key]
    assert fit.model == fm.get_formula(key).model_name
    f = aggregate_step([(4096, 0)], [], DSV3.mixer_counts, 0, 1, 64)
    kind, seconds = cm._mla_prefill(f)
    assert kind == "mla_module"
    steps = mmod.module_quant_steps(cm.mla_dims, 4096, 4096, cm.sms or 0)
    assert steps == 4 * 64
    priced = CostModel(DSV3, with_fit(prof, key, c_quant_steps=0.0), tp=8)._mla_prefill(f)[1]
    assert seconds - priced == pytest.approx(fit.params["c_quant_steps"] * steps, rel=1e-9)
    # the decode module
    d, e = cm.mla_dims, cm.elem_bytes
    act_e, w_e = cm.priced.mla_gemm_bytes
    stream = cm.priced.mla_kv_elem_bytes[1] * cm.priced.mla_module_kv_share
    batch, keys = 64, 64 * 4000
    dm = mmod.mla_module_absorbed_sums(d, batch, batch, keys, keys, 1, e, act_e, w_e, stream)
    launch = mdk.mla_decode_launch(cm._module_rule, batch, keys, 1, d, stream, cm.sms or 0)
    dec = _fit(cm, "mla_module_decode")
    quant = mmod.module_quant_steps(d, batch, 0, cm.sms or 0)
    parts = dict((k, v) for _, k, v in cm._mla_decode(batch, keys))
    assert parts["mla_module"] == dec(*mmod.module_decode_features(dm, launch, 0.0, quant))
    assert parts["mla_module"] > dec(*mmod.module_decode_features(dm, launch))


def test_serving_steps_count_the_rows_each_launch_quantises() -> None:
    """A prefill after a cached prefix quantises kv_b_proj's input over every decompressed
    row (1,024 new tokens on 3,072 cached: 3 x 16 + 64 steps, not 4 x 16); an absorbed extend
    quantises its query tokens, not its sequences (8 sequences x 16 tokens: 128 rows, two
    steps a launch). Each is the price less the same step priced at a zero coefficient."""
    prof = load_profile("rtx-pro-6000", "trtllm")
    cm = CostModel(DSV3, prof, tp=8)
    d, sms = cm.mla_dims, cm.sms or 0
    pre, dec = cm.priced.keys["mla_module_prefill"], cm.priced.keys["mla_module_decode"]
    f = aggregate_step([(1024, 3072)], [], DSV3.mixer_counts, 0, 1, 64)
    assert (f.prefill_tokens, f.prefill_kv_rows) == (1024, 4096)
    steps = mmod.module_quant_steps(d, 1024, 4096, sms)
    assert steps == 3 * 16 + 64
    off = CostModel(DSV3, with_fit(prof, pre, c_quant_steps=0.0), tp=8)._mla_prefill(f)[1]
    c = prof.kernels[pre].params["c_quant_steps"]
    assert cm._mla_prefill(f)[1] - off == pytest.approx(c * steps, rel=1e-9)
    batch, width, keys = 8, 16, 8 * 4000
    queries = batch * width
    steps = mmod.module_quant_steps(d, queries, 0, sms)
    assert steps > mmod.module_quant_steps(d, batch, 0, sms)

    def extend(model: CostModel) -> float:
        parts = model._mla_decode(batch, keys, queries=queries, kv_rows=keys, width=width)
        return dict((k, v) for _, k, v in parts)["mla_module"]

    off = extend(CostModel(DSV3, with_fit(prof, dec, c_quant_steps=0.0), tp=8))
    c = prof.kernels[dec].params["c_quant_steps"]
    assert extend(cm) - off == pytest.approx(c * steps, rel=1e-9)


def test_other_gpus_serve_without_the_steps() -> None:
    for gpu in ("h200", "b200"):
        cm = CostModel(DSV3, load_profile(gpu, "trtllm"), tp=8)
        assert cm._module_quant == (False, False)
