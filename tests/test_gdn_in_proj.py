"""A GDN layer's input projection as the engine launches it (``KernelLayout.gdn_in_proj_gemms``):
SGLang before 0.5.10 runs Qwen3.5's four checkpoint matrices as four GEMMs
(``twin.engine.kernel_layouts_sglang.sglang_gdn_in_proj_gemms``), priced each with its own
floor (``twin.costmodel.dense_pricing.DensePricing._gdn_in_proj``)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import silicon_row

from twin.costmodel import CostModel
from twin.costmodel.kernel_layout import KernelLayout
from twin.costmodel.profile_store import load_profile
from twin.engine.config import EngineConfig
from twin.engine.kernel_layouts_sglang import sglang_gdn_in_proj_gemms
from twin.engine.run_pricing import kernel_layout_of
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate.silicon.deployment import engine_build

QWEN35 = get_model("qwen3.5-397b-a17b")


def test_four_launches_cost_each_one_s_floor() -> None:
    profile = load_profile("b200", "sglang")
    four = KernelLayout(gdn_in_proj_gemms=4)
    one, split = CostModel(QWEN35, profile, 8), CostModel(QWEN35, profile, 8, kernel_layout=four)
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
    with pytest.raises(TwinError, match="gdn_in_proj_gemms must be 1 or 4"):
        KernelLayout(gdn_in_proj_gemms=2)


@pytest.mark.parametrize(
    ("build", "name", "gemms"),
    [
        ("0.5.9", "Qwen/Qwen3.5-397B-A17B-FP8", 4),
        ("0.5.6.post2", "Qwen/Qwen3.5-397B-A17B", 4),
        ("0.5.10.post1", "Qwen/Qwen3.5-397B-A17B", 1),
        ("nightly-dev-20260216-d3bae71e", "Qwen/Qwen3.5-397B-A17B", 4),
        ("nightly-dev-20260402-d7256eb6", "nvidia/Qwen3.5-397B-A17B-NVFP4", 1),
        ("nightly-dev", "Qwen/Qwen3.5-397B-A17B", 1),  # no day: not read
        ("0.5.9", "Qwen/Qwen3-Next-80B-A3B-Instruct", 1),  # fused in_proj_qkvz
    ],
)
def test_which_builds_run_four_launches(build: str, name: str, gemms: int) -> None:
    model = dataclasses.replace(QWEN35, name=name)
    assert sglang_gdn_in_proj_gemms(model, build) == gemms


def test_a_model_without_gdn_layers_keeps_one() -> None:
    minimax = dataclasses.replace(get_model("minimax-m2.5"), name="Qwen/Qwen3.5-x")
    assert sglang_gdn_in_proj_gemms(minimax, "0.5.9") == 1


def test_the_run_reads_the_build_it_names() -> None:
    """The build: ``engine_build``, else the kernel tables' release, else the engine's
    release (SGLang's newest, 0.5.23: one launch)."""
    sglang = EngineConfig.of(engine="sglang", engine_build="0.5.9")
    assert kernel_layout_of(QWEN35, sglang, "").gdn_in_proj_gemms == 4
    tables = EngineConfig.of(engine="sglang", kernel_tables="0.5.9")
    assert kernel_layout_of(QWEN35, tables, "").gdn_in_proj_gemms == 4
    newest = EngineConfig.of(engine="sglang", engine_release="0.5.23")
    assert kernel_layout_of(QWEN35, newest, "").gdn_in_proj_gemms == 1
    vllm = EngineConfig.of(engine="vllm", engine_build="0.5.9")
    assert kernel_layout_of(QWEN35, vllm, "") == KernelLayout()


def test_inferencemax_nightly_rows_name_their_image() -> None:
    """InferenceMAX's Qwen3.5 rows that name only ``nightly-dev`` ran nightly-dev-20260216
    (``twin.validate.silicon.inferencemax_sglang``); other rows' builds are their own."""
    source = "source_file=2026-04-06.csv"
    qwen = silicon_row(
        backend="sglang", backend_version="nightly-dev", model_path="Qwen/Qwen3.5-397B-A17B"
    )
    assert engine_build(qwen) == "nightly-dev"  # not an InferenceMAX row
    imax = dataclasses.replace(qwen, source=source)
    assert engine_build(imax) == "nightly-dev-20260216"
    glm = dataclasses.replace(imax, model_path="zhipuai/GLM-5")
    assert engine_build(glm) == "nightly-dev"
    assert engine_build(dataclasses.replace(imax, backend_version="0.5.9")) == "0.5.9"
