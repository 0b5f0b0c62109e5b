"""SGLang's fused-MoE Triton kernel priced by its grid (issue 34): the default config's
tiles run in whole waves over the SMs (``features.sglang_grid_flops``), and the SGLang
collector's EP rows time rank 0's workload (``collector_routing.sglang_rank0_row``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from twin.calibration.aic_moe import moe_row, reads_sglang_grid
from twin.calibration.collector_routing import collector_rank0_load, sglang_rank0_row
from twin.costmodel import CostModel
from twin.costmodel import features as ft
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
    "kernel_source": ft.SGLANG_TRITON_SOURCE,
    "moe_dtype": "bfloat16",
}


def test_sglangs_triton_grid_runs_whole_waves_of_its_default_tiles() -> None:
    # 64 rows on each of 4 experts: one 64-row block each, 4 x 24 gate-and-up programs
    # (N = 1,536 / 64) and 4 x 32 down programs (N = 2,048 / 64): one wave each on 142 SMs
    one = ft.sglang_grid_flops(256.0, 4.0, 2048, 768, 2, True, 142)
    assert one == 2.0 * 64 * 64 * 142 * (2048 + 768)
    # 96 rows an expert: two blocks each, 192 and 256 programs: two waves each (the
    # table's 115 -> 239 us from 1,024 to 1,536 tokens)
    assert ft.sglang_grid_flops(384.0, 4.0, 2048, 768, 2, True, 142) == 2 * one
    # the small-M config's 16 x 32 tiles: 1 row on each of 2 experts, one block each
    small = ft.sglang_grid_flops(2.0, 2.0, 2048, 768, 2, False, 142)
    assert small == 2.0 * 16 * 32 * 142 * (2048 + 768)
    assert ft.sglang_grid_flops(256.0, 4.0, 2048, 768, 2, True, None) == 0.0
    assert ft.sglang_grid_flops(0.0, 0.0, 2048, 768, 2, True, 142) == 0.0


def test_the_sglang_collectors_triton_rows_under_ep_time_rank_0() -> None:
    bf16 = WEIGHT_FORMATS["bf16"]
    row = {**L40S_SERIES, "num_tokens": 1024}
    new = moe_row(row, bf16, "moe", 0.1, None, True, 142)
    rank0 = collector_rank0_load(1024, 128, 8, 32)
    # token i's experts are i mod 16 + 16 j: a quarter of the tokens, one row each
    assert (new["active_experts"], rank0.rows) == (4.0, 256.0)
    assert new["grid_flops"] == ft.sglang_grid_flops(256.0, 4.0, 2048, 768, 2, True, 142)
    # without the SMs (a fit written before the grid): the mean rank and no grid
    old = moe_row(row, bf16, "moe", 0.1, None, True)
    assert old["grid_flops"] == 0.0
    mean = ROUTINGS["balanced"].rank_load(1024, 128, 8, 32)
    assert old["routed_elems"] == new["routed_elems"]
    assert old["flops"] == pytest.approx(new["flops"] * mean.rows / rank0.rows)
    # the framework layer's formats (mxfp4, under the same label) and EP 1: the mean rank
    assert not sglang_rank0_row(ft.SGLANG_TRITON_SOURCE, "w4a16_mxfp4", 32)
    assert not sglang_rank0_row(ft.SGLANG_TRITON_SOURCE, "bfloat16", 1)
    assert sglang_rank0_row(ft.SGLANG_TRITON_SOURCE, "fp8_block", 2)
    assert not sglang_rank0_row("sglang_marlin_moe", "bfloat16", 2)
    # the grid's kernel: SGLang's Triton source at bf16 experts only
    assert ft.sglang_default_config(ft.SGLANG_TRITON_SOURCE, True)
    assert not ft.sglang_default_config(ft.SGLANG_TRITON_SOURCE, False)
    assert not ft.sglang_default_config("vllm_unquantizedfusedmoemethod_triton", True)
    # quantised experts get no grid (their default config was not read)
    fp8 = moe_row({**row, "moe_dtype": "fp8_block"}, WEIGHT_FORMATS["fp8-block"], "m", 0.1)
    assert fp8["grid_flops"] == 0.0


def _step(prof: Any, c: float, batch: int) -> float:
    fit = prof.kernels["moe"]
    fit = dataclasses.replace(fit, params={**fit.params, "c_grid_flops": c})
    p = dataclasses.replace(prof, kernels={**prof.kernels, "moe": fit})
    step = CostModel(get_model("qwen3-235b-a22b"), p, 8, ep=8).decode(
        [1000] * batch, breakdown=True
    )
    return float(step.by_kernel["moe"])  # type: ignore[union-attr]


def test_a_serving_step_prices_sglangs_grid_at_the_fitted_rate() -> None:
    prof = resolve_profile("l40s", None, "sglang")
    assert prof.kernels["moe"].provenance["kernel_source"] == ft.SGLANG_TRITON_SOURCE
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
    assert fit.model.endswith("+restream_weights+grid_flops+active_experts")


def test_the_hopper_sglang_triton_fits_price_as_before() -> None:
    for gpu in ("h100", "h200"):
        fit = resolve_profile(gpu, None, "sglang").kernels["moe"]
        assert not reads_sglang_grid(fit.params) and fit.params["c_grid_flops"] == 0.0
