"""The fused-MoE kernel family (issue 34): NVIDIA's ``moe_perf`` rows read and fitted, the
cost model pricing MoE layers with the fit where the profile has one, and expert
parallelism (``--ep``) in the cost model, the engine's memory budget and the CLI.

The table under ``tests/data/aic`` is generated from the twin's own ``moe`` model at
known parameters (``tests/data/aic/make_moe_table.py``); nothing needs
``aiconfigurator-core`` installed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from profile_edits import moe_decode_s, with_fit

from twin.calibration.aic_import import fit_family
from twin.calibration.aic_moe import moe_row, moe_rows
from twin.calibration.aic_tables import system_dir
from twin.costmodel import CostModel
from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel import moe_features as moe_ft
from twin.costmodel.precision_kernels import MOE_AS_GEMM_NOTE
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import resolve_profile
from twin.costmodel.routing import routing_for
from twin.costmodel.series_term import series_key
from twin.engine import EngineConfig, memory_budget
from twin.engine.config import ClusterConfig, MemoryConfig
from twin.errors import TwinError
from twin.hardware import get_gpu
from twin.parallel import Layout, weight_bytes_per_gpu
from twin.precision import WEIGHT_FORMATS
from twin.presets import get_model, override_model

DATA = Path(__file__).parent / "data" / "aic" / "systems" / "data"
TRUE = {
    "t0_s": 3e-5,
    "eff_flops": 0.7,
    "eff_bytes": 0.8,
    "p": 2.0,
    "c_weight_elems": 1e-14,
    "c_routed_elems": 2e-13,
    "c_tile_bytes": 0.0,  # tests/data/aic/make_moe_table.py's: its rows predate these terms
    "c_l2_bytes": 0.0,
    "c_large_m_weights": 0.0,
    "c_pad_flops": 0.0,
    "c_restream_weights": 0.0,
    "c_grid_flops": 0.0,
    "c_routed_passes": 0.0,
    "c_active_experts": 0.0,
}


def test_moe_row_features_per_gpu() -> None:
    # 64 tokens x top-8 over 4 EP ranks of 128 experts, MoE TP 1: 128 rows on the rank,
    # min(32 local experts, 128 rows) = 32 experts hit, each 2048 -> 2 x 768 -> 2048.
    shape = {
        "num_tokens": 64,
        "hidden_size": 2048,
        "inter_size": 768,
        "topk": 8,
        "num_experts": 128,
        "moe_tp_size": 1,
        "moe_ep_size": 4,
    }
    row = moe_row(shape, WEIGHT_FORMATS["bf16"], "moe", 0.5)
    assert row["flops"] == 2.0 * 128 * 2048 * 3 * 768
    assert row["weight_elems"] == 32 * 2048 * 3 * 768
    assert row["routed_elems"] == 64 * 8 * 2048
    assert row["active_experts"] == 32
    assert row["tile_bytes"] == 2 * 2048 * 128  # the up GEMM's tile: d x 128 columns
    assert row["bytes"] == 2 * 128 * (2048 + 768) + 2 * 32 * 2048 * 3 * 768 + 2 * 128 * (
        2 * 768 + 2048
    )
    assert row["median_s"] == 0.5e-3


def test_reader_keeps_balanced_gated_rows_only() -> None:
    (fam,) = moe_rows(system_dir("h100", DATA), "vllm")
    assert fam.kernel == "moe"
    assert fam.kernel_source == "vllm_unquantizedfusedmoe_triton_tritonexperts"
    assert len(fam.rows) == 2 * 4 * 7  # power-law and nongated rows dropped


def test_fit_recovers_the_generating_model() -> None:
    (fam,) = moe_rows(system_dir("h100", DATA), "vllm")
    peaks = get_gpu("h100").peaks()
    fit = fit_family(fam, peaks, "H100 SXM5")
    assert fit is not None
    assert fit.heldout_median_rel_err is not None and fit.heldout_median_rel_err < 0.05
    # predictions of the fit against the true model on a shape the table lacks
    feats = moe_ft.moe_features(96.0, 96.0 * 8 * 4096, 30.0, 4096, 1024, 2, 2, 2.0, 2.0)
    got = lat.predict("moe", fit.params, peaks, *feats)
    want = lat.predict("moe", TRUE, peaks, *feats)
    assert got == pytest.approx(want, rel=0.08)


def _qwen_moe():  # type: ignore[no-untyped-def]
    return get_model("qwen3-235b-a22b")


def _term(fit: KernelFit, tp: int, ep: int, t: int) -> float:
    """The fit's per-shape factor for qwen3-235b-a22b at MoE TP ``tp / ep``, EP ``ep`` and
    ``t`` tokens (1 where the fit has none or the tables lack the shape)."""
    m = _qwen_moe()
    key = series_key(m.d_model, m.moe_d_ff, m.moe_top_k, m.moe_n_experts, tp // ep, ep)
    coefs = fit.series.coefficients(key) if fit.series is not None else None
    return 1.0 if coefs is None else math.exp(fit.series.log_factor(coefs, t))  # type: ignore[union-attr]


def _moe_layer_s(prof, tp: int, ep: int, t: int) -> float:
    """One MoE layer's time at ``t`` tokens worked by hand: the fit at a rank's features
    (experts ``tp // ep`` ways split, the rank's share of the routed rows) times the
    shape's series factor."""
    m = _qwen_moe()
    width = m.moe_d_ff // (tp // ep)
    load = routing_for(m).rank_load(t, m.moe_n_experts, m.moe_top_k, ep)
    flops, nbytes, weights = moe_ft.moe_sums(load.rows, load.active, m.d_model, width, 2, 2, 2, 2)
    features = {
        "weight_elems": weights,
        "routed_elems": t * m.moe_top_k * m.d_model,
        "tile_bytes": moe_ft.moe_tile_bytes(m.d_model, width, 2, 2),
        # vLLM's Triton experts' passes over every routed row (the H100 fit's kernel)
        "routed_passes": moe_ft.vllm_triton_routed_elems(
            prof.kernels["moe"].provenance["kernel_source"],
            t * m.moe_top_k,
            load.rows,
            m.d_model,
            width,
            2,
        ),
        "active_experts": load.active,
    }
    one = lat.predict("moe", prof.kernels["moe"].params, prof.peaks, flops, nbytes, features)
    return one * _term(prof.kernels["moe"], tp, ep, t)


def test_shipped_profile_prices_moe_with_the_fit() -> None:
    prof = resolve_profile("h100", None, "vllm")
    assert "moe" in prof.kernels
    cm = CostModel(_qwen_moe(), prof, 4)
    assert cm.moe_key == "moe"
    step = cm.decode([1000] * 32, breakdown=True)
    assert "moe" in step.by_kernel  # type: ignore[union-attr]
    assert "MoE experts: measured" in cm.provenance


def test_the_moe_part_is_the_fit_at_known_features() -> None:
    m, prof, tp, t = _qwen_moe(), resolve_profile("h100", None, "vllm"), 4, 256
    cm = CostModel(m, prof, tp)
    step = cm.step((), [500] * t, breakdown=True)
    moe_s = step.items["moe"]["moe"]  # type: ignore[union-attr]
    assert moe_s == pytest.approx(m.n_moe_layers * _moe_layer_s(prof, tp, 1, t), rel=1e-12)


def test_without_the_fit_the_experts_are_gemms_and_the_label_says_so() -> None:
    prof = resolve_profile("h100", None, "vllm")
    bare = dataclasses.replace(
        prof, kernels={k: v for k, v in prof.kernels.items() if not k.startswith("moe")}
    )
    with_fit, without = CostModel(_qwen_moe(), prof, 4), CostModel(_qwen_moe(), bare, 4)
    assert without.moe_key is None
    assert MOE_AS_GEMM_NOTE in without.provenance
    a = with_fit.decode([1000] * 64, breakdown=True)
    b = without.decode([1000] * 64, breakdown=True)
    assert "moe" not in b.by_kernel  # type: ignore[union-attr]
    assert a.total_s != b.total_s  # type: ignore[union-attr]


def test_a_fit_changes_the_price_it_is_asked_for() -> None:
    # Doubling the fit's launch overhead adds exactly n_moe_layers x t0 to a step (times
    # the shape's per-shape factor, which scales the whole kernel).
    prof = resolve_profile("h100", None, "vllm")
    fit = prof.kernels["moe"]
    slower = dataclasses.replace(
        prof,
        kernels={
            **prof.kernels,
            "moe": dataclasses.replace(fit, params={**fit.params, "t0_s": 2 * fit.params["t0_s"]}),
        },
    )
    m = _qwen_moe()
    a = CostModel(m, prof, 4).decode([100] * 8)
    b = CostModel(m, slower, 4).decode([100] * 8)
    added = m.n_moe_layers * fit.params["t0_s"] * _term(fit, 4, 1, 8)
    assert b - a == pytest.approx(added, rel=1e-9)  # type: ignore[operator]


def test_expert_parallelism_prices_the_ranks_share() -> None:
    m, prof = _qwen_moe(), resolve_profile("h100", None, "vllm")
    ep = CostModel(m, prof, 4, ep=4)
    # MoE TP 1: the experts keep their full width; a quarter of the rows and experts each
    assert ep.expert_width == m.moe_d_ff
    t = 64
    step = ep.step((), [100] * t, breakdown=True)
    moe_s = step.items["moe"]["moe"]  # type: ignore[union-attr]
    assert moe_s == pytest.approx(m.n_moe_layers * _moe_layer_s(prof, 4, 4, t), rel=1e-12)


@pytest.mark.parametrize(
    ("model", "tp", "ep", "needle"),
    [
        ("qwen3-235b-a22b", 4, 3, "--ep 3 must divide --tp 4"),
        ("llama-3-8b", 4, 2, "--ep 2: model 'llama-3-8b' has no MoE layers"),
        ("qwen3-235b-a22b", 6, 6, "--ep 6 does not divide the 128 routed experts"),
    ],
)
def test_bad_layouts_are_one_line(model: str, tp: int, ep: int, needle: str) -> None:
    with pytest.raises(TwinError, match=needle):
        CostModel(get_model(model), resolve_profile("h100", None, "vllm"), tp, ep=ep)


def test_memory_budget_takes_the_layouts_weights() -> None:
    m = _qwen_moe()
    hbm = 141e9  # H200: the bf16 weights (470 GB) fit on four
    base = EngineConfig(cluster=ClusterConfig(tp=4), memory=MemoryConfig(gpu_memory_bytes=hbm))
    assert memory_budget(m, base) == 4 * hbm * base.memory.memory_utilization - m.weight_bytes
    ep = EngineConfig(cluster=ClusterConfig(tp=4, ep=4), memory=MemoryConfig(gpu_memory_bytes=hbm))
    per_gpu = weight_bytes_per_gpu(m, Layout(4, 4))
    assert memory_budget(m, ep) == 4 * hbm * ep.memory.memory_utilization - 4 * per_gpu
    with pytest.raises(TwinError, match="--ep: must divide --tp 4"):
        EngineConfig(cluster=ClusterConfig(tp=4, ep=3))


def test_the_serial_per_expert_term_adds_after_the_smooth_max() -> None:
    peaks = get_gpu("h100").peaks()
    params = {**TRUE, "c_active_experts": 2e-6}
    flops, nbytes, extras = moe_ft.moe_features(
        96.0, 96.0 * 8 * 4096, 30.0, 4096, 1024, 2, 2, 2.0, 2.0
    )
    assert extras["active_experts"] == 30.0
    without = lat.predict("moe", TRUE, peaks, flops, nbytes, extras)
    with_term = lat.predict("moe", params, peaks, flops, nbytes, extras)
    assert with_term == pytest.approx(without + 30 * 2e-6, rel=1e-12)
    fast = lat.compile_fast("moe", params, peaks)
    x, y, u = extras["weight_elems"], extras["routed_elems"], extras["tile_bytes"]
    assert fast(flops, nbytes, x, y, u, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 30.0) == pytest.approx(
        with_term, rel=1e-12
    )
    # the decode paths' compiled constants carry no serial term: refused, not dropped
    with pytest.raises(AssertionError, match=r"extra features|serial"):
        lat.kernel_constants("moe", params, peaks)


def test_a_fit_written_before_the_serial_term_prices_as_it_did() -> None:
    old = {k: v for k, v in TRUE.items() if k not in ("c_active_experts", "c_tile_bytes")}
    fit = KernelFit(model="roofline+weight_elems+routed_elems", params=old)
    prof = dataclasses.replace(
        resolve_profile("h100", None, "vllm"),
        kernels={**resolve_profile("h100", None, "vllm").kernels, "moe": fit},
    )
    again = type(prof).from_dict(prof.to_dict())
    want = (
        "roofline+weight_elems+routed_elems+tile_bytes+l2_bytes+large_m_weights+pad_flops"
        "+restream_weights+grid_flops+routed_passes+active_experts"
    )
    assert again.kernels["moe"].model == want
    assert again.kernels["moe"].params["c_active_experts"] == 0.0
    assert again.kernels["moe"].params["c_tile_bytes"] == 0.0
    assert again.kernels["moe"].params["c_l2_bytes"] == 0.0
    assert again.kernels["moe"].params["c_large_m_weights"] == 0.0
    assert again.kernels["moe"].params["c_pad_flops"] == 0.0
    assert again.kernels["moe"].params["c_restream_weights"] == 0.0
    assert again.kernels["moe"].params["c_grid_flops"] == 0.0
    assert again.kernels["moe"].params["c_routed_passes"] == 0.0


def _synthetic_rows(
    params: dict[str, float], peaks: dict[str, float], l2: float | None = None
) -> list[dict[str, float]]:
    """Fused-MoE table rows priced by ``params`` (1-4,096 tokens, top-8 of 64 or 256
    experts at EP 1-16, 2,048 x 768 bf16; ``l2``: the GPU's L2 the replays keep a small
    working set in), for a fit to recover ``params`` from."""
    rows = []
    for t in (1, 2, 4, 8, 16, 64, 256, 1024, 4096):
        for ep in (1, 4, 16):
            for n_exp in (64, 256):
                routed = t * 8
                active = min(n_exp / ep, routed / ep)
                flops, nbytes, ex = moe_ft.moe_features(
                    routed / ep, routed * 2048, active, 2048, 768, 2, 2, 2.0, 2.0, l2
                )
                y = lat.predict("moe", params, peaks, flops, nbytes, ex)
                rows.append({"flops": flops, "bytes": nbytes, **ex, "median_s": y})
    return rows


def test_fit_recovers_a_serial_per_expert_cost() -> None:
    from twin.calibration.fit import fit_params

    peaks = get_gpu("h100").peaks()
    params = {**TRUE, "c_active_experts": 3e-7}
    rows = _synthetic_rows(params, peaks)
    got = fit_params("moe", rows, peaks)
    assert got["c_active_experts"] == pytest.approx(3e-7, rel=0.05)


def test_the_array_form_prices_the_serial_term_like_the_scalar_form() -> None:
    import numpy as np

    peaks = get_gpu("h100").peaks()
    params = {**TRUE, "c_active_experts": 2e-6}
    fast = lat.compile_fast("moe", params, peaks)
    many = lat.compile_many("moe", params, peaks)
    flops, nbytes = np.array([1e9, 1e12, 0.0]), np.array([1e8, 1e9, 1e6])
    x, y = np.array([1e6, 1e8, 0.0]), np.array([1e5, 1e7, 1e3])
    u, z = np.array([5e5, 1e6, 0.0]), np.array([1.0, 64.0, 8.0])
    w = np.array([0.0, 0.0, 3e6])  # a table row's L2 bytes
    o = np.zeros(3)  # large-M weights, padded FLOPs, re-streamed weights, grid FLOPs, routed
    # passes; z serial
    want = [fast(*v) for v in zip(flops, nbytes, x, y, u, w, o, o, o, o, o, z, strict=True)]
    assert many(flops, nbytes, x, y, u, w, o, o, o, o, o, z).tolist() == want
    assert want[1] > fast(flops[1], nbytes[1], x[1], y[1], u[1], w[1]) + 63 * 2e-6
    assert many(flops, nbytes, x, y).tolist() == [
        fast(*v) for v in zip(flops, nbytes, x, y, strict=True)
    ]


QWEN30_EP4 = {
    "num_tokens": 1,
    "hidden_size": 2048,
    "inter_size": 768,
    "topk": 8,
    "num_experts": 128,
    "moe_tp_size": 1,
    "moe_ep_size": 4,
}


def test_a_table_rows_working_set_that_fits_in_l2_is_read_from_l2() -> None:
    # 1 token x top-8 over EP 4: 2 rows on the rank, 2 of its 32 experts (2048 x 3 x 768
    # bf16, 9.4 MB each): 19 MB, inside 0.8 of H100's 50 MB L2.
    l2 = get_gpu("h100").l2_bytes
    bf16 = WEIGHT_FORMATS["bf16"]
    hbm = moe_row(QWEN30_EP4, bf16, "moe", 0.5)
    row = moe_row(QWEN30_EP4, bf16, "moe", 0.5, l2)
    assert hbm["l2_bytes"] == 0.0 and hbm["bytes"] > 0
    assert row["l2_bytes"] == hbm["bytes"] < ft.REPLAY_L2_SHARE * l2  # type: ignore[operator]
    assert row["bytes"] == 0.0 and row["weight_elems"] == 0.0
    assert {k: row[k] for k in ("flops", "routed_elems", "tile_bytes", "active_experts")} == {
        k: hbm[k] for k in ("flops", "routed_elems", "tile_bytes", "active_experts")
    }
    # 64 tokens hit all 32 experts (302 MB): from HBM even on this GPU
    big = {**QWEN30_EP4, "num_tokens": 64}
    assert moe_row(big, bf16, "moe", 0.5, l2) == moe_row(big, bf16, "moe", 0.5)


def test_the_reader_gives_each_row_its_gpus_l2() -> None:
    (fam,) = moe_rows(system_dir("h100", DATA), "vllm")
    resident = [r for r in fam.rows if r["l2_bytes"] > 0]
    assert resident and len(resident) < len(fam.rows)
    for r in fam.rows:
        if r["l2_bytes"] > 0:
            assert r["bytes"] == 0.0 and r["l2_bytes"] <= 0.8 * 50e6
        else:
            assert r["bytes"] > 0.8 * 50e6


def test_a_serving_step_reads_its_experts_from_hbm_whatever_the_l2_term() -> None:
    prof = resolve_profile("h100", None, "vllm")

    def step_s(c_l2: float) -> float:
        return moe_decode_s(_qwen_moe(), with_fit(prof, "moe", c_l2_bytes=c_l2), 4, 4)

    assert step_s(0.0) > 0
    assert step_s(1.0) == step_s(0.0)


def test_fit_recovers_the_l2_rate_of_resident_rows() -> None:
    from twin.calibration.fit import fit_params

    peaks = get_gpu("h100").peaks()
    l2 = get_gpu("h100").l2_bytes
    params = {**TRUE, "c_l2_bytes": 1.0 / 6e12}  # read from L2 at 6 TB/s
    rows = _synthetic_rows(params, peaks, l2)
    assert sum(r["l2_bytes"] > 0 for r in rows) >= 10
    got = fit_params("moe", rows, peaks)
    assert got["c_l2_bytes"] == pytest.approx(1.0 / 6e12, rel=0.05)


def test_a_fit_written_before_the_l2_term_reads_its_rows_from_hbm() -> None:
    from twin.calibration.aic_moe import reads_replay_l2

    shipped = resolve_profile("h100", None, "vllm").kernels["moe"]
    assert reads_replay_l2(shipped.params)  # regenerated with the term (session 29)
    assert not reads_replay_l2({**shipped.params, "c_l2_bytes": 0.0})  # a fit from before
    (old,) = moe_rows(system_dir("h100", DATA), "vllm", replay_l2=False)
    (new,) = moe_rows(system_dir("h100", DATA), "vllm")
    assert all(r["l2_bytes"] == 0.0 for r in old.rows)
    assert [r["bytes"] for r in old.rows] == [r["bytes"] or r["l2_bytes"] for r in new.rows]


def test_sglang_triton_rows_above_the_local_experts_stream_at_the_large_m_rate() -> None:
    # SGLang's get_default_config: BLOCK_SIZE_M 16 up to as many tokens as the rank's
    # experts (128 / EP 4 = 32 here), 64 above; its bf16 Triton rows only.
    bf16, fp8 = WEIGHT_FORMATS["bf16"], WEIGHT_FORMATS["fp8"]
    sglang = {**QWEN30_EP4, "kernel_source": moe_ft.SGLANG_TRITON_SOURCE, "moe_dtype": "bfloat16"}
    at_e = moe_row({**sglang, "num_tokens": 32}, bf16, "moe", 0.5)
    above = moe_row({**sglang, "num_tokens": 33}, bf16, "moe", 0.5)
    assert at_e["large_m_weights"] == 0.0 and at_e["weight_elems"] > 0
    assert above["large_m_weights"] == above["weight_elems"] > 0
    vllm = {**sglang, "num_tokens": 33, "kernel_source": "vllm_unquantizedfusedmoe_triton"}
    assert moe_row(vllm, bf16, "moe", 0.5)["large_m_weights"] == 0.0
    assert moe_row({**sglang, "num_tokens": 33}, fp8, "moe_fp8", 0.5)["large_m_weights"] == 0.0


def test_a_serving_step_prices_sglangs_large_m_config_above_the_local_experts() -> None:
    prof = resolve_profile("h100", None, "sglang")
    assert prof.kernels["moe"].provenance["kernel_source"] == moe_ft.SGLANG_TRITON_SOURCE

    def step_s(c: float, batch: int, model: Any = None, ep: int = 8) -> float:
        p = with_fit(prof, "moe", c_large_m_weights=c)
        return moe_decode_s(model or _qwen_moe(), p, 8, batch, ep)

    # qwen3-235b-a22b: 128 experts over EP 8, 16 a rank
    assert step_s(1e-12, 16) == step_s(0.0, 16)
    assert step_s(1e-12, 17) > step_s(0.0, 17)
    # DeepSeek-V3 in bf16 at EP 1: SGLang fuses the shared expert into the launch
    # (moe_layout.fuses_shared_expert), so the rank holds 257 experts: large-M from 258
    v3 = override_model(get_model("deepseek-v3"), ["precision=bf16"])
    assert step_s(1e-12, 257, v3, 1) == step_s(0.0, 257, v3, 1)
    assert step_s(1e-12, 258, v3, 1) > step_s(0.0, 258, v3, 1)


def test_the_vllm_collectors_rank_0_holds_token_0s_first_expert() -> None:
    from twin.calibration.collector_routing import collector_rank0_load, table_rank_load
    from twin.costmodel.routing import ROUTINGS, RankLoad

    # 128 experts, top-4, EP 8: token 0 picks 0, 32, 64, 96, so rank 0 (experts 0-15)
    # holds one expert at 1 token and at 2, where the mean rank holds half / one.
    assert collector_rank0_load(1, 128, 4, 8) == RankLoad(1.0, 1.0)
    assert collector_rank0_load(2, 128, 4, 8) == RankLoad(1.0, 1.0)
    assert ROUTINGS["balanced"].rank_load(1, 128, 4, 8) == RankLoad(0.5, 0.5)
    # many tokens: every expert its even share, as the mean rank
    assert collector_rank0_load(4096, 128, 8, 8) == RankLoad(4096.0, 16.0)
    # only the vLLM collector's rows take it
    assert table_rank_load("sglang_fused_moe_triton", 1, 128, 4, 8) == RankLoad(0.5, 0.5)
    row = {**QWEN30_EP4, "topk": 4, "moe_ep_size": 8, "kernel_source": "vllm_x"}
    assert moe_row(row, WEIGHT_FORMATS["bf16"], "moe", 0.5)["active_experts"] == 1.0
    # a fit written before the rule (``reads_replay_l2`` False) reads the mean rank
    assert moe_row(row, WEIGHT_FORMATS["bf16"], "moe", 0.5, None, False)["active_experts"] == 0.5


# The profiles whose fused-MoE families were regenerated with the L2 and large-M terms
# (docs/decisions.md: helper moe-regen, session 28, the GPUs without rows in the serving
# sample; the lead, session 29, the serving GPUs): every profile with a fused-MoE fit.
# GB300 TensorRT-LLM's ``moe_mxfp4_mxfp8`` was kept as shipped (another helper's, s28).
REGENERATED = (
    "a100-80gb-sglang",
    "l40s-sglang",
    "l40s-trtllm",
    "l40s-vllm",
    "rtx-pro-6000-sglang",
    "rtx-pro-6000-trtllm",
    "rtx-pro-6000-vllm",
    "gb300-sglang",
    "gb300-trtllm",
    "gb300-vllm",
    *(
        f"{gpu}-{engine}"
        for gpu in ("h100", "h200", "b200", "b300", "gb200")
        for engine in ("sglang", "trtllm", "vllm")
    ),
)
SGLANG_TRITON_PROFILES = (
    "a100-80gb-sglang",
    "l40s-sglang",
    "rtx-pro-6000-sglang",
    "h100-sglang",
    "h200-sglang",
)


@pytest.mark.parametrize("name", REGENERATED)
def test_regenerated_moe_fits_keep_the_l2_and_large_m_terms(name: str) -> None:
    from twin.calibration.aic_moe import reads_replay_l2
    from twin.costmodel.formulas import get_formula
    from twin.costmodel.profile_store import PROFILES_DIR

    raw = json.loads((PROFILES_DIR / f"{name}.json").read_text())["kernels"]
    kept = "moe_mxfp4_mxfp8" if name == "gb300-trtllm" else ""
    fams = {k: f for k, f in raw.items() if k.startswith("moe") and k != kept}
    assert fams
    for kernel, fit in fams.items():
        # written with the L2 and large-M terms (the current form, or one before the
        # token tile's or the SGLang grid's terms, which reads them as 0) and read with the
        # replays' L2
        current = get_formula(kernel).model_name
        no_passes = current.replace("+routed_passes", "")
        no_grid = no_passes.replace("+grid_flops", "")
        before = no_grid.replace("+pad_flops+restream_weights", "")
        assert fit["model"] in (current, no_passes, no_grid, before), kernel
        assert reads_replay_l2(fit["params"]), kernel
    sglang_triton = fams["moe"]["provenance"]["kernel_source"] == moe_ft.SGLANG_TRITON_SOURCE
    if sglang_triton:  # the large-M config's rate fitted, well above the fit's floor
        # (a coefficient at its floor sits near 1e-21 here; A100's 0.5.10 fit, whose rows
        # carry the collector's clamped slots, fits 9.7e-14: helper moe32, session 32)
        assert fams["moe"]["params"]["c_large_m_weights"] > 1e-14
    assert sglang_triton == (name in SGLANG_TRITON_PROFILES)


# Kimi-K2.5's experts (the shape of vLLM 0.24.0's Marlin int4 tables), EP 1.
KIMI_EP1 = {
    "hidden_size": 7168,
    "inter_size": 2048,
    "topk": 8,
    "num_experts": 384,
    "moe_tp_size": 1,
    "moe_ep_size": 1,
}
VLLM_MARLIN = "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"
GPT_OSS_EP1 = {
    "hidden_size": 2880,
    "inter_size": 2880,
    "topk": 4,
    "num_experts": 128,
    "moe_tp_size": 1,
    "moe_ep_size": 1,
}


def test_vllms_marlin_moe_picks_its_row_block_from_the_tokens_per_local_expert() -> None:
    # vLLM 0.24.0 fused_marlin_moe: the first of 8/16/32/48/64 with M*topk/E/block < 0.9
    assert VLLM_MARLIN in moe_ft.VLLM_MARLIN_SOURCES
    tokens = (1, 320, 384, 512, 768, 1024, 1536, 2048, 3072, 16384)
    got = {t: moe_ft.marlin_block_m(VLLM_MARLIN, t, 8, 384) for t in tokens}
    want = (8, 8, 16, 16, 32, 32, 48, 48, 64, 64)
    assert got == dict(zip(tokens, want, strict=True))
    # E is the rank's experts: under EP 2 (192 a rank) the block grows at half the tokens
    assert moe_ft.marlin_block_m(VLLM_MARLIN, 160, 8, 192) == 8
    assert moe_ft.marlin_block_m(VLLM_MARLIN, 192, 8, 192) == 16
    # any other kernel: no block
    assert moe_ft.marlin_block_m("vllm_marlin_int4_moe", 4096, 8, 384) == 0


def test_every_vllm_marlinexperts_table_takes_the_row_block() -> None:
    # vLLM 0.24.0's collector labels a table by its experts class last: every
    # ``MarlinExperts`` table (int4 WNA16, the w4a4 mxfp4 checkpoints', gpt-oss's mxfp4 on
    # Marlin) ran ``fused_marlin_moe`` and its row block; so does the Marlin mxfp4 price
    # ``Profile.with_marlin_experts`` derives from the int4 fit (its provenance's source).
    pytest.importorskip("aiconfigurator_core")
    import pyarrow.parquet as pq

    labels: set[str] = set()
    for gpu in ("h100", "h200", "b200", "gb200", "l40s", "rtx-pro-6000"):
        table = system_dir(gpu) / "moe/vllm/0.24.0/moe_perf.parquet"
        column = pq.read_table(table, columns=["kernel_source"]).column(0).to_pylist()
        labels |= {str(s) for s in column if "_marlinexperts" in str(s)}
    assert len(labels) == 4 and labels == set(moe_ft.VLLM_MARLIN_SOURCES)
    for label in labels:
        assert moe_ft.marlin_block_m(label, 2048, 16, 896) == 48  # 36.6 rows an expert


def test_moe_expert_tiles_count_each_experts_whole_tiles() -> None:
    assert moe_ft.moe_expert_tiles(24576, 384, 64) == 384  # 64 rows each: one tile
    assert moe_ft.moe_expert_tiles(32768, 384, 64) == 384 * 2  # 85-86 each: two tiles
    assert moe_ft.moe_expert_tiles(17, 2, 8) == 1 + 2  # 8 and 9 rows
    assert moe_ft.moe_expert_tiles(2560, 384, 8) == 384  # 6-7 rows each
    assert moe_ft.moe_expert_tiles(17, 2, 0) == 0  # no tile read


def test_vllms_marlin_rows_carry_the_flops_of_their_padded_rows() -> None:
    int4 = WEIGHT_FORMATS["int4"]

    def pad(tokens: int, source: str = VLLM_MARLIN) -> float:
        shape = {**KIMI_EP1, "num_tokens": tokens, "kernel_source": source}
        return float(moe_row(shape, int4, "moe_int4_wo", 1.0)["pad_flops"])

    per_row = 2.0 * 7168 * (2 * 2048 + 2048)  # both GEMMs
    assert pad(3072) == 0.0  # 64 rows an expert in one block of 64
    assert pad(4096) == pytest.approx((384 * 128 - 4096 * 8) * per_row)  # two blocks each
    assert pad(320) == pytest.approx((384 * 8 - 320 * 8) * per_row)  # block 8
    assert pad(4096, "vllm_marlin_int4_moe") == 0.0  # 0.19.0's table: Triton WNA16
    # each block past an expert's first streams its weights again
    shape = {**KIMI_EP1, "num_tokens": 4096, "kernel_source": VLLM_MARLIN}
    again = moe_row(shape, int4, "moe_int4_wo", 1.0)["restream_weights"]
    assert again == 384 * 7168 * (2 * 2048 + 2048)


GPT_OSS_TRTLLM_GEN = "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic"


def test_flashinfers_untuned_trtllm_gen_tile_is_the_one_below_its_centre() -> None:
    # flashinfer 0.6.12 selectDefaultTileN: centre nextPowerOfTwo(t * k / local experts)
    # within 8..64, then the smallest of the centre's neighbours (-1, +1, +2)
    assert GPT_OSS_TRTLLM_GEN in moe_ft.FLASHINFER_TRTLLM_MXFP4_SOURCES
    tokens = (1, 256, 320, 512, 768, 1024, 1536, 16384)
    got = {t: moe_ft.moe_token_tile(GPT_OSS_TRTLLM_GEN, t, 4, 128, "mxfp4") for t in tokens}
    assert got == dict(zip(tokens, (8, 8, 8, 8, 16, 16, 32, 32), strict=True))
    assert moe_ft.moe_token_tile(GPT_OSS_TRTLLM_GEN, 320, 4, 64, "mxfp4") == 16  # EP 2: 64 a rank
    assert moe_ft.moe_token_tile("sglang_flashinfer_trtllm_moe", 320, 4, 128, "") == 0  # not read


def test_a_trtllm_gen_mxfp4_row_streams_each_experts_weights_once_a_tile() -> None:
    mxfp4 = WEIGHT_FORMATS["mxfp4"]
    shape = {**GPT_OSS_EP1, "kernel_source": GPT_OSS_TRTLLM_GEN}

    def again(tokens: int) -> float:
        row = moe_row({**shape, "num_tokens": tokens}, mxfp4, "moe_mxfp4", 1.0)
        return float(row["restream_weights"])

    per_expert = 2880 * (2 * 2880 + 2880)
    assert again(256) == 0.0  # 8 rows an expert: one tile of 8
    assert again(320) == 128 * per_expert  # 10 rows: two tiles of 8 (the tables' step)
    assert again(4096) == 3 * 128 * per_expert  # 128 rows: four tiles of 32


FI_CUTLASS_FP8 = "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts"
NEMOTRON_EP1 = {  # the H200 vLLM fp8 table's 1,024 x 2,688 shape (512 experts, top 22)
    "hidden_size": 1024,
    "inter_size": 2688,
    "topk": 22,
    "num_experts": 512,
    "moe_tp_size": 1,
    "moe_ep_size": 1,
}


def test_flashinfers_untuned_cutlass_moe_takes_128_rows_of_an_expert_a_tile() -> None:
    # flashinfer's fallback tactic 0: get_candidate_tiles_sm90's first grouped tile,
    # CtaShape128x16x128B, whatever the tokens
    assert moe_ft.FLASHINFER_CUTLASS_SM90_TILE_M == 128
    for tokens in (1, 2048, 3072, 16384):
        assert moe_ft.moe_token_tile(FI_CUTLASS_FP8, tokens, 22, 512, "fp8") == 128
    # the block-fp8 label (moe_fp8_block) was not read this session; Triton: no tile read
    assert (
        moe_ft.moe_token_tile("vllm_fp8moe_flashinfer_cutlass_flashinferexperts", 64, 8, 8, "fp8")
        == 0
    )
    assert moe_ft.moe_token_tile("vllm_fused_moe", 3072, 22, 512, "fp8") == 0


def test_a_cutlass_fp8_row_restreams_each_experts_weights_past_128_rows() -> None:
    fp8 = WEIGHT_FORMATS["fp8"]
    shape = {**NEMOTRON_EP1, "kernel_source": FI_CUTLASS_FP8}

    def row(tokens: int) -> dict[str, Any]:
        return moe_row({**shape, "num_tokens": tokens}, fp8, "moe_fp8", 1.0)

    per_expert = 1024 * (2 * 2688 + 2688)
    assert row(2048)["restream_weights"] == 0.0  # 88 rows an expert: one tile
    assert row(3072)["restream_weights"] == 512 * per_expert  # 132 rows: two (the step)
    assert row(2048)["pad_flops"] == pytest.approx(2.0 * (512 * 128 - 2048 * 22) * per_expert)


def test_a_serving_step_prices_vllms_marlin_padding_at_the_fitted_rate() -> None:
    prof = resolve_profile("b200", None, "vllm")
    assert prof.kernels["moe_int4_wo"].provenance["kernel_source"] == VLLM_MARLIN
    kimi = override_model(get_model("kimi-k2.5"), ["moe_precision=int4"])

    def step_s(c: float, batch: int, source: str = VLLM_MARLIN) -> float:
        p = with_fit(prof, "moe_int4_wo", {"kernel_source": source}, c_pad_flops=c)
        return moe_decode_s(kimi, p, 8, batch)

    assert step_s(1e-13, 64) > step_s(0.0, 64)
    # another kernel's fit: the term reads 0 whatever its coefficient
    assert step_s(1e-13, 64, "vllm_marlin_int4_moe") == step_s(0.0, 64, "vllm_marlin_int4_moe")


@pytest.mark.parametrize(
    ("gpu", "family"),
    [(g, f) for g in ("b200", "b300", "gb200", "gb300") for f in ("moe_int4_wo", "moe_mxfp4")]
    + [("h100", "moe_fp8"), ("h200", "moe_fp8")],
)
def test_the_vllm_token_tile_fits_meet_the_kernel_target(gpu: str, family: str) -> None:
    # regenerated with the token tile's terms (helpers moe30, moe-tile30, session 30):
    # vLLM's Marlin int4, FlashInfer TRT-LLM-gen mxfp4 and FlashInfer CUTLASS fp8 tables,
    # held out <= 5% median, <= 15% P90
    from twin.costmodel.formulas import get_formula

    fit = resolve_profile(gpu, None, "vllm").kernels[family]
    assert fit.model == get_formula(family).model_name
    assert fit.provenance["kernel_source"] in (
        moe_ft.VLLM_MARLIN_SOURCES
        | moe_ft.FLASHINFER_TRTLLM_MXFP4_SOURCES
        | moe_ft.FLASHINFER_CUTLASS_SM90_SOURCES
    )
    assert fit.params["c_pad_flops"] > 1e-16 and fit.params["c_restream_weights"] > 1e-15
    assert fit.heldout_median_rel_err is not None and fit.heldout_p90_rel_err is not None
    assert fit.heldout_median_rel_err <= 0.05 and fit.heldout_p90_rel_err <= 0.15


def test_sglangs_marlin_moe_takes_vllms_row_block() -> None:
    # sglang 0.5.10 / 0.5.14 fused_marlin_moe: the same loop over M * topk / E (E the rank's
    # experts); the table label the SGLang collector writes for it takes the block, and a
    # table row carries the padded rows' FLOPs (helper moe36, session 36)
    sglang = "sglang_marlin_moe"
    assert sglang in moe_ft.MARLIN_MOE_SOURCES and sglang not in moe_ft.VLLM_MARLIN_SOURCES
    for t in (320, 384, 3072, 4096):
        assert moe_ft.marlin_block_m(sglang, t, 8, 384) == moe_ft.marlin_block_m(
            VLLM_MARLIN, t, 8, 384
        )
    int4 = WEIGHT_FORMATS["int4"]

    def pad(tokens: int, source: str = sglang) -> float:
        shape = {**KIMI_EP1, "num_tokens": tokens, "kernel_source": source}
        return float(moe_row(shape, int4, "moe_int4_wo", 1.0)["pad_flops"])

    per_row = 2.0 * 7168 * (2 * 2048 + 2048)
    assert pad(3072) == 0.0  # 64 rows an expert: one block of 64
    assert pad(4096) == pytest.approx((384 * 128 - 4096 * 8) * per_row)  # two blocks each
    assert pad(4096, "sglang_fused_moe_triton") == 0.0  # SGLang's Triton int4: not Marlin


def test_sglangs_int4_experts_on_sm100_take_flashinfers_untuned_mxint4_tile() -> None:
    # SGLang 0.5.14's mxint4 experts call FlashInfer 0.6.12's trtllm_mxint4_block_scale_moe
    # without a tactic: one tile below the rows an expert's next power of two, tiles 8-128
    # (helper moe36, session 36); the label's other formats keep no tile
    label = moe_ft.SGLANG_FLASHINFER_TRTLLM_SOURCE
    tokens = (1, 320, 1536, 2048, 3072, 4096, 16384)
    got = {t: moe_ft.moe_token_tile(label, t, 8, 384, "int4_wo") for t in tokens}
    assert got == dict(zip(tokens, (8, 8, 16, 32, 32, 64, 64), strict=True))  # 128 centres only
    assert moe_ft.moe_token_tile(label, 4096, 8, 384, "nvfp4") == 0
    assert moe_ft.moe_token_tile(label, 4096, 8, 384, "") == 0
    int4 = WEIGHT_FORMATS["int4"]

    def row(tokens: int) -> dict[str, Any]:
        return moe_row(
            {**KIMI_EP1, "num_tokens": tokens, "kernel_source": label}, int4, "moe_int4_wo", 1.0
        )

    per_expert = 7168 * (2 * 2048 + 2048)
    assert row(3072)["pad_flops"] == 0.0  # 64 rows an expert: two tiles of 32, full
    assert row(3072)["restream_weights"] == 384 * per_expert  # each expert's second tile
    assert row(4096)["pad_flops"] == pytest.approx(2.0 * (384 * 128 - 4096 * 8) * per_expert)


@pytest.mark.parametrize(
    "gpu", ["h200", "h100", "l40s", "rtx-pro-6000", "a100-80gb", "b200", "b300", "gb200", "gb300"]
)
def test_the_sglang_int4_token_tile_fits_meet_the_kernel_target(gpu: str) -> None:
    # regenerated with SGLang's Marlin row block or FlashInfer's untuned MxInt4 tile (helper
    # moe36, session 36): held out <= 5% median, <= 15% P90, the tile's terms fitted
    from twin.costmodel.formulas import get_formula

    fit = resolve_profile(gpu, None, "sglang").kernels["moe_int4_wo"]
    assert fit.model == get_formula("moe_int4_wo").model_name
    assert fit.provenance["kernel_source"] in (
        moe_ft.SGLANG_MARLIN_SOURCES | {moe_ft.SGLANG_FLASHINFER_TRTLLM_SOURCE}
    )
    assert fit.params["c_pad_flops"] > 1e-16 and fit.params["c_restream_weights"] > 1e-15
    assert fit.heldout_median_rel_err is not None and fit.heldout_p90_rel_err is not None
    assert fit.heldout_median_rel_err <= 0.05 and fit.heldout_p90_rel_err <= 0.15


MXFP8 = moe_ft.MXFP8_ACTIVATION_MODE  # the tables' mode of the mxfp4 x mxfp8 experts


def test_tensorrt_llms_untuned_mxfp8_runner_takes_its_centre_tile() -> None:
    # TensorRT-LLM mxFp4BlockScaleMoe.cpp MxE4m3MxE2m1BlockScaleMoeRunner::run without a
    # tactic: clamp(nextPowerOfTwo(t * k / local experts)) over 8..256, not the tile below it
    # (helper moe37, session 37)
    src = moe_ft.TRTLLM_MOE_SOURCE
    tokens = (1, 256, 320, 1024, 2048, 16384)  # 0.03, 8, 10, 32, 64, 512 rows an expert
    got = {t: moe_ft.moe_token_tile(src, t, 4, 128, MXFP8) for t in tokens}
    assert got == dict(zip(tokens, (8, 8, 16, 32, 64, 256), strict=True))
    assert moe_ft.moe_token_tile(src, 320, 4, 16, MXFP8) == 128  # EP 8: every token over 16 experts
    assert moe_ft.moe_token_tile(src, 320, 4, 128, "mxfp4") == 0  # bf16 activations: not read


def test_flashinfers_untuned_fp4_launcher_tile_reaches_vllms_nvfp4_and_sglangs_mxfp8_rows() -> None:
    # flashinfer 0.6.12 FP4BlockScaleLauncher, nvfp4 or mxfp8 activations: tiles 8..256, the
    # one below the centre (helper moe37, session 37)
    (nvfp4,) = moe_ft.FLASHINFER_TRTLLM_NVFP4_SOURCES
    # 4,096 x 1,024 experts, 512, top 10, EP 16 (32 a rank): the tables' tile-64 launches
    assert [moe_ft.moe_token_tile(nvfp4, t, 10, 32, "nvfp4") for t in (192, 256, 512, 4096)] == [
        32,
        64,
        128,
        128,
    ]
    sglang = moe_ft.SGLANG_FLASHINFER_TRTLLM_SOURCE
    assert moe_ft.moe_token_tile(sglang, 320, 4, 16, MXFP8) == 64  # centre 128
    assert moe_ft.moe_token_tile(sglang, 320, 4, 16, "mxfp4") == 0  # its bf16 activations: not read


def test_an_mxfp8_table_row_pads_each_expert_to_the_runners_tile() -> None:
    mxfp4 = WEIGHT_FORMATS["mxfp4"]
    shape = {**GPT_OSS_EP1, "num_tokens": 320, "kernel_source": moe_ft.TRTLLM_MOE_SOURCE}
    per_expert = 2880 * (2 * 2880 + 2880)
    row = moe_row(shape, mxfp4, "moe_mxfp4_mxfp8", 1.0, table_mode=MXFP8)
    assert row["pad_flops"] == pytest.approx(2.0 * (128 * 16 - 320 * 4) * per_expert)  # 10 of 16
    assert row["restream_weights"] == 0.0
    # read as the bf16-activation experts' row (their format's mode): no tile
    assert moe_row(shape, mxfp4, "moe_mxfp4_mxfp8", 1.0)["pad_flops"] == 0.0


def test_a_serving_step_reads_the_mxfp8_tile_where_the_mxfp8_fit_prices_the_experts() -> None:
    from twin.engine.run_pricing import priced_profile

    gpt_oss = get_model("gpt-oss-120b")
    b200 = resolve_profile("b200", None, "trtllm")
    priced = CostModel(gpt_oss, priced_profile(gpt_oss, b200, "trtllm"), tp=1)
    assert priced._moe_tile_mode == MXFP8  # TensorRT-LLM's W4A8_MXFP4_MXFP8 experts
    assert CostModel(gpt_oss, b200, tp=1)._moe_tile_mode == "mxfp4"  # their own fit


@pytest.mark.parametrize(
    ("profile", "family"),
    [(f"{g}-trtllm", "moe_mxfp4_mxfp8") for g in ("b200", "b300", "gb200", "gb300")]
    + [("b200-vllm", "moe_mxfp4_mxfp8")],
)
def test_the_mxfp8_token_tile_fits_meet_the_kernel_target(profile: str, family: str) -> None:
    # regenerated with the runner's tile (helper moe37, session 37): held out <= 5% median,
    # <= 15% P90, the tile's terms fitted
    from twin.costmodel.formulas import get_formula

    gpu, engine = profile.rsplit("-", 1)
    fit = resolve_profile(gpu, None, engine).kernels[family]
    assert fit.model == get_formula(family).model_name
    assert fit.params["c_pad_flops"] > 1e-16 and fit.params["c_restream_weights"] > 1e-15
    assert fit.heldout_median_rel_err is not None and fit.heldout_p90_rel_err is not None
    assert fit.heldout_median_rel_err <= 0.05 and fit.heldout_p90_rel_err <= 0.15


def test_tensorrt_llms_hopper_triton_moe_takes_its_routings_row_block() -> None:
    # fused_moe_triton.py TritonEPRouter: the routing over the rank's experts, every token's
    # gates; triton_kernels' block max(16, min(next_pow2(gates // experts), 128)) (helper moe37)
    src, h200 = moe_ft.TRTLLM_MOE_SOURCE, "NVIDIA H200"
    got = [
        moe_ft.trtllm_triton_block_m(src, h200, "mxfp4", t, 4, 128) for t in (1, 640, 2048, 8192)
    ]
    assert got == [16, 32, 64, 128]  # 0, 20, 64, 256 gates an expert
    assert moe_ft.trtllm_triton_block_m(src, h200, "mxfp4", 320, 4, 16) == 128  # EP 8: 80 -> 128
    assert (
        moe_ft.trtllm_triton_block_m(src, "NVIDIA B200", "mxfp4", 640, 4, 128) == 0
    )  # TRT-LLM-gen
    assert moe_ft.trtllm_triton_block_m(src, h200, MXFP8, 640, 4, 128) == 0
    mxfp4 = WEIGHT_FORMATS["mxfp4"]
    shape = {**GPT_OSS_EP1, "num_tokens": 640, "kernel_source": src, "device": h200}
    row = moe_row(shape, mxfp4, "moe_mxfp4", 1.0)
    per_expert = 2880 * (2 * 2880 + 2880)
    assert row["pad_flops"] == pytest.approx(2.0 * (128 * 32 - 640 * 4) * per_expert)


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_hopper_trtllm_mxfp4_fits_meet_the_kernel_target(gpu: str) -> None:
    fit = resolve_profile(gpu, None, "trtllm").kernels["moe_mxfp4"]
    assert fit.provenance["kernel_source"] == moe_ft.TRTLLM_MOE_SOURCE
    assert fit.params["c_pad_flops"] > 1e-16 and fit.params["c_restream_weights"] > 1e-15
    assert fit.heldout_median_rel_err is not None and fit.heldout_p90_rel_err is not None
    assert fit.heldout_median_rel_err <= 0.05 and fit.heldout_p90_rel_err <= 0.15
