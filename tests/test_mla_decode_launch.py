"""MLA decode attention kernels' launch rules (issue 34): trtllm-gen's generation kernels on
Blackwell, FlashAttention-3's splits and its fp8-cache block keys on Hopper, SGLang's Triton
grid and split rule, the reader giving each table row its launch, and the fits pricing it.

DeepSeek-V3's widths as in ``test_mla_pricing`` (its config.json).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from aic_refit import assert_heldout, refit_family
from profile_edits import with_fit
from test_mla_pricing import DSV3, dims

from twin import precision as px
from twin.calibration import aic_mla
from twin.calibration.aic_tables import system_dir
from twin.costmodel import CostModel
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_families as mlaf
from twin.costmodel import mla_features as mf
from twin.costmodel import mla_module as mmod
from twin.costmodel.fit_upgrade import upgrade_fit
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import load_profile
from twin.hardware import get_gpu


def test_trtllm_gen_picks_its_mla_generation_launch() -> None:
    """trtllm-gen's rule (flashinfer-python 0.6.1 ``fmhaKernels.cuh``) at known shapes on
    the B200's 148 SMs."""
    # 128 heads, one sequence: the low-latency kernel (8 CTAs of 16 heads); 4,096 keys
    # split 16 ways (256 keys a CTA) and reduced in a cluster, 8,192 keys split over
    # 148 // 8 = 18 CTAs, more than a cluster reduces: through global memory
    a = mdk.trtllm_gen_launch(1, 4096, 128, 148)
    got = (a.low_latency, a.grid, a.splits, a.reduction, a.dim_split)
    assert got == (True, 8, 16, "cga", False)
    b = mdk.trtllm_gen_launch(1, 8192, 128, 148)
    assert (b.low_latency, b.splits, b.reduction) == (True, 18, "gmem")
    assert a.kv_passes(1) == 8 and a.ctas == 128  # each head CTA reads every key
    # a large batch at 128 heads: the high-throughput kernel on a pair of CTAs that
    # share the keys; no split (256 CTAs already)
    c = mdk.trtllm_gen_launch(128, 8192, 128, 148)
    assert (c.low_latency, c.two_cta, c.grid, c.splits, c.reduction) == (
        False, True, 256, 1, "none"
    )  # fmt: skip
    assert c.kv_passes(128) == 1
    # 32 heads always run the low-latency kernel: two CTAs a sequence
    d = mdk.trtllm_gen_launch(64, 65536, 32, 148)
    assert (d.low_latency, d.grid, d.splits, d.kv_passes(64)) == (True, 128, 1, 2)
    # 64 heads, 4 sequences of 65,536 keys: 256 keys a CTA leave 2,048 keys a low-latency
    # CTA: the high-throughput kernel, 37 splits, reduced in global memory with the
    # output split over two CTAs (4 x 37 x 2 = 296 CTAs > 148: not split)
    e = mdk.trtllm_gen_launch(4, 65536, 64, 148)
    assert (e.low_latency, e.grid, e.splits, e.reduction, e.dim_split) == (
        False, 4, 37, "gmem", False
    )  # fmt: skip
    f = mdk.trtllm_gen_launch(1, 65536, 64, 148)
    assert (f.splits, f.reduction, f.dim_split, f.kv_passes(1)) == (148, "gmem", False, 1)


