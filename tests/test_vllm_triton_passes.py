"""vLLM's Triton fused MoE (``TritonExperts``) passes over every routed row of a launch, not
only the rank's: its activation over all of them and, under expert parallelism, the zeros
the remote experts' blocks write in both GEMMs (``moe_features.vllm_triton_routed_elems``, the
fused-MoE extra ``routed_passes``; issue 34, helper ``moe36``, session 36)."""

from __future__ import annotations

import pytest
from profile_edits import moe_decode_s, with_fit

from twin.calibration.aic_moe import moe_row
from twin.calibration.collector_routing import collector_rank0_load
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.profile_store import resolve_profile
from twin.precision import WEIGHT_FORMATS
from twin.presets import get_model

TRITON = "vllm_unquantizedfusedmoe_triton_tritonexperts"
# NVIDIA's L40S vLLM 0.24.0 bf16 shape: 2,048 x 768 experts, 128 of them, top 8
SHAPE = {
    "hidden_size": 2048,
    "inter_size": 768,
    "topk": 8,
    "num_experts": 128,
    "moe_tp_size": 1,
}


def test_every_routed_row_is_activated_and_the_remote_ones_written_as_zeros() -> None:
    # 1,024 routed rows, 64 of them the rank's: all activated (reads 2 x 768, writes 768),
    # the 960 remote ones written as zeros (2 x 768 in the first GEMM, 2,048 in the second)
    got = moe_ft.vllm_triton_routed_elems(TRITON, 1024.0, 64.0, 2048, 768, 2)
    assert got == 1024 * 3 * 768 + 960 * (2 * 768 + 2048)
    # no expert parallelism: every row is the rank's, the activation alone
    assert moe_ft.vllm_triton_routed_elems(TRITON, 1024.0, 1024.0, 2048, 768, 2) == 1024 * 3 * 768
    # every label of the Triton experts, and no other kernel
    for label in moe_ft.VLLM_TRITON_SOURCES:
        assert label.endswith("_triton_tritonexperts")
        assert moe_ft.vllm_triton_routed_elems(label, 1024.0, 64.0, 2048, 768, 2) == got
    flashinfer = "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts"
    assert moe_ft.vllm_triton_routed_elems(flashinfer, 1024.0, 64.0, 2048, 768, 2) == 0.0


def test_a_triton_table_row_carries_the_passes_of_the_collectors_rank_0() -> None:
    bf16 = WEIGHT_FORMATS["bf16"]

    def passes(ep: int, source: str = TRITON) -> float:
        row = {**SHAPE, "num_tokens": 1024, "moe_ep_size": ep, "kernel_source": source}
        return float(moe_row(row, bf16, "moe", 1.0)["routed_passes"])

    mine = collector_rank0_load(1024, 128, 8, 128).rows  # rank 0's rows at EP 128
    assert 0 < mine < 1024 * 8
    assert passes(128) == 8192 * 3 * 768 + (8192 - mine) * (2 * 768 + 2048)
    assert passes(1) == 8192 * 3 * 768  # EP 1: the activation over the rank's rows
    assert passes(128) > 2 * passes(1)  # the zero writes grow with the remote rows
    assert passes(128, "sglang_fused_moe_triton") == 0.0


def test_a_serving_step_prices_the_triton_passes_at_the_fitted_rate() -> None:
    prof = resolve_profile("h200", None, "vllm")
    assert prof.kernels["moe"].provenance["kernel_source"] == TRITON
    model = get_model("qwen3-235b-a22b")

    def step_s(c: float, source: str = TRITON, ep: int = 1) -> float:
        p = with_fit(prof, "moe", {"kernel_source": source}, c_routed_passes=c)
        return moe_decode_s(model, p, 8, 64, ep)

    assert step_s(1e-12) > step_s(0.0)
    # under EP every rank holds every token: the remote rows' zeros on top
    assert step_s(1e-12, ep=8) - step_s(0.0, ep=8) > step_s(1e-12) - step_s(0.0)
    # another kernel's fit: the term reads 0 whatever its coefficient
    other = "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts"
    assert step_s(1e-12, other) == step_s(0.0, other)


@pytest.mark.parametrize(
    ("gpu", "family"),
    [
        ("l40s", "moe"),
        ("l40s", "moe_fp8"),
        ("l40s", "moe_fp8_block"),
        ("h100", "moe"),
        ("h200", "moe"),
    ],
)
def test_the_triton_fits_price_the_passes(gpu: str, family: str) -> None:
    # regenerated with the term (helper moe36, session 36): a rate near the GPU's memory
    # bandwidth (L40S 2.8e-12 s a bf16 element, ~710 GB/s of 864), not at the fit's floor
    fit = resolve_profile(gpu, None, "vllm").kernels[family]
    assert fit.provenance["kernel_source"] in moe_ft.VLLM_TRITON_SOURCES
    assert fit.params["c_routed_passes"] > 1e-14


def test_the_l40s_vllm_bf16_fit_meets_the_kernel_target() -> None:
    # 2.66 / 16.33% held out (median / P90) before the term, 2.43 / 14.78% with it
    fit = resolve_profile("l40s", None, "vllm").kernels["moe"]
    assert fit.heldout_median_rel_err is not None and fit.heldout_p90_rel_err is not None
    assert fit.heldout_median_rel_err <= 0.05 and fit.heldout_p90_rel_err <= 0.15
