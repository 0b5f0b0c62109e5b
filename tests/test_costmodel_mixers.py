"""The cost model prices each mixer kind with its own kernel (issue 13)."""

from __future__ import annotations

import dataclasses

import pytest
from test_mixers import NEW

from twin.costmodel import CostModel, StepCost
from twin.costmodel import mixer_kernels as mk
from twin.costmodel.profile import KernelFit
from twin.costmodel.profile_store import load_profile
from twin.presets import get_model

H100 = load_profile("h100-datasheet")


def _items(cm: CostModel, prefills=((4096, 0),), decodes=()) -> dict[str, dict[str, float]]:
    cost = cm.step(prefills, decodes, breakdown=True)
    assert isinstance(cost, StepCost)
    return cost.items


def test_each_kind_has_its_own_kernels() -> None:
    gdn = _items(CostModel(get_model("qwen3.5-9b"), H100), decodes=(1000,))
    assert {"gdn_chunk", "gdn_step", "conv1d", "gemm"} <= set(gdn["gdn"])
    assert "ssm_scan" not in str(gdn)
    m1 = _items(CostModel(get_model("jamba-1.5-mini"), H100), decodes=(1000,))
    assert {"mamba1_scan", "mamba1_step", "conv1d"} <= set(m1["mamba1"])
    assert "ssm" not in m1
    swa = _items(CostModel(get_model("gpt-oss-20b"), H100), decodes=(1000,))
    assert {"attn_prefill", "attn_decode"} <= set(swa["swa"]) & set(swa["attention"])
    falcon = _items(CostModel(get_model("falcon-h1-7b"), H100))
    assert "ssm_scan" in falcon["ssm"] and "attn_prefill" in falcon["attention"]


def test_sliding_window_layers_stop_growing_past_the_window() -> None:
    cm = CostModel(get_model("gpt-oss-20b"), H100)  # window 128
    short, long = _items(cm, (), (1000,)), _items(cm, (), (100_000,))
    assert long["swa"]["attn_decode"] == pytest.approx(short["swa"]["attn_decode"])
    assert long["attention"]["attn_decode"] > 10 * short["attention"]["attn_decode"]
    # A prefill chunk after a long cached prefix reads only the window on swa layers.
    far, near = _items(cm, ((512, 50_000),)), _items(cm, ((512, 1_000),))
    assert far["swa"]["attn_prefill"] == pytest.approx(near["swa"]["attn_prefill"])


def test_mamba1_scan_runs_on_fp32_cuda_cores() -> None:
    jamba = get_model("jamba-1.5-mini")
    cm = CostModel(jamba, H100)
    assert cm.fallback_kernels == ["mamba1_scan", "mamba1_step"]
    slow = dataclasses.replace(H100, peaks={**H100.peaks, "fp32_flops": 67e12 / 4})
    scan = _items(cm)["mamba1"]["mamba1_scan"]
    slower = _items(CostModel(jamba, slow))["mamba1"]["mamba1_scan"]
    assert slower > 2 * scan  # compute-bound on the fp32 peak, which the tensor peak leaves
    assert mk.fp32_peak(H100) == 67e12  # H100 SXM datasheet, not the tensor-core 989e12
    # Priced as Mamba-2 (the twin before issue 13) the same layers came out cheaper.
    as_m2 = dataclasses.replace(
        jamba, layers=tuple(t.replace("mamba1", "mamba2") for t in jamba.layers)
    )
    assert CostModel(as_m2, H100).prefill(8192) < cm.prefill(8192)


def test_a_profiles_own_fit_replaces_the_fallback() -> None:
    m = get_model("tiny-gdn-hybrid")
    base = CostModel(m, H100)
    fit = KernelFit(
        model="roofline+chunks",
        params={**mk.FALLBACK["gdn_chunk"], "t0_s": 1.0},  # a 1 s launch: unmistakable
    )
    prof = dataclasses.replace(H100, kernels={**H100.kernels, "gdn_chunk": fit})
    cm = CostModel(m, prof)
    assert cm.fallback_kernels == ["gdn_step"]
    assert cm.prefill(100) == pytest.approx(base.prefill(100) + 3 * (1.0 - 6 * 5e-6))


def test_counts_and_pattern_price_the_same() -> None:
    counts = get_model("tiny-hybrid")
    pattern = dataclasses.replace(
        counts,
        n_attention_layers=0,
        n_ssm_layers=0,
        n_mlp_layers=0,
        layers=("attention/mlp",) + ("mamba2/mlp",) * 3,
    )
    a, b = CostModel(counts, H100), CostModel(pattern, H100)
    for pre, dec in (([(300, 20)], [5, 900]), ([(1, 0)], []), ([], [40])):
        assert a.step(pre, dec) == b.step(pre, dec)


@pytest.mark.parametrize("name", [*NEW, "jamba-1.5-mini"])
def test_new_presets_price_monotone(name: str) -> None:
    cm = CostModel(get_model(name), H100)
    assert 0 < cm.prefill(1024) < cm.prefill(4096) < cm.prefill(16384)
    assert cm.prefill(1024, 8192) < cm.prefill(9216)
    assert cm.decode([1000] * 8) < cm.decode([1000] * 64)


def test_gdn_chunk_on_a_measured_gpu_takes_its_sequential_pass_or_its_chunk_heads() -> None:
    """NVIDIA's SGLang GDN table (B200): a long prompt's chunks run one after another, so
    one 8,192-token prompt costs its 128 chunks' pass; four prompts of 2,048 tokens (the
    same tokens, a quarter of the depth) cost their chunk-heads, less than the one prompt."""
    m = get_model("qwen3.5-397b-a17b")
    b200 = load_profile("b200")
    cm = CostModel(m, b200, 4)
    layers = cm.kinds["gdn"]
    one = _items(cm, ((8192, 0),))["gdn"]["gdn_chunk"]
    assert one == pytest.approx(layers * mk.GDN_CHUNK_SEQ_S["b200"] * 8192 / 64)
    four = _items(cm, ((2048, 0),) * 4)["gdn"]["gdn_chunk"]
    assert four < 0.75 * one
    # NVIDIA's table at this shape (tp 4: 16 value heads, batch 1, 8,192 tokens): 0.434 ms.
    assert one / layers == pytest.approx(0.434e-3, rel=0.05)
    # A GPU without a table keeps the datasheet roofline: no sequential pass, no
    # chunk-head term.
    assert mk.fallback_params("gdn_chunk", "h100") == mk.FALLBACK["gdn_chunk"]
    plain = CostModel(m, load_profile("h100"), 4)
    assert plain.gdn_seq_s == 0.0
