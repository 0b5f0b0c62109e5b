"""TensorRT-LLM's gpt-oss experts: an mxfp4 checkpoint loaded as stored (bf16 linear
layers, mxfp4 experts) on every GPU, its experts run with mxfp8 activations on Blackwell
(``W4A8_MXFP4_MXFP8``: the profile's ``moe_mxfp4_mxfp8`` fit from TensorRT-LLM's own
table), and a TP run priced at the EP layout where the table timed gpt-oss's shape at EP
only (``twin.costmodel.moe_layout.measured_ep``)."""

from __future__ import annotations

import dataclasses

import pytest
from silicon_rows import planned, silicon_row

from twin.calibration import aic_moe
from twin.calibration import aic_tables as at
from twin.costmodel import CostModel
from twin.costmodel import moe_families as moef
from twin.costmodel.moe_layout import measured_ep
from twin.costmodel.profile_store import resolve_profile
from twin.engine.run_pricing import priced_profile
from twin.presets import get_model

FAMILY = moef.moe_mxfp8_activation_kernel("mxfp4")
SOURCE = "moe_torch_flow"


@pytest.mark.parametrize(
    ("gpu", "system"),
    [("b200", "b200_sxm"), ("b300", "b300_sxm"), ("gb200", "gb200"), ("gb300", "gb300")],
)
def test_the_blackwell_profiles_have_trtllms_own_mxfp8_activation_fit(gpu, system):
    fit = resolve_profile(gpu, None, "trtllm").kernels[FAMILY]
    assert fit.provenance["kernel_source"] == SOURCE
    assert fit.provenance["tables"] == [f"{system}/moe/trtllm/1.3.0rc20/moe_perf.parquet"]


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_hopper_profiles_have_none(gpu):
    assert FAMILY not in resolve_profile(gpu, None, "trtllm").kernels


def test_the_rows_are_trtllms_of_the_release_that_times_gpt_oss():
    pytest.importorskip("aiconfigurator_core")
    (family,) = aic_moe.mxfp8_activation_rows(at.system_dir("b200"), "trtllm")
    assert family.kernel == FAMILY and family.framework == "TensorRT-LLM"
    assert family.kernel_source == SOURCE and family.release == "1.3.0rc20"
    shapes = {(r["shape"]["d"], r["shape"]["e"], r["shape"]["k"]) for r in family.rows}
    assert (2880, 128, 4) in shapes  # gpt-oss-120b's (1.3.0rc23's rows time other shapes)


def test_the_trtllm_mode_runs_mxfp4_experts_with_mxfp8_activations_on_blackwell_only():
    gpt_oss = get_model("gpt-oss-120b")
    b200 = resolve_profile("b200", None, "trtllm")
    swapped = priced_profile(gpt_oss, b200, "trtllm")
    assert swapped.kernels["moe_mxfp4"] is b200.kernels[FAMILY]
    assert {k: v for k, v in swapped.kernels.items() if k != "moe_mxfp4"} == {
        k: v for k, v in b200.kernels.items() if k != "moe_mxfp4"
    }
    # moe_config.backend CUTLASS / TRTLLM changes the nvfp4 experts' kernel only: the
    # mxfp4 ones keep W4A8_MXFP4_MXFP8 under every backend but TRITON (get_mxfp4_quant_algo)
    for backend in ("CUTLASS", "TRTLLM"):
        chosen = priced_profile(gpt_oss, b200, "trtllm", {"moe_backend": backend})
        assert chosen.kernels["moe_mxfp4"] is b200.kernels[FAMILY]
    h200 = resolve_profile("h200", None, "trtllm")  # Hopper: W4A16_MXFP4, no fit
    assert priced_profile(gpt_oss, h200, "trtllm") is h200
    fp8 = dataclasses.replace(gpt_oss, precision="fp8", moe_precision=None)
    assert priced_profile(fp8, b200, "trtllm") is b200


def test_a_tp_run_is_priced_at_ep_where_the_table_timed_the_shape_at_ep_only():
    gpt_oss, r1 = get_model("gpt-oss-120b"), get_model("deepseek-r1")

    def ep_only(moe_tp: int, moe_ep: int) -> bool:
        return moe_tp == 1

    assert measured_ep(gpt_oss, 4, 1, SOURCE, ep_only) == 4
    assert measured_ep(gpt_oss, 4, 1, SOURCE, lambda tp, ep: True) == 1  # TP timed too
    assert measured_ep(gpt_oss, 4, 1, "moe_torch_flow_cutlass", ep_only) == 1
    assert measured_ep(gpt_oss, 4, 2, SOURCE, ep_only) == 2  # its own EP layout
    assert measured_ep(gpt_oss, 1, 1, SOURCE, ep_only) == 1
    assert measured_ep(r1, 8, 1, SOURCE, ep_only) == 1  # grouped top-k: the tie


def test_gpt_oss_at_tp_2_on_b200_reads_the_ep_2_series():
    gpt_oss = get_model("gpt-oss-120b")
    profile = priced_profile(gpt_oss, resolve_profile("b200", None, "trtllm"), "trtllm")
    cm = CostModel(gpt_oss, profile, tp=2, ep=1)
    assert cm._moe_ep == 2
    assert "EP layout of the same GPUs" in cm.provenance
    assert "MoE shape: measured" in cm.provenance


