"""SGLang's fused-MoE Triton kernel priced by its grid (issue 34): the default config's
tiles run in whole waves over the SMs (``moe_features.sglang_grid_flops``), and the SGLang
collector's EP rows time rank 0's workload (``collector_routing.sglang_rank0_row``)."""

from __future__ import annotations

from typing import Any

import pytest
from profile_edits import moe_decode_s, with_fit

from twin.calibration.aic_moe import moe_row
from twin.calibration.collector_routing import (
    SGLANG_CLAMPED_RELEASES,
    collector_rank0_load,
    sglang_clamped_rows,
    sglang_rank0_row,
)
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.moe_features import reads_sglang_grid
from twin.costmodel.profile_store import resolve_profile
from twin.costmodel.routing import ROUTINGS
from twin.precision import WEIGHT_FORMATS
from twin.presets import get_model

# NVIDIA's L40S SGLang 0.5.14 table's series (142 SMs): 2,048 x 768 experts, 128 of them,
# top 8, EP 32 (four experts on rank 0)
L40S_SERIES = {
    "hidden_size": 2048,
    "inter_size": 768,
    "topk": 8,
    "num_experts": 128,
    "moe_tp_size": 1,
    "moe_ep_size": 32,
    "kernel_source": moe_ft.SGLANG_TRITON_SOURCE,
    "moe_dtype": "bfloat16",
}


def test_sglangs_triton_grid_runs_whole_waves_of_its_default_tiles() -> None:
    # 64 rows on each of 4 experts: one 64-row block each, 4 x 24 gate-and-up programs
    # (N = 1,536 / 64) and 4 x 32 down programs (N = 2,048 / 64): one wave each on 142 SMs
    one = moe_ft.sglang_grid_flops(256.0, 4.0, 2048, 768, 2, True, 142)
    assert one == 2.0 * 64 * 64 * 142 * (2048 + 768)
    # 96 rows an expert: two blocks each, 192 and 256 programs: two waves each (the
    # table's 115 -> 239 us from 1,024 to 1,536 tokens)
    assert moe_ft.sglang_grid_flops(384.0, 4.0, 2048, 768, 2, True, 142) == 2 * one
    # the small-M config's 16 x 32 tiles: 1 row on each of 2 experts, one block each
    small = moe_ft.sglang_grid_flops(2.0, 2.0, 2048, 768, 2, False, 142)
    assert small == 2.0 * 16 * 32 * 142 * (2048 + 768)
    assert moe_ft.sglang_grid_flops(256.0, 4.0, 2048, 768, 2, True, None) == 0.0
    assert moe_ft.sglang_grid_flops(0.0, 0.0, 2048, 768, 2, True, 142) == 0.0


