"""TensorRT-LLM Hopper's decode attention is two kernels: XQA where ``decoderXQAImplJIT.cpp``
``shouldUse`` holds, else the masked MHA (``features.TRTLLM_XQA_RULE``). The rule against the
source's own expression, the fit families it keys on, its feature in every pricing form (the
scalar and array sums, the affine decode runs, the compiled step and decode fill), and the fit
reader's rows."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import accumulate

import numpy as np
import pytest

from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel.decode_pricing import affine_in_keys

H100_SMS = 132
H100 = "NVIDIA H100 80GB HBM3"
PEAKS = {"flops": 989e12, "mem_bw": 3.35e12, "fp8_flops": 1979e12}


def _source_rule(b: int, c: int, h: int, kvh: int, d: int, sms: int) -> bool:
    """``supportConfig`` (grouped, at most 32 a group, head dim 16..256 in 16s) and
    ``mayHavePerfGain`` with ``max_past_kv_length`` = ``c``, as the C++ writes them."""
    group = h // kvh
    supported = h != kvh and group <= 32 and d % 16 == 0 and 16 <= d <= 256
    blocks = max(1, c // 128)
    return supported and float(kvh * b * blocks) * 4.0 >= float(sms)


def test_the_threshold_is_the_sources_rule() -> None:
    """``xqa_from_keys`` (keys in all, one new per sequence) agrees with the source's
    expression on every shape of a grid that crosses its edges."""
    for h, kvh, d in ((32, 8, 128), (64, 8, 128), (32, 32, 128), (128, 2, 128), (28, 4, 72)):
        for b in (1, 2, 3, 4, 5, 8, 16, 33, 200):
            start = ft.xqa_from_keys(b, h, kvh, d, H100_SMS)
            for c in (0, 1, 127, 128, 255, 256, 383, 384, 511, 512, 640, 641, 1279, 1280, 4096):
                keys = b * (c + 1)
                assert (keys >= start) == _source_rule(b, c, h, kvh, d, H100_SMS), (h, kvh, b, c)
    # Llama-3-8B at one sequence: 8 KV heads x 1 x max(1, c // 128) x 4 >= 132 from c = 640.
    assert ft.xqa_from_keys(1, 32, 8, 128, H100_SMS) == 641.0
    assert ft.xqa_from_keys(5, 32, 8, 128, H100_SMS) == 0.0  # 160 CTAs x 4: from no history
    assert ft.xqa_from_keys(64, 32, 32, 128, H100_SMS) == math.inf  # vanilla MHA: never
    assert ft.xqa_from_keys(64, 128, 2, 128, H100_SMS) == math.inf  # a group of 64: never
    assert ft.xqa_from_keys(64, 32, 8, 128, None) == math.inf  # no SM count


def test_the_rule_keys_on_the_family_engine_and_hopper() -> None:
    assert ft.decode_launch_rule("attn_decode", "TensorRT-LLM", H100) == ft.TRTLLM_XQA_RULE
    assert ft.decode_launch_rule("attn_decode", "TensorRT-LLM", "NVIDIA H200") == (
        ft.TRTLLM_XQA_RULE
    )
    assert ft.decode_launch_rule("attn_decode_fp8kv", "TensorRT-LLM", H100) == ""
    assert ft.decode_launch_rule("attn_decode", "vLLM", H100) == ""
    assert ft.decode_launch_rule("attn_decode", "SGLang", H100) == ""
    assert ft.decode_launch_rule("attn_decode", "TensorRT-LLM", "NVIDIA B200") == ""


def test_the_feature_is_the_xqa_side_ctas() -> None:
    """The fifth of ``attn_decode_sums``: the (sequence, KV head) CTAs where XQA runs, 0 on the
    masked-MHA side; the array form equals the scalar one per element; "" keeps the FA3 grid."""
    rule = ft.TRTLLM_XQA_RULE
    heads = (32, 8, 128, 2, 2, H100_SMS)
    assert ft.attn_decode_sums(1, 640, *heads, rule)[4] == 0.0
    assert ft.attn_decode_sums(1, 641, *heads, rule)[4] == 8.0
    assert ft.attn_decode_sums(64, 64 * 5, 32, 32, 128, 2, 2, H100_SMS, rule)[4] == 0.0
    keys = np.arange(1, 3000, 7, dtype=np.int64)
    many = ft.attn_decode_sums(1, keys, *heads, rule)[4]
    assert many.tolist() == [ft.attn_decode_sums(1, int(k), *heads, rule)[4] for k in keys]
    assert ft.attn_decode_sums(16, 1600, *heads)[4] == ft.attn_decode_waves_d(
        16, 32, 8, 128, H100_SMS
    )


def test_the_affine_runs_price_across_the_switch_as_the_scalar_form() -> None:
    """A decode run whose sequences cross XQA's threshold mid-run: ``compile_affine`` on
    ``affine_in_keys``' coefficients equals ``fast`` on the features at each count, to the bit,
    on both sides."""
    params = {
        "t0_s": 8e-6,
        "eff_flops": 0.04,
        "eff_bytes": 0.8,
        "p": 3.1,
        "c_score_elems": 6e-12,
        "c_tiles": 1.4e-8,
        "c_waves_d": 2.2e-8,
    }
    fast = lat.compile_fast("attn_decode", params, PEAKS)
    affine = lat.compile_affine("attn_decode", params, PEAKS)
    heads = (32, 8, 128, 2, 2, H100_SMS, ft.TRTLLM_XQA_RULE)
    for batch in (1, 2, 4, 5):
        coeffs = affine_in_keys(batch, heads)
        zk = coeffs[6]
        assert zk == ft.xqa_from_keys(batch, 32, 8, 128, H100_SMS)
        counts = [batch, int(zk) - 1, int(zk), int(zk) + batch, batch * 9000]
        counts = [n for n in counts if n >= batch]
        got = affine(*coeffs, counts)
        assert got == [fast(*ft.attn_decode_sums(batch, n, *heads)) for n in counts]
    below, above = affine(*affine_in_keys(1, heads), [640, 641])
    assert above - below > 1e-8  # the XQA side's CTA cost switches on


def test_a_trtllm_h100_serving_step_prices_the_choice_in_every_path() -> None:
    """On h100-trtllm (bf16 KV): the model reads the rule from the fit's provenance; the step,
    the decode runs and the compiled step and decode fill agree across the switch."""
    from twin.costmodel import CostModel
    from twin.costmodel.profile_store import resolve_profile
    from twin.presets import get_model

    prof = resolve_profile("h100", None, "trtllm")
    plain = CostModel(get_model("llama-3-8b"), prof)
    assert plain.decode_rule == ft.TRTLLM_XQA_RULE
    compiled = CostModel(get_model("llama-3-8b"), prof)
    assert compiled.compile_steps()
    cases = ((1, 100), (1, 639), (1, 640), (1, 2000), (3, 3 * 700), (3, 3 * 900), (40, 40 * 3000))
    for batch, context in cases:
        want = plain.step_spread((), batch, context)
        assert compiled.step_spread((), batch, context) == want, (batch, context)
        assert plain.decode_steps_s(batch, [context])[0] == want
    many = list(range(100, 2000, 3))  # the array path (many steps), across the switch
    assert plain.decode_steps_s(1, many) == [plain.step_spread((), 1, c) for c in many]
    # The decode fill (``compiled.fill_ends``) over a run that crosses the switch.
    c = compiled.decode_run_constants(1)
    assert c is not None
    from twin.costmodel import compiled as dk

    ends = np.zeros(1200)
    dk.fill_ends(c, 101, 1, ends, 0, 1200)  # keys 101 .. 1300: the switch at 641
    steps = plain.decode_steps_s(1, range(100, 1300))
    assert ends.tolist() == list(accumulate(steps))


def test_other_engines_keep_the_fa3_grid() -> None:
    from twin.costmodel import CostModel
    from twin.costmodel.profile_store import resolve_profile
    from twin.presets import get_model

    for engine in ("vllm", "sglang"):
        cm = CostModel(get_model("llama-3-8b"), resolve_profile("h100", None, engine))
        assert cm.decode_rule == ft.FA3_GRID_RULE  # their FA3 tables (helper attnfix39)
    fp8 = CostModel(
        replace(get_model("llama-3-8b"), kv_dtype="fp8"), resolve_profile("h100", None, "trtllm")
    )
    assert fp8.kernel_keys["attn_decode"] == "attn_decode_fp8kv" and fp8.decode_rule == ""


def test_the_fit_reader_rows_carry_the_choice() -> None:
    """NVIDIA's H100 TensorRT-LLM bf16-KV decode rows carry the XQA side's CTAs where the
    source's rule holds at the row's cached tokens, 0 elsewhere; the fp8-KV rows the waves."""
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration import aic_dense
    from twin.calibration.aic_tables import system_dir

    system = system_dir("h100")
    if not system.is_dir():
        pytest.skip("aiconfigurator's H100 tables are not installed")
    fam = aic_dense.attention_rows(system, "trtllm", "decode")
    assert fam is not None and fam.framework == "TensorRT-LLM"
    sides = set()
    for row in fam.rows:
        s = row["shape"]
        xqa = _source_rule(s["b"], s["c"], s["h"], s["kvh"], s["d"], H100_SMS)
        assert row["waves_d"] == (float(s["kvh"] * s["b"]) if xqa else 0.0)
        sides.add(xqa)
    assert sides == {True, False}
    fp8 = aic_dense.attention_rows(system, "trtllm", "decode", "fp8")
    assert fp8 is not None
    s = fp8.rows[0]["shape"]
    assert fp8.rows[0]["waves_d"] == ft.attn_decode_waves_d(
        s["b"], s["h"], s["kvh"], s["d"], H100_SMS
    )