def test_a_b200_trtllm_gpt_oss_row_is_priced_at_the_checkpoint_with_an_fp8_cache():
    pytest.importorskip("aiconfigurator_core")  # the model's config.json comes from the extra
    imax = "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=4"
    row = silicon_row(source=imax, backend="trtllm", backend_version="1.2.0rc2", system="b200_sxm")
    plan = planned(row, isl=1024, osl=1024, concurrency=4, tp=2)
    assert plan.priced == "bf16, mxfp4 experts, fp8 KV" and plan.native_quant
    assert "loaded as stored by trtllm" in plan.precision


def test_the_plans_bound_prices_the_experts_the_run_prices():
    """``twin plan``'s analytic bound reads the profile as the run prices it
    (``engine.run_pricing.priced_profile``): a B200 TensorRT-LLM gpt-oss candidate at tp 2 whose
    decode step the run prices at 2.6 ms is not refused by a 3 ms TPOT, as it was when the
    bound priced the bf16-activation experts (3.9 ms a step)."""
    from twin.reports.plan_bound import analyse, workload_stats
    from twin.reports.plan_result import Candidate, Load
    from twin.reports.sweep import SweepSpec
    from twin.slo import parse_slos
    from twin.workloads.examples import example_path

    chat = str(example_path("chat"))
    base = SweepSpec(workload=chat, model="gpt-oss-120b", slos=("p50_tpot<=3ms",))
    cand = Candidate(gpu="b200", engine="trtllm", tp=2, cache="auto")
    load = Load(session_rate=1.0, concurrency=None, duration_s=None)
    found = analyse(cand, base, load, parse_slos(["p50_tpot<=3ms"]), workload_stats(chat))
    assert found.infeasible is None, found.infeasible


def test_twin_cost_prices_the_experts_the_trtllm_mode_runs(capsys, monkeypatch):
    """``twin cost --engine trtllm`` reads the profile as ``twin simulate --engine trtllm``
    prices it (``engine.run_pricing.priced_profile``): gpt-oss's experts on B200 at the mxfp8 fit,
    its decode's MoE cheaper than the bf16-activation experts' price."""
    import json

    import twin.engine.run_pricing as run_pricing
    from twin.cli.main import run as twin

    argv = ["cost", "-m", "gpt-oss-120b", "--gpu", "b200", "--tp", "2", "--engine", "trtllm"]

    def moe_s() -> float:
        assert twin([*argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["decode"][0]["by_kind"]["moe"]

    swapped = moe_s()
    monkeypatch.setattr(run_pricing, "priced_profile", lambda model, profile, *_: profile)
    assert swapped < 0.8 * moe_s()


def test_the_mxfp8_rows_read_as_a_fit_written_before_the_l2_term_was_fitted():
    """``mxfp8_activation_rows(replay_l2=False)`` reads every byte from HBM, as a fit written
    before the L2 term was fitted (its ``c_l2_bytes`` is 0; GB300's was the last shipped one,
    regenerated with the term in session 37, B200's in session 29); the default reads the
    small launches NVIDIA's replays keep in L2 from L2 (``features.replay_resident``)."""
    pytest.importorskip("aiconfigurator_core")
    assert not aic_moe.reads_replay_l2({"c_l2_bytes": 0.0})
    for gpu in ("b200", "gb300"):
        assert aic_moe.reads_replay_l2(resolve_profile(gpu, None, "trtllm").kernels[FAMILY].params)
    system = at.system_dir("b200")
    (hbm,) = aic_moe.mxfp8_activation_rows(system, "trtllm", replay_l2=False)
    (l2,) = aic_moe.mxfp8_activation_rows(system, "trtllm")
    assert [r["shape"] for r in hbm.rows] == [r["shape"] for r in l2.rows]
    assert all(r["l2_bytes"] == 0.0 and r["weight_elems"] > 0.0 for r in hbm.rows)
    resident = [r for r in l2.rows if r["l2_bytes"] > 0.0]
    assert resident and all(r["bytes"] == 0.0 for r in resident)


@pytest.mark.slow
def test_the_moe_bench_gives_the_mxfp8_activation_family_its_miss_reasons(monkeypatch):
    """``bench_moe_kernels.miss_reasons`` reads the ``moe_mxfp4_mxfp8`` family too (it
    read ``moe_rows`` only, so the TRT-LLM-gen families had no reasons or floor)."""
    import importlib
    from pathlib import Path

    pytest.importorskip("aiconfigurator_core")
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "benchmarks"))
    bench = importlib.import_module("bench_moe_kernels")

    why = bench.miss_reasons("b200-trtllm", resolve_profile("b200", None, "trtllm"))
    fam = why[FAMILY]
    assert fam["n_heldout"] == resolve_profile("b200", None, "trtllm").kernels[FAMILY].n_heldout
    assert sum(fam["heldout_misses"].values()) > 0 and fam["floor_p90"] > 0.15