def test_the_sglang_collectors_triton_rows_under_ep_time_rank_0() -> None:
    bf16 = WEIGHT_FORMATS["bf16"]
    row = {**L40S_SERIES, "num_tokens": 1024}
    new = moe_row(row, bf16, "moe", 0.1, None, True, 142)
    rank0 = collector_rank0_load(1024, 128, 8, 32)
    # token i's experts are i mod 16 + 16 j: a quarter of the tokens, one row each
    assert (new["active_experts"], rank0.rows) == (4.0, 256.0)
    assert new["grid_flops"] == moe_ft.sglang_grid_flops(256.0, 4.0, 2048, 768, 2, True, 142)
    # a table of a release whose collector computed its clamped slots (0.5.10): the
    # launch's rows are rank 0's 256 tokens' 8 slots each, the 1,792 masked ones clamped
    # onto expert 0 (``sglang_clamped_rows``)
    assert "0.5.10" in SGLANG_CLAMPED_RELEASES and "0.5.14" not in SGLANG_CLAMPED_RELEASES
    hot = sglang_clamped_rows(1024, 128, 8, 32)
    assert hot == 256 * 8 - 256
    clamped = moe_row(row, bf16, "moe", 0.1, None, True, 142, True)
    assert clamped["grid_flops"] == moe_ft.sglang_grid_flops(
        256.0, 4.0, 2048, 768, 2, True, 142, hot
    )
    assert clamped["flops"] == pytest.approx(new["flops"] * (rank0.rows + hot) / rank0.rows)
    # without the SMs (a fit written before the grid): the mean rank, no grid, no clamp
    old = moe_row(row, bf16, "moe", 0.1, None, True, None, True)
    assert old["grid_flops"] == 0.0
    mean = ROUTINGS["balanced"].rank_load(1024, 128, 8, 32)
    assert old["routed_elems"] == new["routed_elems"]
    assert old["flops"] == pytest.approx(new["flops"] * mean.rows / rank0.rows)
    # the framework layer's mxfp4 rows (the same label) run as EP rank 0 too (moe37b), and
    # so do its Marlin label's (int4 and mxfp4, marlin38: ``test_sglang_marlin_rank0``);
    # EP 1 is one rank, and the label's other modes are not the collector's rank-0 ones
    assert sglang_rank0_row(moe_ft.SGLANG_TRITON_SOURCE, "w4a16_mxfp4", 32)
    assert sglang_rank0_row("sglang_marlin_moe", "int4_wo", 32)
    assert not sglang_rank0_row(moe_ft.SGLANG_TRITON_SOURCE, "bfloat16", 1)
    assert sglang_rank0_row(moe_ft.SGLANG_TRITON_SOURCE, "fp8_block", 2)
    assert not sglang_rank0_row(moe_ft.SGLANG_TRITON_SOURCE, "int4_wo", 2)
    # the grid's kernel: SGLang's Triton source at bf16 experts only
    assert moe_ft.sglang_default_config(moe_ft.SGLANG_TRITON_SOURCE, True)
    assert not moe_ft.sglang_default_config(moe_ft.SGLANG_TRITON_SOURCE, False)
    assert not moe_ft.sglang_default_config("vllm_unquantizedfusedmoemethod_triton", True)
    # quantised experts get no grid (their default config was not read)
    fp8 = moe_row({**row, "moe_dtype": "fp8_block"}, WEIGHT_FORMATS["fp8-block"], "m", 0.1)
    assert fp8["grid_flops"] == 0.0


def test_the_sglang_collectors_masked_slots_run_as_rows_of_expert_0() -> None:
    # aiconfigurator's collector clamps rank 0's masked slots (expert -1) to expert 0:
    # 1,024 tokens, 128 experts, top 8, EP 32: 256 tokens hold one of rank 0's 4 experts,
    # their other 7 slots each a row of expert 0 (64 + 1,792 rows: 29 blocks of 64)
    assert moe_ft.moe_expert_tiles(256.0, 4.0, 64, 1792.0) == 3 + 29
    assert moe_ft.moe_expert_tiles(256.0, 4.0, 64) == 4
    grid = moe_ft.sglang_grid_flops(256.0, 4.0, 2048, 768, 2, True, 142, 1792.0)
    # 32 blocks: 768 gate-and-up programs (6 waves on 142 SMs), 1,024 down programs (8)
    assert grid == 2.0 * 64 * 64 * 142 * (6 * 2048 + 8 * 768)
    # the rows are the launch's: FLOPs of 2,048 rows, the padding of expert 0's last block
    flops, _, extras = moe_ft.moe_features(
        256.0, 1.0, 4.0, 2048, 768, 2, 2, 2.0, 2.0, None, True, 64, grid, 1792.0
    )
    assert flops == moe_ft.moe_sums(2048.0, 4.0, 2048, 768, 2, 2, 2.0, 2.0)[0]
    assert extras["pad_flops"] == 2.0 * (32 * 64 - 2048) * 2048 * 3 * 768
    # EP 1 and 1 token an expert-0 row: nothing clamped beyond the token's other slots
    assert sglang_clamped_rows(4, 128, 8, 1) == 0.0
    assert sglang_clamped_rows(1, 128, 8, 32) == 7.0
    # a serving rank skips its remote slots: the step's grid reads no clamped rows
    assert moe_ft.sglang_grid_flops(256.0, 4.0, 2048, 768, 2, True, 142) < grid


