"""A GDN layer's input projection as the engine launches it (``ModelSpec.gdn_in_proj_gemms``):
SGLang before 0.5.10 runs Qwen3.5's four checkpoint matrices as four GEMMs
(``twin.validate.silicon.kernel_layout.sglang_gdn_in_proj_gemms``), priced each with its own
floor (``twin.costmodel.dense_pricing.DensePricing._gdn_in_proj``)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import silicon_row

from twin.costmodel import CostModel
from twin.costmodel.profile_store import load_profile
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate.silicon.kernel_layout import sglang_gdn_in_proj_gemms

QWEN35 = get_model("qwen3.5-397b-a17b")


def test_four_launches_cost_each_one_s_floor() -> None:
    profile = load_profile("b200", "sglang")
    four = dataclasses.replace(QWEN35, gdn_in_proj_gemms=4)
    one, split = CostModel(QWEN35, profile, 8), CostModel(four, profile, 8)
    t, d = 4, QWEN35.d_model
    key, val, heads = one.gdn_key_w, one.gdn_val_w, one.gdn_v
    fused = one._proj(t, d, 2 * key + 2 * val + 2 * heads)
    apart = one._proj(t, d, 2 * key + val) + one._proj(t, d, val) + 2 * one._gemm(t, d, heads)
    assert one._gdn_in_proj(t) == fused and split._gdn_in_proj(t) == apart
    layers = QWEN35.mixer_counts["gdn"]
    step_one = one.decode([2048] * t, breakdown=True)
    step_four = split.decode([2048] * t, breakdown=True)
    assert step_four.total_s - step_one.total_s == pytest.approx(layers * (apart - fused))
    # At a few tokens the three more launches' floors outweigh the one wider GEMM.
    assert apart > fused


def test_only_1_or_4_launches() -> None:
    with pytest.raises(TwinError, match="'gdn_in_proj_gemms' must be 1 or 4"):
        dataclasses.replace(QWEN35, gdn_in_proj_gemms=2)
    with pytest.raises(TwinError, match="'gdn_in_proj_gemms' needs gdn layers"):
        dataclasses.replace(get_model("llama-3.1-8b"), gdn_in_proj_gemms=4)


@pytest.mark.parametrize(
    ("backend", "release", "path", "gemms"),
    [
        ("sglang", "0.5.9", "Qwen/Qwen3.5-397B-A17B-FP8", 4),
        ("sglang", "0.5.6.post2", "Qwen/Qwen3.5-397B-A17B", 4),
        ("sglang", "0.5.10.post1", "Qwen/Qwen3.5-397B-A17B", 1),
        ("sglang", "nightly-dev-20260216-d3bae71e", "Qwen/Qwen3.5-397B-A17B", 4),
        ("sglang", "nightly-dev-20260402-d7256eb6", "nvidia/Qwen3.5-397B-A17B-NVFP4", 1),
        ("vllm", "0.18.0", "Qwen/Qwen3.5-397B-A17B", 1),
        ("sglang", "0.5.9", "Qwen/Qwen3-Next-80B-A3B-Instruct", 1),  # fused in_proj_qkvz
    ],
)
def test_which_rows_run_four_launches(backend: str, release: str, path: str, gemms: int) -> None:
    row = silicon_row(backend=backend, backend_version=release, model_path=path)
    assert sglang_gdn_in_proj_gemms(row, QWEN35) == gemms


def test_a_model_without_gdn_layers_keeps_one() -> None:
    row = silicon_row(backend="sglang", backend_version="0.5.9", model_path="Qwen/Qwen3.5-x")
    assert sglang_gdn_in_proj_gemms(row, get_model("minimax-m2.5")) == 1