def test_decode_launch_features_follow_the_rule() -> None:
    d = dims(32)
    tg = mdk.decode_rule("b200", "trtllm_mla", 2)
    assert tg == "trtllm_gen" == mdk.decode_rule("gb300", "default", 1)
    # vLLM's FlashInfer MLA backend runs trtllm-gen's kernel (its module tables' label)
    assert mdk.decode_rule("b300", "FLASHINFER_MLA", 1) == tg
    assert mdk.decode_rule("h200", "FLASH_ATTN_MLA", 2) is None
    # B200, 32 sequences of 4,096 keys at 32 heads: two CTAs a sequence (64), each key
    # read twice: one extra pass over the latent; split 148 // 64 = 2 ways, in a cluster
    ctas, waves, repeat, partials, critical = mdk.mla_decode_launch(tg, 32, 32 * 4096, 1, d, 2, 148)
    assert (ctas, waves, critical) == (128, 1, 0)
    assert repeat == 2 * 576 * 32 * 4096 and partials == 0
    # fp8 KV: the re-read bytes at one byte a latent element
    assert mdk.mla_decode_launch(tg, 32, 32 * 4096, 1, d, 1, 148)[2] == repeat / 2
    # a global-memory reduction writes each split's partial output: 1 x 64 x 148 x 512
    got = mdk.mla_decode_launch(tg, 1, 65536, 1, dims(64), 2, 148)
    assert got == (148, 1, 0.0, 64 * 148 * 512, 0.0)
    # an MTP step's query tokens ride with the heads: 16 heads x 2 tokens = 32 rows
    assert mdk.mla_decode_launch(tg, 8, 8 * 4096, 2, dims(16), 2, 148) == (
        mdk.mla_decode_launch(tg, 8, 8 * 4096, 1, dims(32), 2, 148)
    )
    # no rule read for the SM120 RTX PRO 6000's kernels, TensorRT-LLM's on Hopper, nor
    # FA3 over an fp8 cache
    assert mdk.decode_rule("rtx-pro-6000", "default", 2) is None
    assert mdk.decode_rule("h200", "default", 2) is None
    assert mdk.decode_rule("h200", "flash_attention", 1) is None
    assert mdk.mla_decode_launch(None, 32, 32 * 4096, 1, d, 2, 132) == mdk.NO_LAUNCH


