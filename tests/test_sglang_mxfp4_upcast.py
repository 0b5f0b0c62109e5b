"""SGLang's Triton runner with mxfp4 experts (issue 34): ``Mxfp4MoEMethod`` upcasts them to
bf16 at load and runs the bf16 fused-MoE kernel (``moe_features.sglang_upcast_experts``), so the
table's ``sglang_fused_moe_triton`` mxfp4 rows are bf16 rows for a fit that reads SGLang's
grid; one written before keeps the experts' own bytes."""

from __future__ import annotations

import pytest

from twin.calibration.aic_moe import moe_row
from twin.calibration.collector_routing import collector_rank0_load
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.profile_store import resolve_profile
from twin.precision import WEIGHT_FORMATS

# gpt-oss-120b's experts (2,880 x 2,880, 128 of them, top 4), TP 1, EP 1, on the H200
# SGLang 0.5.14 table's label
ROW = {
    "hidden_size": 2880,
    "inter_size": 2880,
    "topk": 4,
    "num_experts": 128,
    "moe_tp_size": 1,
    "moe_ep_size": 1,
    "kernel_source": moe_ft.SGLANG_TRITON_SOURCE,
    "num_tokens": 512,
}


def test_the_rule_names_sglangs_triton_mxfp4_rows_for_a_grid_fit() -> None:
    assert moe_ft.sglang_upcast_experts(moe_ft.SGLANG_TRITON_SOURCE, "mxfp4", True)
    assert not moe_ft.sglang_upcast_experts(moe_ft.SGLANG_TRITON_SOURCE, "mxfp4", False)
    assert not moe_ft.sglang_upcast_experts(moe_ft.SGLANG_TRITON_SOURCE, "fp8_block", True)
    assert not moe_ft.sglang_upcast_experts("sglang_marlin_moe", "mxfp4", True)
    assert not moe_ft.sglang_upcast_experts("vllm_fused_moe", "mxfp4", True)


def test_an_upcast_row_is_featured_as_the_bf16_kernels_row() -> None:
    mxfp4, bf16 = WEIGHT_FORMATS["mxfp4"], WEIGHT_FORMATS["bf16"]
    up = moe_row({**ROW, "moe_dtype": "w4a16_mxfp4"}, mxfp4, "moe_mxfp4", 0.1, None, True, 132)
    ref = moe_row({**ROW, "moe_dtype": "w4a16_mxfp4"}, bf16, "moe", 0.1, None, True, 132)
    for k in ("flops", "bytes", "weight_elems", "large_m_weights", "grid_flops", "tile_bytes"):
        assert up[k] == ref[k], k
    assert up["grid_flops"] > 0.0 and up["large_m_weights"] > 0.0  # 512 tokens > 128 experts
    # without the SMs (a fit written before the grid): the experts' own bytes, no grid
    old = moe_row({**ROW, "moe_dtype": "w4a16_mxfp4"}, mxfp4, "moe_mxfp4", 0.1, None, True)
    assert old["grid_flops"] == 0.0 and old["bytes"] < up["bytes"]


def test_an_ep_row_is_rank_0s_workload() -> None:
    # the framework layer built as EP rank 0 (``collector_routing.SGLANG_RANK0_MODES``): one
    # token over 128 experts, top 4, EP 32: its experts 0, 32, 64, 96, so rank 0 (experts
    # 0-3) holds one row of one expert; the mean rank an eighth of one
    mxfp4 = WEIGHT_FORMATS["mxfp4"]
    row = {**ROW, "moe_dtype": "w4a16_mxfp4", "moe_ep_size": 32, "num_tokens": 1}
    rank0 = collector_rank0_load(1, 128, 4, 32)
    assert (rank0.rows, rank0.active) == (1.0, 1.0)
    new = moe_row(row, mxfp4, "moe_mxfp4", 0.1, None, True, 132)
    assert new["active_experts"] == 1.0
    old = moe_row(row, mxfp4, "moe_mxfp4", 0.1, None, True)  # before the grid: the mean rank
    assert old["active_experts"] == 0.125


@pytest.mark.parametrize(("gpu", "upcast"), [("h200", True), ("l40s", True), ("h100", False)])
def test_the_regenerated_fits_read_the_upcast_and_the_others_price_as_before(
    gpu: str, upcast: bool
) -> None:
    fit = resolve_profile(gpu, None, "sglang").kernels["moe_mxfp4"]
    assert fit.provenance["kernel_source"] == moe_ft.SGLANG_TRITON_SOURCE
    assert moe_ft.reads_sglang_grid(fit.params) is upcast


@pytest.mark.parametrize(("gpu", "median", "p90"), [("h200", 0.036, 0.120), ("l40s", 0.043, 0.16)])
def test_the_regenerated_fits_held_out(gpu: str, median: float, p90: float) -> None:
    # before (fitted on the mxfp4 bytes): H200 4.48 / 16.70%, L40S 8.07 / 31.31%
    fit = resolve_profile(gpu, None, "sglang").kernels["moe_mxfp4"]
    assert fit.heldout_median_rel_err < median and fit.heldout_p90_rel_err < p90
