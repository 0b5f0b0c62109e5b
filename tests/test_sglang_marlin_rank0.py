"""SGLang's Marlin MoE rows as its collector's EP rank 0 (issue 34): aiconfigurator's SGLang
collector times every Marlin row on rank 0's workload, int4 and mxfp4 alike (0.5.10: its own
``fused_marlin_moe`` call on ``build_rank0_workloads``; 0.5.14: the framework layer built as
EP rank 0), so every ``sglang_marlin_moe`` row under EP is read at rank 0
(``collector_routing.sglang_rank0_row``), and the int4 / mxfp4 Marlin fits were refitted."""

from __future__ import annotations

import pytest

from twin.calibration.aic_moe import _rank_tokens, moe_row
from twin.calibration.collector_routing import (
    SGLANG_CLAMPED_RELEASES,
    collector_rank0_load,
    sglang_clamped_rows,
    sglang_rank0_row,
)
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.profile_store import resolve_profile
from twin.precision import WEIGHT_FORMATS

MARLIN = "sglang_marlin_moe"
# Kimi-K2.5's experts (7,168 x 2,048, 384 of them, top 8), one token, TP 1, EP 64
ROW = {
    "hidden_size": 7168,
    "inter_size": 2048,
    "topk": 8,
    "num_experts": 384,
    "moe_tp_size": 1,
    "moe_ep_size": 64,
    "kernel_source": MARLIN,
    "num_tokens": 1,
    "moe_dtype": "int4_wo",
}
H200_SMS = 132


@pytest.mark.parametrize("mode", ["int4_wo", "w4a16_mxfp4"])
def test_the_rule_names_every_sglang_marlin_row_under_ep(mode: str) -> None:
    assert MARLIN in moe_ft.SGLANG_MARLIN_SOURCES
    assert sglang_rank0_row(MARLIN, mode, 2)
    assert not sglang_rank0_row(MARLIN, mode, 1)
    # vLLM's Marlin label is its own collector's rank 0 by prefix, not this rule
    assert not sglang_rank0_row(sorted(moe_ft.VLLM_MARLIN_SOURCES)[0], mode, 2)
    # SGLang's Triton rows keep their own modes
    assert sglang_rank0_row(moe_ft.SGLANG_TRITON_SOURCE, "w4a16_mxfp4", 2)
    assert not sglang_rank0_row(moe_ft.SGLANG_TRITON_SOURCE, "int4_wo", 2)


def test_an_int4_marlin_ep_row_is_rank_0s_workload() -> None:
    # the token's experts 0, 48, ..., 336: rank 0 (experts 0-5) holds one row of one expert,
    # the mean rank an eighth of one
    load = collector_rank0_load(1, 384, 8, 64)
    assert (load.rows, load.active) == (1.0, 1.0)
    int4 = WEIGHT_FORMATS["int4"]
    new = moe_row(ROW, int4, "moe_int4_wo", 0.1, None, True, H200_SMS)
    assert new["active_experts"] == 1.0
    # a fit written before SGLang's grid and rank 0 (no SMs): the mean rank, as before
    old = moe_row(ROW, int4, "moe_int4_wo", 0.1, None, True)
    assert old["active_experts"] == 0.125


def test_a_0510_marlin_row_is_the_collectors_own_launch_of_rank_0s_tokens() -> None:
    # the 0.5.10 collector (cb4d907c7) launches ``fused_marlin_moe`` on rank 0's tokens, the
    # masked slots clamped to local expert 0: Kimi-K2.5's experts, 128 tokens, EP 8 (48
    # experts a rank): rank 0 holds 128 rows over its 48 experts, the clamp 896 more on
    # expert 0, and the row block is of the ~84 tokens launched (16), not of all 128 (32)
    assert "0.5.10" in SGLANG_CLAMPED_RELEASES
    t, ep, local = 128, 8, 48
    load, hot = collector_rank0_load(t, 384, 8, ep), sglang_clamped_rows(t, 384, 8, ep)
    assert (load.rows, load.active, hot) == (128.0, 48.0, 896.0)
    assert moe_ft.marlin_block_m(MARLIN, _rank_tokens(t, 8, ep), 8, local) == 16
    assert moe_ft.marlin_block_m(MARLIN, t, 8, local) == 32
    int4 = WEIGHT_FORMATS["int4"]
    row = {**ROW, "num_tokens": t, "moe_ep_size": ep}
    clamped = moe_row(row, int4, "moe_int4_wo", 0.1, None, True, H200_SMS, True)
    pad, restream = moe_ft.moe_tile_extras(load.rows, load.active, 16, 7168, 2048, 2, hot)
    assert (clamped["pad_flops"], clamped["restream_weights"]) == (pad, restream)
    # 0.5.14's framework layer: every token launched, no clamp
    plain = moe_row(row, int4, "moe_int4_wo", 0.1, None, True, H200_SMS, False)
    pad, restream = moe_ft.moe_tile_extras(load.rows, load.active, 32, 7168, 2048, 2)
    assert (plain["pad_flops"], plain["restream_weights"]) == (pad, restream)


@pytest.mark.parametrize(
    ("gpu", "family", "median", "p90"),
    [
        # before -> after, held out median / P90 %: A100 (0.5.10) 4.55 / 13.88 -> 2.60 / 9.91
        ("a100-80gb", "moe_int4_wo", 0.027, 0.100),
        ("h100", "moe_int4_wo", 0.016, 0.052),
        ("h200", "moe_int4_wo", 0.018, 0.055),
        ("l40s", "moe_int4_wo", 0.020, 0.111),
        ("rtx-pro-6000", "moe_int4_wo", 0.021, 0.085),
        ("rtx-pro-6000", "moe_mxfp4", 0.046, 0.181),
    ],
)
def test_the_refitted_marlin_fits_held_out(
    gpu: str, family: str, median: float, p90: float
) -> None:
    # chosen on the fit rows (docs/decisions.md, issue 34, helper marlin38, session 38)
    fit = resolve_profile(gpu, None, "sglang").kernels[family]
    assert fit.provenance["kernel_source"] == MARLIN
    assert moe_ft.reads_sglang_grid(fit.params)  # read at rank 0 (``aic_moe.moe_row``)
    assert fit.heldout_median_rel_err is not None and fit.heldout_p90_rel_err is not None
    assert fit.heldout_median_rel_err < median and fit.heldout_p90_rel_err < p90