def test_sglang_triton_decode_launch_follows_its_grid_and_split_rule() -> None:
    """SGLang 0.5.14's Triton MLA decode (``mla_decode_kernels.TRITON_DECODE_BLOCK_H``) on the
    L40S's 142 SMs: MAX_KV_SPLITS the SMs' power of two (256); 32 sequences of 32,768 keys
    at 128 heads are 8 blocks of 16 heads; ``get_num_kv_splits_triton`` gives
    min(cdiv(int(142 x log2(32768 / 64)), 32 x 8), 256) = 5 splits of 6,554 keys."""
    tri = mdk.decode_rule("l40s", "triton", 2)
    assert tri == "triton" == mdk.decode_rule("rtx-pro-6000", "triton", 1)
    assert mdk.triton_max_kv_splits(142) == 256 and mdk.triton_max_kv_splits(4) == 8
    assert mdk.triton_num_kv_splits(32, 32768, 8, 142) == 5
    got = mdk.mla_decode_launch(tri, 32, 32 * 32768, 1, dims(128), 2, 142)
    ctas, waves, repeat, partials, critical = got
    assert ctas == 32 * 8 * 256  # the whole grid, empty split programs included
    assert waves == -(-(32 * 8 * 5) // 142) == 10  # the programs with keys
    assert repeat == 2 * 576 * 32 * 32768 * 7  # each further block reads the keys again
    assert partials == 32 * 128 * 256  # the reduction's programs x the splits each loops
    assert critical == 6554 * 10
    # at 16 heads one block: no re-read, and the batch's one block takes 40 splits
    assert mdk.mla_decode_launch(tri, 32, 32 * 32768, 1, dims(16), 2, 142)[2] == 0
    assert mdk.triton_num_kv_splits(32, 32768, 1, 142) == 40
    # a short context is one split whatever the batch (log2 floored at 1)
    assert mdk.triton_num_kv_splits(256, 2, 1, 142) == 1


def test_a_triton_decode_fit_of_the_older_form_prices_as_before() -> None:
    """A ``roofline+tiles+seq_keys`` decode fit of a Triton table (as the L40S and RTX PRO
    6000 SGLang profiles shipped before session 28) reads the Triton rule's launch
    features with zero coefficients: the same price as with no rule."""
    fit = KernelFit(
        model="roofline+tiles+seq_keys",
        params={"t0_s": 1.4e-5, "eff_flops": 0.1, "eff_bytes": 0.8, "p": 20.0}
        | {"c_tiles": 6e-7, "c_seq_keys": 2e-17},
    )
    upgrade_fit(fit, fm.get_formula("mla_decode"))
    peaks = get_gpu("l40s").peaks()
    price = lat.compile_fast("mla_decode", fit.params, peaks)
    d = dims(128)
    flops, nbytes, tiles, seq = mf.mla_decode_sums(64, 64 * 8192, d, 2, 2)
    launch = mdk.mla_decode_launch("triton", 64, 64 * 8192, 1, d, 2, 142)
    assert launch != mdk.NO_LAUNCH
    with_rule = price(*mdk.decode_kernel_features((flops, nbytes, tiles, seq), 0.0, launch))
    assert with_rule == price(
        *mdk.decode_kernel_features((flops, nbytes, tiles, seq), 0.0, mdk.NO_LAUNCH)
    )


@pytest.mark.parametrize("gpu", ["l40s", "rtx-pro-6000"])
def test_shipped_triton_decode_fits_read_their_launch(gpu: str) -> None:
    """The L40S and RTX PRO 6000 SGLang ``mla_decode`` fits (regenerated with the Triton
    rule in session 28) price the grid's programs and carry the held-out errors they were
    fitted with: L40S 14.0 / 52.7% -> 7.2 / 29.5%, RTX PRO 6000 13.3 / 39.3% -> 7.4 / 26.5%
    (median / P90). A regeneration that lost the rule fails here."""
    fit = load_profile(gpu, "sglang").kernels["mla_decode"]
    assert fit.provenance["kernel_source"] == "triton"
    assert fit.params["c_launch_ctas"] > 1e-12
    assert_heldout(fit, 0.08, 0.30)


def test_fa3_splits_a_small_batch_to_fill_the_sms() -> None:
    """FlashAttention-3's ``num_splits_heuristic`` (Dao-AILab/flash-attention
    ``hopper/heuristics.h``) on the H200's 132 SMs, 64 x 64 tiles."""
    # 132 m-blocks fill the SMs: no split; <= 4 key blocks: no split
    assert mdk.fa3_num_splits(132, 132, 1024, 1, 0) == 1
    assert mdk.fa3_num_splits(1, 132, 4, 1, 0) == 1
    # one m-block, 1,024 key blocks: at most 128 splits (0.97 of a wave); the fewest at
    # >= 85% of that: 109 (0.826)
    assert mdk.fa3_num_splits(1, 132, 1024, 1, 0) == 109
    # 40 m-blocks: 33 splits make 10 whole waves; 3 splits (120 CTAs, 0.91) the fewest
    # at >= 85% of that, 2 is 0.61
    assert mdk.fa3_num_splits(40, 132, 1024, 1, 0) == 3
    fa3 = mdk.decode_rule("h200", "flash_attention", 2)
    assert fa3 == "fa3"
    # 128 heads, 4 sequences of 65,536 keys: two 64-row blocks a sequence (8 m-blocks),
    # 15 splits (120 CTAs); the second block reads every key again; the combine reduces
    # 15 partials of each head's 512-wide output; a split's keys: ceil(1024 / 15) x 64
    assert mdk.fa3_num_splits(8, 132, 1024, 2, 65536 * 1152) == 15
    got = mdk.mla_decode_launch(fa3, 4, 4 * 65536, 1, dims(128), 2, 132)
    assert got == (120, 1, 1152.0 * 4 * 65536, 4 * 128 * 15 * 512, 69 * 64)


def test_the_reader_gives_blackwell_decode_rows_their_launch(tmp_path: Path) -> None:
    base = {"framework": "SGLang", "version": "0.5.14", "device": "NVIDIA B200"}
    rows = [
        {**base, "mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "num_heads": 32,
         "batch_size": 32, "isl": 1, "tp_size": 4, "step": 4095, "latency": 0.05,
         "kernel_source": "trtllm_mla"}
    ]  # fmt: skip
    for system_name, source in (("b200_sxm", "trtllm_mla"), ("h200_sxm", "flash_attention")):
        folder = tmp_path / system_name / "mla" / "sglang" / "0.5.14"
        folder.mkdir(parents=True)
        mine = [{**r, "kernel_source": source} for r in rows]
        pq.write_table(pa.Table.from_pylist(mine), folder / "generation_mla_perf.parquet")
    (fam,) = aic_mla.kernel_rows(tmp_path / "b200_sxm", "sglang")
    row = fam.rows[0]
    want = mdk.mla_decode_launch("trtllm_gen", 32, 32 * 4096, 1, aic_mla.dims(32), 2, 148)
    got = tuple(row[x] for x in (*mlaf.MLA_DECODE_LAUNCH, *mlaf.MLA_DECODE_SERIAL))
    assert got == want and want[2] > 0
    # the same row on an H200 timing FA3: its rule; another kernel source: none
    (fam,) = aic_mla.kernel_rows(tmp_path / "h200_sxm", "sglang")
    got = tuple(fam.rows[0][x] for x in (*mlaf.MLA_DECODE_LAUNCH, *mlaf.MLA_DECODE_SERIAL))
    assert got == mdk.mla_decode_launch("fa3", 32, 32 * 4096, 1, aic_mla.dims(32), 2, 132)
    assert got[-1] > 0


def test_the_reader_gives_decode_module_rows_their_attention_launch(tmp_path: Path) -> None:
    """A decode-module row carries its attention kernel's launch (the ``mla_decode`` rule of
    the row's ``kernel_source``): vLLM's FLASHINFER_MLA on a B200 is trtllm-gen's; its
    Hopper FLASH_ATTN_MLA rows read none (zeros)."""
    row = {"framework": "vLLM", "version": "0.24.0", "mla_dtype": "bfloat16",
           "kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16", "num_heads": 32,
           "batch_size": 32, "isl": 1, "step": 4097, "latency": 0.2,
           "model": "deepseek-ai/DeepSeek-V3"}  # fmt: skip
    for system_name, source in (("b200_sxm", "FLASHINFER_MLA"), ("h200_sxm", "FLASH_ATTN_MLA")):
        folder = tmp_path / system_name / "mla" / "vllm" / "0.24.0"
        folder.mkdir(parents=True)
        table = pa.Table.from_pylist([{**row, "kernel_source": source}])
        pq.write_table(table, folder / "mla_generation_module_perf.parquet")
    names = (*mlaf.MLA_DECODE_LAUNCH, *mlaf.MLA_DECODE_SERIAL)
    (fam,) = aic_mla.module_rows(tmp_path / "b200_sxm", "vllm")
    assert fam.kernel == "mla_module_decode"
    want = mdk.mla_decode_launch("trtllm_gen", 32, 32 * 4097, 1, aic_mla.dims(32), 2, 148)
    assert tuple(fam.rows[0][x] for x in names) == want and want[2] > 0
    module = mmod.mla_module_decode_sums(aic_mla.dims(32), 32, 32 * 4097, 2, 2, 2, 2)
    assert (fam.rows[0]["flops"], fam.rows[0]["bytes"]) == module[:2]
    (fam,) = aic_mla.module_rows(tmp_path / "h200_sxm", "vllm")
    assert tuple(fam.rows[0][x] for x in names) == mdk.NO_LAUNCH


def test_an_old_decode_fit_reads_with_zero_launch_terms() -> None:
    """A ``roofline+tiles+seq_keys`` decode fit (as the RTX PRO 6000's fp8-cache TensorRT-LLM
    fit shipped until session 37's refit) loads with zero launch and L2 coefficients: the
    same prices as before those features."""
    fit = KernelFit(
        model="roofline+tiles+seq_keys",
        params={"t0_s": 1e-5, "eff_flops": 0.1, "eff_bytes": 0.8, "p": 4.0}
        | {"c_tiles": 1e-9, "c_seq_keys": 1e-12},
    )
    upgrade_fit(fit, fm.get_formula("mla_decode_fp8kv"))
    assert fit.model == fm.get_formula("mla_decode").model_name
    zero = (*mlaf.MLA_DECODE_LAUNCH, *mlaf.MLA_KERNEL_REPLAY, *mlaf.MLA_DECODE_SERIAL)
    assert all(fit.params[f"c_{x}"] == 0 for x in zero)


def test_the_decode_kernel_prices_its_launch() -> None:
    """B200 SGLang, DeepSeek-V3 on 4 GPUs (32 heads: trtllm-gen's low-latency kernel, two
    CTAs a sequence): the ``mla_decode`` fit's launch coefficients price the step; zero
    ``c_kv_repeat`` and the step's MLA decode drops by exactly ``c_kv_repeat x`` the
    re-read bytes."""
    prof = load_profile("b200", "sglang")
    cm = CostModel(DSV3, prof, tp=4, ep=4)
    key = cm.priced.keys["mla_decode"]
    fit = prof.kernels[key]
    assert cm.mla_modes[1] == "kernels" and fit.params["c_kv_repeat"] > 0
    kv_e = cm.priced.mla_kv_elem_bytes[1]
    parts = dict((k, v) for _, k, v in cm._mla_decode(32, 32 * 4097))
    prof0 = with_fit(prof, key, c_kv_repeat=0.0)
    cm0 = CostModel(DSV3, prof0, tp=4, ep=4)
    parts0 = dict((k, v) for _, k, v in cm0._mla_decode(32, 32 * 4097))
    repeat = mdk.mla_decode_launch("trtllm_gen", 32, 32 * 4097, 1, dims(32), kv_e, 148)[2]
    assert repeat == kv_e * 576 * 32 * 4097
    assert parts["mla_decode"] - parts0["mla_decode"] == pytest.approx(
        fit.params["c_kv_repeat"] * repeat, rel=1e-9
    )


def test_the_decode_module_prices_its_attention_launch() -> None:
    """B200 TensorRT-LLM, DeepSeek-V3 on 4 GPUs (32 heads: trtllm-gen's low-latency
    kernel, two CTAs a sequence, each reading every key): the decode-module fit's launch
    terms price the step: a ``c_kv_repeat`` adds exactly ``c_kv_repeat x`` the re-read bytes
    at the stream the fit reads (the coefficient set here: the shipped fits read the launch
    with zero coefficients until regenerated)."""
    shipped = load_profile("b200", "trtllm")
    key = CostModel(DSV3, shipped, tp=4, ep=4).priced.keys["mla_module_decode"]
    fit = shipped.kernels[key]
    assert fit.provenance["kernel_source"] == "default"
    prof = with_fit(shipped, key, c_kv_repeat=8e-14)
    fit = prof.kernels[key]
    cm = CostModel(DSV3, prof, tp=4, ep=4)
    assert cm.mla_modes == ("module", "module")
    parts = dict((k, v) for _, k, v in cm._mla_decode(32, 32 * 4097))
    cm0 = CostModel(DSV3, with_fit(prof, key, c_kv_repeat=0.0), tp=4, ep=4)
    parts0 = dict((k, v) for _, k, v in cm0._mla_decode(32, 32 * 4097))
    stream = cm.priced.mla_kv_elem_bytes[1] * cm.priced.mla_module_kv_share
    repeat = mdk.mla_decode_launch("trtllm_gen", 32, 32 * 4097, 1, dims(32), stream, 148)[2]
    assert repeat == stream * 576 * 32 * 4097
    assert parts["mla_module"] - parts0["mla_module"] == pytest.approx(
        fit.params["c_kv_repeat"] * repeat, rel=1e-9
    )


def test_hopper_fa3_over_an_fp8_cache_streams_its_keys_per_128_row_block() -> None:
    """The decode kernel's query-row block is read only for Hopper SGLang's
    ``flash_attention`` over an fp8 cache (128 rows: its tables are flat from 1 to 128
    heads); ``block_keys`` is the keys times the blocks, zero without a block."""
    assert mdk.decode_block_rows("h100", "flash_attention", 1) == mdk.FA3_FP8_BLOCK_ROWS == 128
    assert mdk.decode_block_rows("h200", "flash_attention", 1) == 128
    assert mdk.decode_block_rows("h200", "flash_attention", 2) is None  # bf16: FA3's rule
    assert mdk.decode_block_rows("h200", "default", 1) is None
    assert mdk.decode_block_rows("b200", "flash_attention", 1) is None
    assert mdk.decode_block_keys(128, 64 * 8192, 16) == 64 * 8192
    assert mdk.decode_block_keys(128, 64 * 8192, 128) == 64 * 8192
    assert mdk.decode_block_keys(128, 64 * 8192, 256) == 2 * 64 * 8192
    assert mdk.decode_block_keys(None, 64 * 8192, 128) == 0
    assert "block_keys" in fm.get_formula("mla_decode_fp8kv").extras


def decode_families(
    tmp_path: Path, engine: str, framework: str, version: str, source: str, gpu: str = "h200"
) -> dict:
    """The MLA families ``aic_mla.kernel_rows`` reads from one decode shape on ``gpu`` (16
    heads, 64 sequences at an 8,192-key context) collected over a bf16 and an fp8 cache, in
    a generation table written under ``tmp_path`` as ``engine``'s ``version`` labels it."""
    base = {
        "framework": framework,
        "version": version,
        "device": f"NVIDIA {gpu.upper()}",
        "mla_dtype": "bfloat16",
        "num_heads": 16,
        "batch_size": 64,
        "isl": 1,
        "tp_size": 8,
        "step": 8191,
        "latency": 1.0,
        "kernel_source": source,
    }
    rows = [{**base, "kv_cache_dtype": kv} for kv in ("bfloat16", "fp8")]  # fmt: skip
    folder = tmp_path / f"{gpu}_sxm" / "mla" / engine / version
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "generation_mla_perf.parquet")
    return {f.kernel: f for f in aic_mla.kernel_rows(tmp_path / f"{gpu}_sxm", engine)}