def _step(prof: Any, c: float, batch: int) -> float:
    return moe_decode_s(
        get_model("qwen3-235b-a22b"), with_fit(prof, "moe", c_grid_flops=c), 8, batch, 8
    )


def test_a_serving_step_prices_sglangs_grid_at_the_fitted_rate() -> None:
    prof = resolve_profile("l40s", None, "sglang")
    assert prof.kernels["moe"].provenance["kernel_source"] == moe_ft.SGLANG_TRITON_SOURCE
    assert _step(prof, 1e-14, 64) > _step(prof, 0.0, 64)
    # another kernel's fit: the term reads nothing
    vllm = resolve_profile("l40s", None, "vllm")
    assert _step(vllm, 1e-14, 64) == _step(vllm, 0.0, 64)


# The SGLang Triton bf16 families regenerated with the grid and rank 0 (helper moe31,
# session 31); the other SGLang Triton fits keep the older reading.
GRID_REGENERATED = ("a100-80gb-sglang", "l40s-sglang", "rtx-pro-6000-sglang")


@pytest.mark.parametrize("name", GRID_REGENERATED)
def test_the_regenerated_sglang_triton_fits_read_the_grid(name: str) -> None:
    gpu, engine = name.rsplit("-", 1)
    fit = resolve_profile(gpu, None, engine).kernels["moe"]
    assert reads_sglang_grid(fit.params)
    assert fit.model.endswith("+restream_weights+grid_flops+routed_passes+active_experts")


def test_the_hopper_sglang_triton_fits_price_as_before() -> None:
    for gpu in ("h100", "h200"):
        fit = resolve_profile(gpu, None, "sglang").kernels["moe"]
        assert not reads_sglang_grid(fit.params) and fit.params["c_grid_flops"] == 0.0


def _series_rows(gpu: str, tokens: int) -> dict[int, dict[str, Any]]:
    """The 2,048 x 768 experts, 128, top 8, TP 1 rows of ``gpu``'s SGLang bf16 family at
    ``tokens`` tokens, by EP, as the reader features them."""
    from twin.calibration.aic_moe import moe_rows
    from twin.calibration.aic_tables import system_dir

    fam = next(f for f in moe_rows(system_dir(gpu), "sglang") if f.kernel == "moe")
    shape = {"d": 2048, "i": 768, "k": 8, "e": 128, "tp": 1, "t": tokens}
    return {
        r["shape"]["ep"]: r for r in fam.rows if all(r["shape"][k] == v for k, v in shape.items())
    }


@pytest.mark.slow
def test_the_0510_tables_time_the_clamped_slots_and_the_0514_tables_do_not() -> None:
    pytest.importorskip("aiconfigurator_core")
    # A100 (0.5.10): every token holds one of rank 0's experts up to EP 8 (the routing's
    # stride is 16 experts), so rank 0 launches all 16,384 x 8 slots and the time stays
    # flat (12.1 -> 11.7 ms); the reader gives EP 8 the FLOPs of EP 1
    a100 = _series_rows("a100-80gb", 16384)
    assert a100[8]["median_s"] > 0.9 * a100[1]["median_s"]
    assert a100[8]["flops"] == pytest.approx(a100[1]["flops"])
    # L40S (0.5.14): the time falls with EP and the reader keeps rank 0's own rows
    l40s = _series_rows("l40s", 16384)
    assert l40s[8]["median_s"] < 0.5 * l40s[1]["median_s"]
    assert l40s[8]["flops"] == pytest.approx(l40s[1]["flops"] / 8)
