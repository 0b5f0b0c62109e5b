"""The MLA decode kernel tables' replays (issue 34, helper ``mla37``): NVIDIA's collectors
replay one decode call in a CUDA graph over the same latent cache, so a cache that fits in
L2 is read from there (``mla_features.kernel_replay_l2``, the decode modules' rule
``features.replay_resident``); a serving step reads from HBM.

DeepSeek-V3's widths (``aic_mla.DSV3``): 576 latent elements a cached token, the absorbed
query in and the output out 2 x 1,088 bytes a head (bf16).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from aic_refit import assert_heldout, refit_family

from twin.calibration import aic_mla
from twin.calibration.aic_tables import system_dir
from twin.costmodel import CostModel
from twin.costmodel import formulas as fm
from twin.costmodel import mla_decode_kernels as mdk
from twin.costmodel import mla_features as mf
from twin.costmodel.features import REPLAY_L2_SHARE
from twin.costmodel.fit_upgrade import upgrade_fit
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import load_profile
from twin.hardware import get_gpu
from twin.presets import get_model

RTX_L2 = get_gpu("rtx-pro-6000").l2_bytes  # 128 MB


def _sums(batch: int, keys: int, kv_e: int = 1) -> mf.KernelSums:
    return mf.mla_decode_sums(batch, batch * keys, aic_mla.dims(16), 2, kv_e)


def test_a_decode_cache_that_fits_in_l2_is_read_from_l2() -> None:
    """RTX PRO 6000 (128 MB L2), an fp8 cache, 16 heads: 2 sequences of 65,536 keys
    (2^17 cached tokens, 576 bytes each: 75,497,472 bytes, plus 69,632 of query and
    output) fit in ``REPLAY_L2_SHARE`` of it: every byte moves to the L2 term, its HBM bytes
    zero, FLOPs, tiles and keys unchanged. Twice the tokens (151 MB) do not: unchanged. A
    serving step (no L2) never is."""
    small, big = _sums(2, 65536), _sums(4, 65536)
    assert small[1] == 576 * 2**17 + 2 * 2 * 16 * 1088 == 75_567_104
    assert small[1] <= REPLAY_L2_SHARE * RTX_L2 < big[1]
    kept, l2 = mf.kernel_replay_l2(small, RTX_L2)
    assert l2 == 75_567_104 and kept == (small[0], 0.0, small[2], small[3])
    assert mf.kernel_replay_l2(big, RTX_L2) == (big, 0.0)
    assert mf.kernel_replay_l2(small, None) == (small, 0.0)


def test_the_decode_formula_reads_l2_bytes_on_the_compute_side() -> None:
    """Both decode families read ``l2_bytes`` after the launch's compute-side features and
    before the serial ones, where ``decode_kernel_features`` puts it; prefill's the same."""
    for key in ("mla_decode", "mla_decode_fp8kv"):
        f = fm.get_formula(key)
        assert f.extras[-1] == "l2_bytes" and "l2_bytes" not in f.serial
        args = mdk.decode_kernel_features(_sums(1, 8), 3.0, (1.0, 2.0, 4.0, 5.0, 6.0), 7.0)
        assert len(args) == 2 + len(f.features)
        named = dict(zip(f.features, args[2:], strict=True))
        assert named["l2_bytes"] == 7.0 and named["block_keys"] == 3.0
        assert named["launch_waves"] == 2.0 and named["kv_repeat"] == 4.0
    # the prefill kernel's replays are read by the same rule, before its serial waves
    prefill = fm.get_formula("mla_prefill")
    assert prefill.extras[-1] == "l2_bytes" and "l2_bytes" not in prefill.serial