def test_the_reader_gives_hopper_fp8_cache_rows_their_block_keys(tmp_path: Path) -> None:
    fams = decode_families(tmp_path, "sglang", "SGLang", "0.5.14", "flash_attention")
    assert fams["mla_decode_fp8kv"].rows[0]["block_keys"] == 64 * 8192  # one 128-row block
    assert fams["mla_decode"].rows[0]["block_keys"] == 0  # bf16: FA3's split rule instead


def test_the_decode_kernel_prices_its_block_keys() -> None:
    """H200 SGLang over an fp8 cache, DeepSeek-V3 on 8 GPUs (16 heads, one 128-row block):
    the shipped fit's ``c_block_keys`` (regenerated in session 28) adds exactly
    ``c_block_keys x`` the step's keys on the compute side: set to zero, the step is
    cheaper (the compute side made dominant here so the smooth maximum passes it on)."""
    fp8 = px.with_precision(DSV3, None, "fp8")
    shipped = load_profile("h200", "sglang")
    cm = CostModel(fp8, shipped, tp=8, ep=8)
    key = cm.priced.keys["mla_decode"]
    fit = shipped.kernels[key]
    assert key == "mla_decode_fp8kv" and fit.params["c_block_keys"] > 0
    assert cm._mla_block == 128

    def price(c: float) -> float:
        params = {**fit.params, "c_block_keys": c, "eff_flops": 4.0, "p": 20.0}
        fit_c = dataclasses.replace(fit, params=params)
        prof = dataclasses.replace(shipped, kernels={**shipped.kernels, key: fit_c})
        parts = CostModel(fp8, prof, tp=8, ep=8)._mla_decode(64, 64 * 8192)
        return dict((k, v) for _, k, v in parts)["mla_decode"]

    assert price(fit.params["c_block_keys"]) > price(0.0)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_hopper_sglang_fp8_cache_decode_fits_ship_their_block_keys(gpu: str) -> None:
    """The shipped H100 / H200 SGLang ``mla_decode_fp8kv`` fits (regenerated with
    ``--refit mla_decode_fp8kv`` in session 28) carry a positive ``c_block_keys`` and the
    held-out errors they were fitted with meet issue 34's target (median <= 5%, P90 <=
    15%; without the block keys 5.3 / 85.5% on H100, 5.1 / 45.9% on H200). A regeneration
    that lost the feature fails here."""
    fit = load_profile(gpu, "sglang").kernels["mla_decode_fp8kv"]
    assert "block_keys" in fit.model.split("+")
    assert fit.params["c_block_keys"] > 1e-12  # seconds a key a 128-row block: ~1.9 ns
    assert_heldout(fit, 0.05, 0.15)


