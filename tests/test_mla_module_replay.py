"""The MLA decode module's table rows (issue 34, helper ``mla-module``): the working set the
collectors' CUDA-graph replays keep in L2, and vLLM's ``TRITON_MLA`` split rule.

DeepSeek-V3's widths (``aic_mla.DSV3``): the module's bf16 weights are ~30.3 MB of q_a / kv_a
plus ~2.69 MB a head (q_b, o_proj, W_UK, W_UV).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from twin.calibration import aic_mla
from twin.costmodel import CostModel
from twin.costmodel import formulas as fm
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_families as mlaf
from twin.costmodel import mla_module as mmod
from twin.costmodel.features import REPLAY_L2_SHARE
from twin.costmodel.fit_upgrade import upgrade_fit
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import load_profile
from twin.hardware import get_gpu
from twin.presets import get_model

L40S_L2 = get_gpu("l40s").l2_bytes


def _module(heads: int, batch: int = 1, keys: int = 2) -> mmod.ModuleSums:
    return mmod.mla_module_decode_sums(aic_mla.dims(heads), batch, batch * keys, 2, 2, 2, 2)


def test_a_decode_module_that_fits_in_l2_reads_its_bytes_from_l2() -> None:
    """L40S (96 MB L2), one sequence, 2 keys: the 16-head module's working set (~73 MB)
    fits in ``REPLAY_L2_SHARE`` of it, so every byte moves to ``l2_bytes`` and its HBM bytes
    and KV stream are zero; the 32-head one (~116 MB) does not, and is unchanged; a
    serving step (no L2) never is."""
    small, big = _module(16), _module(32)
    assert small[1] + small[4] <= REPLAY_L2_SHARE * L40S_L2 < big[1] + big[4]
    kept, l2 = mmod.module_replay_l2(small, L40S_L2)
    assert l2 == small[1] + small[4] and kept[1] == 0 and kept[4] == 0
    assert kept[0] == small[0] and kept[5] == small[5]
    assert mmod.module_replay_l2(big, L40S_L2) == (big, 0.0)
    assert mmod.module_replay_l2(small, None) == (small, 0.0)


def test_the_decode_module_formula_reads_l2_bytes_on_the_compute_side() -> None:
    """Every decode-module family reads ``l2_bytes`` after its launch's compute-side
    features and before the serial ones (``module_decode_features``' order); the prefill
    modules do not."""
    for key in fm.MLA_VARIANTS:
        f = fm.get_formula(key)
        if key.startswith("mla_module_decode"):
            assert f.extras[-1] == "l2_bytes" and "l2_bytes" not in f.serial
            args = mmod.module_decode_features(_module(16), mdk.NO_LAUNCH, 7.0)
            assert len(args) == 2 + len(f.features)
            assert args[2 + f.features.index("l2_bytes")] == 7.0
        elif key.startswith("mla_module_prefill"):
            assert "l2_bytes" not in f.features


def test_vllms_triton_mla_splits_by_the_longest_sequence() -> None:
    """vLLM 0.24.0 ``TritonMLAImpl.forward_mqa``: next power of two of ``max_seq_len //
    512`` splits, at least one, at most 2 x SMs; the module reads it for ``TRITON_MLA``
    tables only."""
    assert [mdk.vllm_triton_num_kv_splits(k, 142) for k in (2, 1023, 1024, 1536, 131072)] == [
        1,
        1,
        2,
        4,
        256,
    ]
    assert mdk.vllm_triton_num_kv_splits(1 << 20, 10) == 20
    assert mdk.module_decode_rule("l40s", "TRITON_MLA", 2) == "vllm_triton"
    assert mdk.module_decode_rule("b200", "FLASHINFER_MLA", 2) == "trtllm_gen"
    assert mdk.module_decode_rule("l40s", "triton", 2) == mdk.decode_rule("l40s", "triton", 2)


def test_vllms_triton_mla_launch_is_its_grid() -> None:
    """4 sequences of 4,096 keys at 32 heads on 142 SMs: 8 splits, 2 blocks of 16 heads,
    64 programs in one wave; the second block re-reads every latent row; the reduction
    reads 8 partials of 512 a head; a split's 512 keys on the critical path. One head:
    one block, no re-read."""
    d = aic_mla.dims(32)
    ctas, waves, repeat, partials, critical = mdk.mla_decode_launch(
        "vllm_triton", 4, 4 * 4096, 1, d, 2, 142
    )
    assert (ctas, waves, critical) == (64.0, 1.0, 512.0)
    assert repeat == 2 * 576 * 4 * 4096 and partials == 4 * 32 * 8 * 512
    one = mdk.mla_decode_launch("vllm_triton", 4, 4 * 4096, 1, aic_mla.dims(1), 2, 142)
    assert one[0] == 32.0 and one[2] == 0.0
    # SGLang's Triton rule on the same inputs is another launch (its grid, its partials)
    sglang = mdk.mla_decode_launch("triton", 4, 4 * 4096, 1, d, 2, 142)
    assert sglang != (ctas, waves, repeat, partials, critical) and sglang[2] == repeat


def _read_one_l40s_vllm_row(tmp_path: Path, row: dict[str, Any], table: str) -> Any:
    """The module family ``aic_mla.module_rows`` reads from an L40S vLLM 0.24.0 folder
    holding ``row`` alone in ``table``."""
    folder = tmp_path / "l40s" / "mla" / "vllm" / "0.24.0"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row]), folder / table)
    (fam,) = aic_mla.module_rows(tmp_path / "l40s", "vllm")
    return fam


def test_the_reader_gives_triton_mla_module_rows_their_launch_and_l2(tmp_path) -> None:
    """An L40S vLLM ``TRITON_MLA`` decode-module row: its launch is vLLM's Triton rule on
    L40S's SMs, and at 16 heads and 2 keys its bytes are read from L2."""
    row = {"batch_size": 1, "isl": 1, "step": 2, "num_heads": 16, "latency": 1e-4,
           "mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16",
           "model": "deepseek-ai/DeepSeek-V3", "kernel_source": "TRITON_MLA"}  # fmt: skip
    fam = _read_one_l40s_vllm_row(tmp_path, row, "mla_generation_module_perf.parquet")
    r = fam.rows[0]
    want = mdk.mla_decode_launch("vllm_triton", 1, 2, 1, aic_mla.dims(16), 2, 142)
    names = (*mlaf.MLA_DECODE_LAUNCH, *mlaf.MLA_DECODE_SERIAL)
    assert tuple(r[x] for x in names) == want and want[0] > 0
    module = _module(16)
    assert r["bytes"] == 0 and r["l2_bytes"] == module[1] + module[4] > 0


def test_a_decode_module_fit_without_l2_prices_as_before() -> None:
    """A decode-module fit written before ``l2_bytes`` reads with ``c_l2_bytes`` 0, and a
    serving step feeds the term zero: any coefficient leaves the step's price unchanged
    (B200 TensorRT-LLM, DeepSeek-V3 on 8 GPUs)."""
    key = "mla_module_decode"
    old = KernelFit(model="gemms_roofline+tiles+seq_keys", params={"c_tiles": 1.0})
    upgrade_fit(old, fm.get_formula(key))
    assert old.params["c_l2_bytes"] == 0.0
    model = get_model("deepseek-v3")
    prof = load_profile("b200", "trtllm")
    key = CostModel(model, prof, tp=8).priced.keys["mla_module_decode"]
    fit = prof.kernels[key]
    assert fit.model == fm.get_formula(key).model_name
    dear = dataclasses.replace(fit, params={**fit.params, "c_l2_bytes": 1e-6})
    prof1 = dataclasses.replace(prof, kernels={**prof.kernels, key: dear})
    a = CostModel(model, prof, tp=8)._mla_decode(32, 32 * 4097)
    b = CostModel(model, prof1, tp=8)._mla_decode(32, 32 * 4097)
    assert a == b and a[0][2] > 0


def test_the_reader_keeps_prefill_module_rows_without_l2(tmp_path) -> None:
    """The prefill modules do not read the L2 term (it measured worse on their fit rows)."""
    row = {"batch_size": 1, "isl": 16, "step": 0, "num_heads": 16, "latency": 1e-4,
           "mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "gemm_type": "bfloat16",
           "model": "deepseek-ai/DeepSeek-V3", "kernel_source": "FLASH_ATTN"}  # fmt: skip
    fam = _read_one_l40s_vllm_row(tmp_path, row, "mla_context_module_perf.parquet")
    assert "l2_bytes" not in fam.rows[0] and fam.rows[0]["bytes"] > 0


@pytest.mark.parametrize("name", ["l40s-vllm", "rtx-pro-6000-vllm", "rtx-pro-6000-trtllm"])
def test_regenerated_decode_module_fits_keep_the_l2_term(name: str) -> None:
    """The decode modules regenerated by helper ``mla-module`` (GPUs without serving-sample
    rows) are of the current form, and their bf16 fit prices the L2 bytes (a regeneration
    that loses the term fails here); the RTX PRO 6000 vLLM and L40S vLLM ones were fitted
    from ``TRITON_MLA`` tables (vLLM's Triton launch rule)."""
    prof = load_profile(name)
    fits = {k: f for k, f in prof.kernels.items() if k.startswith("mla_module_decode")}
    assert fits
    for key, fit in fits.items():
        assert fit.model == fm.get_formula(key).model_name
    assert fits["mla_module_decode"].params["c_l2_bytes"] > 1e-14
    if name.endswith("vllm"):
        assert fits["mla_module_decode"].provenance["kernel_source"] == "TRITON_MLA"
        assert mdk.module_decode_rule(prof.gpu, "TRITON_MLA", 2) == "vllm_triton"
