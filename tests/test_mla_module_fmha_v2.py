"""TensorRT-LLM's decode module on the RTX PRO 6000 runs the FMHA v2 MLA generation its
kernel tables run (``mla_decode_kernels.module_decode_rule``, ``MODULE_KERNEL_RULES``; issue
34, helper mla44): the rule's scope, the module table rows' launch features, the regenerated
fits' held-out errors and the serving price reading the same launch."""

from __future__ import annotations

import pytest
from mla_module_prices import module_decode_prices

from twin import precision as px
from twin.costmodel import CostModel
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel.profile_store import load_profile
from twin.presets import get_model

DSV3_BF16 = px.with_precision(get_model("deepseek-v3"), "bf16", None)
REFITTED = ("mla_module_decode", "mla_module_decode_fp8_block", "mla_module_decode_nvfp4")


def test_the_module_takes_the_fmha_v2_launch_and_no_other_kernel_rule() -> None:
    # TensorRT-LLM on SM120 over a bf16 cache: the kernel tables' FMHA v2 launch
    assert mdk.module_decode_rule("rtx-pro-6000", "default", 2) == "fmha_v2"
    assert mdk.module_decode_rule("l40s", "default", 2) == "fmha_v2"
    # over an fp8 cache another kernel runs there (not read): no rule
    assert mdk.module_decode_rule("rtx-pro-6000", "default", 1) is None
    # Hopper's FlashMLA stays a kernel-table rule: the served module fits were made without it
    assert mdk.kernel_decode_rule("h200", "default", 2) == "flashmla"
    assert mdk.module_decode_rule("h200", "default", 2) is None
    assert mdk.module_decode_rule("h100", "default", 1) is None
    # the rules the modules read before are unchanged
    assert mdk.module_decode_rule("b200", "default", 2) == "trtllm_gen"
    assert mdk.module_decode_rule("l40s", "TRITON_MLA", 2) == "vllm_triton"
    assert mdk.module_decode_rule("rtx-pro-6000", "FLASH_ATTN_MLA", 2) is None


def test_rtx_pro_6000_module_rows_carry_the_launch() -> None:
    """NVIDIA's RTX PRO 6000 TensorRT-LLM module table: the bf16-cache rows carry the FMHA v2
    launch (a 128-head row's second 64-row CTA re-reads the latent; a CTA's keys on the
    critical path), the fp8-cache rows none."""
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration.aic_mla import module_rows
    from twin.calibration.aic_tables import system_dir

    fams = {f.kernel: f for f in module_rows(system_dir("rtx-pro-6000"), "trtllm")}
    rows = fams["mla_module_decode"].rows
    assert {r["critical_keys"] > 0 for r in rows} == {True}
    row = next(r for r in rows if r["shape"] == {"b": 32, "c": 8191, "h": 128})
    # 32 sequences x two 64-row CTAs, one wave of 188 SMs, 8,192 keys each
    assert (row["launch_ctas"], row["launch_waves"], row["critical_keys"]) == (64.0, 1.0, 8192.0)
    assert row["kv_repeat"] == 2 * (512 + 64) * 32 * 8192
    fp8 = fams["mla_module_decode_fp8kv"].rows
    assert {r["critical_keys"] for r in fp8} == {0.0}


@pytest.mark.parametrize("family", REFITTED)
def test_refitted_module_fits_read_the_launch_and_meet(family: str) -> None:
    """The three bf16-cache fits, refitted with the launch (held out, median / P90 %:
    ``mla_module_decode`` 4.30 / 16.90 -> 3.86 / 10.76, ``_fp8_block`` 4.59 / 14.60 -> 3.14 /
    9.80, ``_nvfp4`` 4.60 / 18.22 -> 3.43 / 13.83), price a CTA's keys; the fp8-cache fits
    keep their form (no launch to read)."""
    prof = load_profile("rtx-pro-6000", "trtllm")
    fit = prof.kernels[family]
    assert fit.params["c_critical_keys"] > 1e-9
    assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err <= 0.05
    assert fit.heldout_p90_rel_err is not None and fit.heldout_p90_rel_err <= 0.15
    assert prof.kernels[f"{family}_fp8kv"].params["c_critical_keys"] < 1e-14


def test_rtx_pro_6000_trtllm_serving_decode_module_prices_the_fmha_v2_launch() -> None:
    cm = CostModel(DSV3_BF16, load_profile("rtx-pro-6000", "trtllm"), tp=1)
    assert cm.priced.keys["mla_module_decode"] == "mla_module_decode"
    prices = module_decode_prices(cm, "rtx-pro-6000", 64, "fmha_v2")
    assert prices.serving == prices.with_rule
    assert prices.with_rule > 1.1 * prices.without_rule
