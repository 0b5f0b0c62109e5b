"""The serving cost model reads the decode and BMM rules its fits were made with
(session 29's review, helper ``review29``): TensorRT-LLM's FMHA v2 launch for the
``mla_decode`` kernel fits (``mla_decode_kernels.kernel_decode_rule``), vLLM's ``TRITON_MLA``
launch for the decode-module fits (``module_decode_rule``) and the SM120 fp8 BMM's
quantisation steps (``bmm_quant_rule``). Each price is checked against its fit at the
features of the rule, and against the features without it."""

from __future__ import annotations

import dataclasses

import pytest
from mla_module_prices import module_decode_prices, priced_fit

from twin import precision as px
from twin.costmodel import CostModel
from twin.costmodel import mla_bmm as mbmm
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_features as mf
from twin.costmodel.profile_store import load_profile
from twin.hardware import get_gpu
from twin.presets import get_model

DSV3 = get_model("deepseek-v3")  # fp8-block weights, as its checkpoint
DSV3_BF16 = px.with_precision(DSV3, "bf16", None)


def test_a100_trtllm_serving_decode_prices_the_fmha_v2_launch() -> None:
    cm = CostModel(DSV3_BF16, load_profile("a100-80gb", "trtllm"), tp=8)
    assert cm.mla_modes[1] == "kernels"
    d, e, kv_e = cm.mla_dims, cm.elem_bytes, cm.priced.mla_kv_elem_bytes[1]
    sms = get_gpu("a100-80gb").sm_count or 0
    batch, keys = 32, 32 * 4000
    sums = mf.mla_absorbed_sums(batch, batch, keys, keys, 1, d, e, kv_e)
    attn = priced_fit(cm, "mla_decode")

    def price(rule: str | None) -> float:
        launch = mdk.mla_decode_launch(rule, batch, keys, 1, d, kv_e, sms)
        return attn(*mdk.decode_kernel_features(sums, 0.0, launch))

    parts = dict((k, v) for _, k, v in cm._mla_decode(batch, keys))
    assert parts["mla_decode"] == price("fmha_v2")
    assert price("fmha_v2") != price(None)


def test_l40s_vllm_serving_decode_module_prices_the_triton_mla_launch() -> None:
    cm = CostModel(DSV3_BF16, load_profile("l40s", "vllm"), tp=8)
    prices = module_decode_prices(cm, "l40s", 16, "vllm_triton")
    assert prices.serving == prices.with_rule
    assert prices.with_rule != prices.without_rule


def test_rtx_pro_6000_trtllm_serving_bmm_prices_the_quantisation_steps() -> None:
    """The shipped profile prices MLA by its modules (its BMM fit then unread); without
    them the kernels' pricing reads the BMM fit with its quantisation steps."""
    shipped = load_profile("rtx-pro-6000", "trtllm")
    kernels = {k: v for k, v in shipped.kernels.items() if not k.startswith("mla_module")}
    cm = CostModel(DSV3, dataclasses.replace(shipped, kernels=kernels), tp=8)
    assert cm._mla_bmm_fit and cm.priced.keys["mla_bmm"] == "mla_bmm_fp8"
    d, e = cm.mla_dims, cm.elem_bytes
    act_b, w_b = cm.priced.mla_bmm_bytes
    sms = get_gpu("rtx-pro-6000").sm_count or 0
    bmm = priced_fit(cm, "mla_bmm")
    rows = 640
    with_q = without = 0.0
    for k, n in ((d.nope, d.kv_lora), (d.kv_lora, d.v)):
        feats = mbmm.mla_bmm_features(rows, d.heads, k, n, e, act_b, w_b, sms, None)
        steps = mbmm.bmm_k_steps(k)
        with_q += bmm(*feats, mbmm.bmm_quant_steps(True, rows, d.heads, k, sms), steps)
        without += bmm(*feats, 0.0, steps)
    parts = dict((k, v) for _, k, v in cm._mla_decode(rows, rows * 1000))
    assert parts["mla_bmm"] == pytest.approx(with_q, rel=1e-12)
    assert with_q > without * 1.01
