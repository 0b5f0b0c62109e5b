"""TensorRT-LLM's generation rope kernel before trtllm-gen on Blackwell: NVIDIA's
TensorRT-LLM decode tables time ``mla_rope_generation`` with the attention kernel, and
its grid (a block per 32 query tokens and grid row: the heads, 9 more, and 8 a head over
an fp8 cache) is the ``tiles`` feature of those tables' fits
(``mla_decode_kernels.decode_tile_rule`` ``"rope_grid"``; issue 34, helper ``rope32``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from aic_refit import assert_heldout, refit_family
from test_mla_decode_launch import decode_families

from twin.calibration import aic_mla
from twin.calibration.aic_tables import system_dir
from twin.costmodel import CostModel
from twin.costmodel import latency as lat
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_features as mf
from twin.costmodel.profile_store import load_profile
from twin.hardware import get_gpu
from twin.precision import with_precision
from twin.presets import get_model

BLACKWELL = ("b200", "b300", "gb200", "gb300")


@pytest.mark.parametrize("kv_e", [2, 1])
@pytest.mark.parametrize("gpu", BLACKWELL)
def test_rope_grid_rule_reads_tensorrt_llm_tables_only(gpu: str, kv_e: int) -> None:
    assert mdk.decode_tile_rule(gpu, "default", kv_e) == "rope_grid"
    # SGLang's and vLLM's trtllm-gen backends do not run TensorRT-LLM's rope kernel (SGLang's
    # prepares its query rows itself: tests/test_mla_sglang_query_rows.py)
    assert mdk.decode_tile_rule(gpu, "trtllm_mla", kv_e) == "query_rows"
    assert mdk.decode_tile_rule(gpu, "FLASHINFER_MLA", kv_e) is None
    # Hopper's FlashMLA keeps the query rows; FMHA v2 GPUs keep the 64-row blocks
    assert mdk.decode_tile_rule("h200", "default", kv_e) == "query_rows"
    assert mdk.decode_tile_rule("l40s", "default", kv_e) is None


def test_rope_grid_is_the_kernels_launch() -> None:
    """``invokeMLARopeGeneration``: ``divUp(tokens, 32)`` x (heads + 9, + 8 a head over an
    fp8 cache): 1,161 rows at 128 heads over an fp8 cache, as TensorRT-LLM's own comment on
    that launch counts them; flat in the tokens up to 32."""
    assert mdk.trtllm_rope_grid(1, 128, 1) == 1161
    assert mdk.trtllm_rope_grid(1, 128, 2) == 137
    assert mdk.trtllm_rope_grid(32, 16, 1) == mdk.trtllm_rope_grid(1, 16, 1) == 16 + 9 + 128
    assert mdk.trtllm_rope_grid(33, 16, 2) == 2 * 25
    assert mdk.decode_tiles("rope_grid", 3.0, 64, 16, 1) == 2 * (16 + 9 + 128)
    assert mdk.decode_tiles(None, 3.0, 64, 16, 1) == 3.0


def test_the_reader_gives_blackwell_trtllm_rows_the_rope_grid(tmp_path: Path) -> None:
    """One B200 TensorRT-LLM decode shape (16 heads, 64 sequences at 8,192 keys) over a
    bf16 and an fp8 cache."""
    fams = decode_families(tmp_path, "trtllm", "TRTLLM", "1.3.0rc20", "default", "b200")
    assert fams["mla_decode_fp8kv"].rows[0]["tiles"] == 2 * (16 + 9 + 8 * 16)
    assert fams["mla_decode"].rows[0]["tiles"] == 2 * (16 + 9)
    # the launch features are trtllm-gen's, as before
    assert fams["mla_decode_fp8kv"].rows[0]["launch_ctas"] > 0


def test_b200_trtllm_kernels_pricing_reads_the_rope_grid() -> None:
    """Without its module fits the B200 TensorRT-LLM profile prices an fp8 cache's decode
    from ``mla_decode_fp8kv`` at the rope grid its table was read with; the fit's
    ``c_tiles`` prices it (zeroed, the step is cheaper)."""
    shipped = load_profile("b200", "trtllm")
    kernels = {k: v for k, v in shipped.kernels.items() if not k.startswith("mla_module")}
    dsv3 = with_precision(get_model("deepseek-v3"), None, "fp8")
    cm = CostModel(dsv3, dataclasses.replace(shipped, kernels=kernels), tp=8)
    assert cm.mla_modes[1] == "kernels"
    key = cm.priced.keys["mla_decode"]
    assert key == "mla_decode_fp8kv"
    d, e, kv_e = cm.mla_dims, cm.elem_bytes, cm.priced.mla_kv_elem_bytes[1]
    assert kv_e == 1
    sms = get_gpu("b200").sm_count or 0
    batch, keys = 256, 256 * 2000
    params = cm.profile.kernels[key].params
    fit = lat.compile_fast(key, params, cm.profile.peaks)
    flops, nbytes, _, seq = mf.mla_absorbed_sums(batch, batch, keys, keys, 1, d, e, kv_e)
    launch = mdk.mla_decode_launch("trtllm_gen", batch, keys, 1, d, kv_e, sms)
    grid = mdk.trtllm_rope_grid(batch, d.heads, kv_e)
    want = fit(*mdk.decode_kernel_features((flops, nbytes, grid, seq), 0.0, launch))
    parts = {k: v for _, k, v in cm._mla_decode(batch, keys)}
    assert parts["mla_decode"] == want
    no_tiles = lat.compile_fast(key, {**params, "c_tiles": 0.0}, cm.profile.peaks)
    assert no_tiles(*mdk.decode_kernel_features((flops, nbytes, grid, seq), 0.0, launch)) < want


@pytest.mark.parametrize("gpu", BLACKWELL)
def test_shipped_blackwell_trtllm_decode_fits_price_the_rope_grid(gpu: str) -> None:
    """The B200 / B300 / GB200 / GB300 TensorRT-LLM ``mla_decode_fp8kv`` fits (regenerated
    in session 32 with the rope grid) give its blocks a time: at 256 sequences and 128
    heads over an fp8 cache (9,288 blocks) at least 5 us."""
    fit = load_profile(gpu, "trtllm").kernels["mla_decode_fp8kv"]
    assert fit.params["c_tiles"] * mdk.trtllm_rope_grid(256, 128, 1) > 5e-6


@pytest.mark.slow
def test_b200_trtllm_fp8_decode_refit_reads_the_rope_grid() -> None:
    """TensorRT-LLM 1.3.0rc20's B200 decode table over an fp8 cache (NVIDIA's): with the
    rope grid the fit rows' errors fall (median / P90 6.4 / 20.0% without) and the held-out
    ones meet issue 34's target (6.2 / 15.8% without)."""
    pytest.importorskip("aiconfigurator_core")
    peaks = load_profile("b200", "trtllm").peaks
    families = aic_mla.kernel_rows(system_dir("b200"), "trtllm")
    _, fit = refit_family(families, "mla_decode_fp8kv", peaks)
    assert_heldout(fit, 0.05, 0.15)