def _refit_sglang_decode(gpu: str, kernel: str, feature: str) -> KernelFit:
    """NVIDIA's SGLang ``kernel`` table of ``gpu`` refitted (its impossible rows set
    aside), after checking every row carries ``feature``; skipped without the extra."""
    pytest.importorskip("aiconfigurator_core")
    peaks = get_gpu(gpu).peaks()
    rows, fit = refit_family(aic_mla.kernel_rows(system_dir(gpu), "sglang"), kernel, peaks)
    assert {r[feature] > 0 for r in rows} == {True}
    return fit


@pytest.mark.slow
def test_h200_sglang_fp8_cache_decode_meets_the_kernel_target() -> None:
    """SGLang 0.5.14's H200 decode table over an fp8 cache (NVIDIA's): with the keys its
    128-row blocks stream on the compute side the held-out median is within 5% and the P90
    within 15% (without: 5.1% / 45.9%, the 128-head batches of 512-1,024 sequences at short
    contexts priced 4-5x their time)."""
    fit = _refit_sglang_decode("h200", "mla_decode_fp8kv", "block_keys")
    assert_heldout(fit, 0.05, 0.15)


@pytest.mark.slow
def test_l40s_sglang_triton_decode_fit_reads_the_grid() -> None:
    """SGLang 0.5.14's L40S decode table (NVIDIA's, ``kernel_source`` triton): with the
    Triton rule's launch (the grid's programs, empty splits included; the re-read keys; the
    reduction's loop) the held-out median is within 8% and the P90 within 30% (without:
    14.0% / 52.7%, the short contexts' time growing with batch x head blocks unpriced).
    Issue 34's target (5% / 15%) is still missed: one head runs another kernel
    (``decode_attention_fwd_normal``), 12-25% under."""
    fit = _refit_sglang_decode("l40s", "mla_decode", "launch_ctas")
    assert_heldout(fit, 0.08, 0.30)
