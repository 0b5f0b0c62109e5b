"""The MLA prefill kernel's bytes its table's CUDA-graph replays read from L2
(``mla_families.MLA_KERNEL_REPLAY``), and the prefill module's context-attention waves
(``mla_families.MLA_MODULE_PREFILL_SERIAL``): issue 34, helper ``mlamod37``."""

from __future__ import annotations

import pytest
from profile_edits import with_fit

from twin.calibration import aic_mla
from twin.costmodel import CostModel
from twin.costmodel import formulas as fm
from twin.costmodel import latency as lat
from twin.costmodel import mla_families as mlaf
from twin.costmodel import mla_features as mf
from twin.costmodel.profile_store import load_profile
from twin.costmodel.step_features import aggregate_step
from twin.hardware import get_gpu
from twin.presets import get_model

DSV3 = get_model("deepseek-v3")
L40S_L2 = get_gpu("l40s").l2_bytes


def _prefill(batch: int, isl: int, heads: int) -> tuple[float, float, float, float]:
    """``mla_prefill_sums`` of ``batch`` prompts of ``isl`` tokens at ``heads`` heads, bf16."""
    t = batch * isl
    return mf.mla_prefill_sums(t, batch * isl * (isl + 1) // 2, t, batch, aic_mla.dims(heads), 2, 2)


def test_a_prefill_working_set_that_fits_in_l2_is_read_from_it() -> None:
    """L40S (96 MB of L2), batch 64, 16 heads: 32 tokens a sequence move 44 MB (resident
    across the replays: its bytes all L2 bytes), 128 tokens 177 MB (streamed from HBM); a
    serving step (no L2 given) reads everything from HBM."""
    assert L40S_L2 == 96e6
    small, big = _prefill(64, 32, 16), _prefill(64, 128, 16)
    assert small[1] == pytest.approx(44.3e6, rel=0.01) and big[1] == 4 * small[1]
    (flops, hbm, tiles, seq), l2 = mf.kernel_replay_l2(small, L40S_L2)
    assert (flops, tiles, seq) == (small[0], small[2], small[3])
    assert hbm == 0 and l2 == small[1]
    assert mf.kernel_replay_l2(big, L40S_L2) == (big, 0)
    assert mf.kernel_replay_l2(small, None) == (small, 0)


def test_the_prefill_kernel_formula_reads_its_l2_bytes_before_its_waves() -> None:
    for kv in mlaf.MLA_KV.values():
        f = fm.get_formula(f"mla_prefill{kv}")
        assert f.extras == ("tiles", "seq_keys", *mlaf.MLA_KERNEL_REPLAY)
        assert f.serial == mlaf.MLA_PREFILL_SERIAL
        assert f.model_name == "roofline+tiles+seq_keys+l2_bytes+waves"


def test_the_l40s_trtllm_prefill_fit_prices_the_l2_step() -> None:
    """NVIDIA's L40S TensorRT-LLM 1.0.0 context table, batch 64, 16 heads: 0.047 ms at 32
    tokens a sequence, 0.348 ms at 128 (a 7x step for 4x the work, where the working set
    leaves L2). The refitted fit prices both within 15% of the table (the old form, one
    byte rate, priced the 32-token row 1.5-2x and missed the target: P90 57%), and a
    serving step at 32 tokens, which reads from HBM, dearer than the table's replay."""
    prof = load_profile("l40s", "trtllm")
    fit = prof.kernels["mla_prefill"]
    assert fit.model == fm.get_formula("mla_prefill").model_name and fit.params["c_l2_bytes"] > 0
    sms = get_gpu("l40s").sm_count or 0

    def price(isl: int, l2: float | None) -> float:
        kept, l2_bytes = mf.kernel_replay_l2(_prefill(64, isl, 16), l2)
        sums = (*kept, l2_bytes)
        waves = mf.mla_prefill_waves(64 * isl, 64, 16, sms)
        extras = dict(zip(fm.get_formula("mla_prefill").features, (*sums[2:], waves), strict=True))
        return lat.predict("mla_prefill", fit.params, prof.peaks, sums[0], sums[1], extras)

    assert price(32, L40S_L2) == pytest.approx(0.047e-3, rel=0.15)
    assert price(128, L40S_L2) == pytest.approx(0.348e-3, rel=0.15)
    assert price(32, None) > price(32, L40S_L2)
    assert price(128, None) == price(128, L40S_L2)
    # held out: 11.6 / 57.4% before, 6.0 / 16.5% (still short of issue 34's 5 / 15%)
    assert fit.heldout_median_rel_err < 0.065 and fit.heldout_p90_rel_err < 0.2


def test_the_prefill_module_prices_its_attention_waves() -> None:
    """The ``mla_module_prefill`` fit's waves coefficient (H200 TensorRT-LLM, the module's
    context attention) adds its waves' seconds to a step: zero it and the step's MLA prefill
    drops by exactly ``c_waves x waves`` a layer."""
    prof = load_profile("h200", "trtllm")
    cm = CostModel(DSV3, prof, tp=8, ep=8)
    key = cm.priced.keys["mla_module_prefill"]
    assert cm.mla_modes[0] == "module"
    fit = prof.kernels[key]
    assert fit.model == fm.get_formula(key).model_name and fit.params["c_waves"] > 0
    f = aggregate_step([(4096, 0)], [], DSV3.mixer_counts, 0, 1, 64)
    kernel, seconds = cm._mla_prefill(f)
    prof0 = with_fit(prof, key, c_waves=0.0)
    waves = mf.mla_prefill_waves(4096, 1, 16, get_gpu("h200").sm_count or 0)
    assert waves == 4 and kernel == "mla_module"  # 16 heads x 32 tiles = 512 CTAs, 132 SMs
    priced = CostModel(DSV3, prof0, tp=8, ep=8)._mla_prefill(f)[1]
    assert seconds - priced == pytest.approx(fit.params["c_waves"] * waves, rel=1e-9)


def test_a_kernel_row_carries_its_l2_bytes_unless_the_reader_is_told_not_to() -> None:
    """The table reader splits a prefill row's bytes by residency (``mla_features.
    kernel_replay_l2``); read for a fit written before the term (``replay_l2=False``),
    every byte stays in HBM."""
    pytest.importorskip("aiconfigurator_core")
    from twin.calibration.aic_tables import system_dir

    rows = {
        (r["shape"]["b"], r["shape"]["s"], r["shape"]["h"]): r
        for fam in aic_mla.kernel_rows(system_dir("l40s"), "trtllm")
        if fam.kernel == "mla_prefill"
        for r in fam.rows
    }
    small, big = rows[(64, 32, 16)], rows[(64, 128, 16)]
    assert small["bytes"] == 0 and small["l2_bytes"] == pytest.approx(44.3e6, rel=0.01)
    assert big["l2_bytes"] == 0 and big["bytes"] == pytest.approx(177e6, rel=0.01)
    assert small["median_s"] == pytest.approx(0.047e-3, abs=2e-6)
    assert big["median_s"] == pytest.approx(0.348e-3, abs=2e-6)
    unread = {
        (r["shape"]["b"], r["shape"]["s"], r["shape"]["h"]): r
        for fam in aic_mla.kernel_rows(system_dir("l40s"), "trtllm", replay_l2=False)
        if fam.kernel == "mla_prefill"
        for r in fam.rows
    }
    assert unread[(64, 32, 16)]["l2_bytes"] == 0
    assert unread[(64, 32, 16)]["bytes"] == pytest.approx(44.3e6, rel=0.01)
