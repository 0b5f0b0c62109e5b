"""SGLang's Triton fused-MoE token tile on H200 fp8 experts (issue 31, helper ``sgl-tile31``):
the BLOCK_SIZE_M the engine's config lookup resolves (``moe_features.sglang_triton_block_m``), read
by the ``moe_perf`` reader at the collector's ``E`` and by a serving step at the served one
(``E=257`` where DeepSeek's shared expert is fused)."""

from __future__ import annotations

import pytest
from profile_edits import moe_decode_s, with_fit

from twin.calibration.aic_moe import moe_row
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.profile_store import resolve_profile
from twin.costmodel.routing import routing_for
from twin.precision import WEIGHT_FORMATS
from twin.presets import get_model

H200, SRC = moe_ft.SGLANG_H200_DEVICE, moe_ft.SGLANG_TRITON_SOURCE


def tile(
    tokens: float, experts: float, width: int, device: str = H200, mode: str = "fp8_block"
) -> int:
    return moe_ft.sglang_triton_block_m(SRC, device, mode, tokens, experts, width)


def test_the_collectors_e256_file_and_the_served_e257_file_resolve_different_tiles() -> None:
    # triton_3_1_0 E=256,N=256 (the collector's): 16 at 1-2 and 16 tokens, 64 at 4-8 and 24-2048
    assert [tile(t, 256, 256) for t in (1, 4, 16, 24, 32, 64, 256)] == [16, 64, 16, 64, 64, 64, 64]
    # triton_3_5_1 E=257,N=256 (the served, shared expert fused): 16 to 256, 32 at 512, 64 at 1024
    assert [tile(t, 257, 256) for t in (1, 4, 16, 32, 64, 256, 512, 1024, 8192)] == [
        16,
        16,
        16,
        16,
        16,
        16,
        32,
        64,
        64,
    ]
    # the nearest key: 20 tokens sit between 16 and 24 and take the first (16)
    assert tile(20, 256, 256) == 16 and tile(21, 256, 256) == 64


def test_without_a_file_the_default_config_decides() -> None:
    # get_default_config: block fp8 BLOCK_SIZE_M 64; per-tensor (a width not a multiple of
    # 128) 64 while the tokens are at most E, 128 above
    assert tile(32, 256, 128) == 64 and tile(4, 64, 1024) == 64
    assert tile(64, 256, 96) == 64 and tile(300, 256, 96) == 128
    # another GPU's or format's files were not read: no tile
    assert tile(32, 256, 256, device="NVIDIA H100") == 0
    assert tile(32, 256, 256, mode="bf16") == 0
    assert moe_ft.sglang_triton_block_m("vllm_fused_moe", H200, "fp8_block", 32, 256, 256) == 0


DEEPSEEK_TP8 = {
    "num_tokens": 32,
    "hidden_size": 7168,
    "inter_size": 2048,
    "topk": 8,
    "num_experts": 256,
    "moe_tp_size": 8,
    "moe_ep_size": 1,
    "kernel_source": SRC,
    "moe_dtype": "fp8_block",
    "device": H200,
}


def test_the_reader_pads_deepseeks_tp8_rows_to_the_collectors_64_row_tile() -> None:
    fp8 = WEIGHT_FORMATS["fp8-block"]
    row = moe_row(DEEPSEEK_TP8, fp8, "moe_fp8_block", 0.5)
    # 256 routed rows over min(256, 256) experts, one row each, in a 64-row tile: 63 padded
    # rows an expert through both GEMMs (7,168 x (2 x 256 + 256) elements)
    assert row["pad_flops"] == 2.0 * 256 * 63 * 7168 * 3 * 256
    assert row["restream_weights"] == 0.0
    h100 = moe_row({**DEEPSEEK_TP8, "device": "NVIDIA H100"}, fp8, "moe_fp8_block", 0.5)
    assert h100["pad_flops"] == 0.0


def test_a_served_deepseek_step_pads_to_the_e257_files_16_row_tile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    prof = resolve_profile("h200", None, "sglang")
    model = get_model("deepseek-r1")
    seen: list[tuple[float, float, int]] = []
    extras = moe_ft.moe_tile_extras

    def spy(rows: float, active: float, tile: int, *rest: int) -> tuple[float, float]:
        seen.append((rows, active, tile))
        return extras(rows, active, tile, *rest)

    monkeypatch.setattr(moe_ft, "moe_tile_extras", spy)

    def moe_s(c_pad: float, device: str = H200, tokens: int = 32) -> float:
        p = with_fit(prof, "moe_fp8_block", {"device": device}, c_pad_flops=c_pad)
        return moe_decode_s(model, p, 8, tokens)

    assert moe_s(1e-15) > moe_s(0.0)
    # the rank's rows and experts as the step routes them, plus the fused shared expert
    load = routing_for(model).rank_load(32, 256, 8, 1)
    assert seen[-1] == (load.rows + 32, load.active + 1.0, 16)
    moe_s(0.0, tokens=600)  # E=257's file: 32 rows at the 512 key
    assert seen[-1][2] == 32
    assert moe_s(1e-15, "NVIDIA H100") == moe_s(0.0, "NVIDIA H100")
    assert seen[-1][2] == 0


def test_the_h200_sglang_fp8_block_fits_price_the_tile_and_meet_the_kernel_target() -> None:
    # regenerated with the tile rule (sgl-tile31): both releases' tables (0.5.14 the default,
    # 0.5.10 the one SGLang 0.5.9 rows price), held out <= 5% median, <= 15% P90
    prof = resolve_profile("h200", None, "sglang")
    default = prof.kernels["moe_fp8_block"]
    fits = [default, *prof.table_releases["moe_fp8_block"].fits.values()]
    assert len(fits) == 2
    for fit in fits:
        assert "pad_flops" in fit.model and fit.params["c_pad_flops"] > 1e-16
        assert fit.provenance["device"] == H200
        assert fit.heldout_median_rel_err is not None and fit.heldout_p90_rel_err is not None
        assert fit.heldout_median_rel_err <= 0.05 and fit.heldout_p90_rel_err <= 0.15