def test_the_reader_puts_a_small_cache_in_l2(tmp_path: Path) -> None:
    """H200 (50 MB L2) TensorRT-LLM rows over a bf16 cache (1,152 bytes a token): one
    sequence of 1,024 keys (~1.2 MB) reads from L2, 64 of 8,192 (~604 MB) from HBM;
    ``replay_l2=False`` (a fit written before the term) reads both from HBM."""
    base = {"framework": "TRTLLM", "version": "1.3.0rc20", "device": "NVIDIA H200",
            "mla_dtype": "bfloat16", "kv_cache_dtype": "bfloat16", "num_heads": 16,
            "isl": 1, "tp_size": 8, "latency": 0.01, "kernel_source": "default"}  # fmt: skip
    rows = [{**base, "batch_size": 1, "step": 1023}, {**base, "batch_size": 64, "step": 8191}]
    folder = tmp_path / "h200_sxm" / "mla" / "trtllm" / "1.3.0rc20"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "generation_mla_perf.parquet")
    (fam,) = aic_mla.kernel_rows(tmp_path / "h200_sxm", "trtllm")
    small, big = fam.rows
    want = 1152 * 1024 + 2 * 16 * 1088
    assert small["l2_bytes"] == want and small["bytes"] == 0
    assert big["l2_bytes"] == 0 and big["bytes"] == 1152 * 64 * 8192 + 64 * 2 * 16 * 1088
    (hbm,) = aic_mla.kernel_rows(tmp_path / "h200_sxm", "trtllm", replay_l2=False)
    assert hbm.rows[0]["l2_bytes"] == 0 and hbm.rows[0]["bytes"] == want
    assert hbm.rows[1] == big


def test_a_decode_fit_without_l2_prices_as_before() -> None:
    """A decode fit written before ``l2_bytes`` reads with ``c_l2_bytes`` 0, and a serving
    step feeds the term zero: any coefficient leaves the step's price unchanged (B200
    SGLang, DeepSeek-V3 on 4 GPUs: the kernel families price its decode)."""
    old = KernelFit(model="roofline+tiles+seq_keys", params={"c_tiles": 1.0})
    upgrade_fit(old, fm.get_formula("mla_decode"))
    assert old.params["c_l2_bytes"] == 0.0
    model, prof = get_model("deepseek-v3"), load_profile("b200", "sglang")
    cm = CostModel(model, prof, tp=4, ep=4)
    key = cm.priced.keys["mla_decode"]
    assert cm.mla_modes[1] == "kernels"
    fit = prof.kernels[key]
    dear = dataclasses.replace(fit, params={**fit.params, "c_l2_bytes": 1e-6})
    prof1 = dataclasses.replace(prof, kernels={**prof.kernels, key: dear})
    a = dict((k, v) for _, k, v in cm._mla_decode(32, 32 * 4097))
    b = dict((k, v) for _, k, v in CostModel(model, prof1, tp=4, ep=4)._mla_decode(32, 32 * 4097))
    assert a == b and a["mla_decode"] > 0


# The profiles whose ``mla_decode*`` families were refitted with the term (helper mla37) and
# meet issue 34's kernel target (median 5%, P90 15%).
REFIT_MEETING = [
    ("h200-trtllm", "mla_decode"),
    ("h200-trtllm", "mla_decode_fp8kv"),
    ("h100-trtllm", "mla_decode"),
    ("h100-trtllm", "mla_decode_fp8kv"),
    # families the term brought under the target (before: 15.1, 17.0 and 15.3% P90)
    ("b200-sglang", "mla_decode"),
    ("rtx-pro-6000-trtllm", "mla_decode"),
    ("b300-trtllm", "mla_decode_fp8kv"),
]


@pytest.mark.parametrize(("name", "key"), REFIT_MEETING)
def test_refitted_decode_fits_keep_the_l2_term_and_meet(name: str, key: str) -> None:
    fit = load_profile(name).kernels[key]
    assert fit.model == fm.get_formula(key).model_name
    assert fit.params["c_l2_bytes"] > 0
    assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err <= 0.05
    assert fit.heldout_p90_rel_err is not None and fit.heldout_p90_rel_err <= 0.15


@pytest.mark.slow
def test_h200_trtllm_decode_refit_with_l2_meets() -> None:
    """NVIDIA's H200 TensorRT-LLM 1.3.0rc20 decode table, bf16 cache, refitted from the
    installed tables with the replays' L2 term: a positive ``c_l2_bytes`` and issue 34's
    target met on the held-out rows."""
    pytest.importorskip("aiconfigurator_core")
    peaks = load_profile("h200", "trtllm").peaks
    families = aic_mla.kernel_rows(system_dir("h200"), "trtllm")
    rows, fit = refit_family(families, "mla_decode", peaks)
    assert any(r["l2_bytes"] > 0 for r in rows) and any(r["bytes"] > 0 for r in rows)
    assert fit.params["c_l2_bytes"] > 0
    assert_heldout(fit, 0.05, 0.15)
