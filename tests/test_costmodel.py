"""CostModel: monotone, additive across layer kinds, consistent with the kernel formulas."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twin.costmodel import KINDS, CostModel, StepCost
from twin.costmodel import features as ft
from twin.costmodel import latency as lat
from twin.costmodel.profile_store import load_profile
from twin.errors import TwinError
from twin.presets import get_model

H100 = load_profile("h100-datasheet")  # the formulas' tests use the documented roofline
MODELS = [
    "marconi-hybrid-7b",
    "llama-3-8b",
    "jamba-1.5-mini",
    "mamba2-2.7b",
    "zamba2-7b",
    "nemotron-h-8b",
    "tiny-hybrid",
]


@pytest.fixture(scope="module", params=MODELS)
def cm(request: pytest.FixtureRequest) -> CostModel:
    return CostModel(get_model(request.param), H100)


def test_provenance_is_the_profiles_label(cm: CostModel) -> None:
    assert cm.provenance == "datasheet roofline (uncalibrated)"


def test_monotone_in_new_tokens_and_context(cm: CostModel) -> None:
    lengths = [1, 2, 16, 100, 512, 2048, 8192]
    for c in (0, 1000, 30000):
        times = [cm.prefill(n, c) for n in lengths]
        assert times == sorted(times) and len(set(times)) == len(times)
    for n in (1, 300, 4096):
        times = [cm.prefill(n, c) for c in (0, 10, 1000, 20000, 100000)]
        assert times == sorted(times)
    dec = [cm.decode([ctx] * 8) for ctx in (0, 100, 1000, 10000, 100000)]
    assert dec == sorted(dec)
    batch = [cm.decode([2000] * b) for b in (1, 2, 8, 64, 256)]
    assert batch == sorted(batch) and len(set(batch)) == len(batch)


def test_cached_prefix_never_makes_a_prefill_slower(cm: CostModel) -> None:
    for total in (16, 1000, 4096, 32768):
        scratch = cm.prefill(total, 0)
        for cached in (1, total // 4, total // 2, total - 1):
            assert cm.prefill(total - cached, cached) <= scratch


@settings(max_examples=60, deadline=None)
@given(
    prefills=st.lists(st.tuples(st.integers(1, 4096), st.integers(0, 50000)), max_size=4),
    decodes=st.lists(st.integers(0, 50000), max_size=64),
    extra=st.integers(1, 512),
)
def test_step_is_monotone_and_additive(prefills, decodes, extra) -> None:
    cm = CostModel(get_model("marconi-hybrid-7b"), H100)
    base = cm.step(prefills, decodes)
    assert isinstance(base, float) and base >= 0.0
    # One more prefill token, a longer context, or one more sequence never costs less.
    if prefills:
        (n, c), rest = prefills[0], prefills[1:]
        assert cm.step([(n + extra, c), *rest], decodes) >= base
        assert cm.step([(n, c + extra), *rest], decodes) >= base
    if decodes:
        assert cm.step(prefills, [decodes[0] + extra, *decodes[1:]]) >= base
    assert cm.step(prefills, [*decodes, 0]) >= base
    cost = cm.step(prefills, decodes, breakdown=True)
    assert isinstance(cost, StepCost)
    assert math.isclose(cost.total_s, base, rel_tol=1e-9, abs_tol=1e-15)
    assert math.isclose(sum(cost.by_kind.values()), base, rel_tol=1e-9, abs_tol=1e-15)
    assert math.isclose(sum(cost.by_kernel.values()), base, rel_tol=1e-9, abs_tol=1e-15)


def test_additive_across_layer_kinds() -> None:
    """A layer kind's share scales with its layer count; the others do not move."""
    base = get_model("marconi-hybrid-7b")
    more = dataclasses.replace(base, name="more-ssm", n_ssm_layers=2 * base.n_ssm_layers)
    a = CostModel(base, H100).step([(1024, 2048)], [4000] * 16, breakdown=True)
    b = CostModel(more, H100).step([(1024, 2048)], [4000] * 16, breakdown=True)
    assert isinstance(a, StepCost) and isinstance(b, StepCost)
    assert b.by_kind["ssm"] == pytest.approx(2 * a.by_kind["ssm"])
    for kind in ("attention", "mlp", "head"):
        assert b.by_kind[kind] == pytest.approx(a.by_kind[kind])
    assert set(a.by_kind) == set(KINDS) and a.by_kind["moe"] == 0.0


def test_kernel_prices_match_the_profile_formulas() -> None:
    """The cost model's attention term is the formula on the features the harness records."""
    m = get_model("llama-3-8b")
    cm = CostModel(m, H100)
    cost = cm.prefill(3000, 5000, breakdown=True)
    assert isinstance(cost, StepCost)
    f, b, ex = ft.attn_prefill_features(3000, 5000, m.n_heads, m.n_kv_heads, m.head_dim, 2)
    fit = H100.kernels["attn_prefill"]
    expect = m.n_attention_layers * lat.predict("attn_prefill", fit.params, H100.peaks, f, b, ex)
    assert cost.items["attention"]["attn_prefill"] == pytest.approx(expect, rel=1e-12)
    dec = cm.decode([999] * 7, breakdown=True)
    assert isinstance(dec, StepCost)
    # The launch's waves at the GPU's SMs (``waves_d``), as the fit's rows carry them.
    f, b, ex = ft.attn_decode_features(7, 1000, m.n_heads, m.n_kv_heads, m.head_dim, 2, sms=cm.sms)
    expect = m.n_attention_layers * lat.predict(
        "attn_decode", H100.kernels["attn_decode"].params, H100.peaks, f, b, ex
    )
    assert dec.items["attention"]["attn_decode"] == pytest.approx(expect, rel=1e-12)


def test_scan_is_independent_of_the_cached_context() -> None:
    cm = CostModel(get_model("mamba2-2.7b"), H100)
    assert cm.prefill(2048, 0) == cm.prefill(2048, 100000)  # only the state is read


def test_tensor_parallel_divides_work_and_adds_allreduce() -> None:
    m = get_model("llama-3-8b")
    one, four = CostModel(m, H100, tp=1), CostModel(m, H100, tp=4)
    assert four.prefill(8192) < one.prefill(8192) / 2
    cost = four.step([(512, 0)], [], breakdown=True)
    assert isinstance(cost, StepCost) and cost.by_kernel["allreduce"] > 0
    assert "allreduce" not in one.step([(512, 0)], [], breakdown=True).by_kernel
    with pytest.raises(TwinError, match="does not divide"):
        CostModel(m, H100, tp=3)


def test_copies_and_transfers() -> None:
    m = get_model("marconi-hybrid-7b")
    cm = CostModel(m, H100)
    one = cm.checkpoint_copy_s(1)
    assert 0 < one < cm.checkpoint_copy_s(4)
    # Host link (64 GB/s) is far slower than HBM (3.35 TB/s).
    assert cm.kv_transfer_s(4096, "host", "device") > 10 * cm.kv_transfer_s(
        4096, "device", "device"
    )
    assert cm.copy_s(0) == 0.0
    with pytest.raises(TwinError, match="no copy from 'host' to 'host'"):
        cm.copy_s(1e6, "host", "host")


def test_bad_inputs_are_refused() -> None:
    cm = CostModel(get_model("tiny-hybrid"), H100)
    assert cm.prefill(0, 10) == 0.0 and cm.step() == 0.0
    with pytest.raises(TwinError, match="n_new"):
        cm.prefill(-1)
    with pytest.raises(TwinError, match="prefill chunk"):
        cm.step([(0, 5)])
    with pytest.raises(TwinError, match="tp must be"):
        CostModel(get_model("tiny-hybrid"), H100, tp=0)


def test_sliding_window_caps_attention_cost() -> None:
    m = dataclasses.replace(get_model("llama-3-8b"), name="windowed", sliding_window=4096)
    cm = CostModel(m, H100)
    a = cm.prefill(512, 50000, breakdown=True)
    b = cm.prefill(512, 500000, breakdown=True)
    assert isinstance(a, StepCost) and isinstance(b, StepCost)
    assert a.by_kind["attention"] == pytest.approx(b.by_kind["attention"])


def test_tensorrt_llms_measured_attention_carries_rope_so_no_pass_is_priced_apart() -> None:
    # TensorRT-LLM's attention op (and its rows in NVIDIA's tables) applies RoPE itself;
    # vLLM's profile and a datasheet one price RoPE as an element-wise pass of its own.
    model = get_model("llama-3-8b")
    trt = load_profile("h100-trtllm")
    as_vllm = dataclasses.replace(trt, provenance={**trt.provenance, "engine": "vllm"})
    fused, apart = CostModel(model, trt), CostModel(model, as_vllm)
    assert fused.rope_in_attention and not apart.rope_in_attention
    assert not CostModel(model, H100).rope_in_attention
    assert not CostModel(model, load_profile("h100-vllm")).rope_in_attention
    t, d = 512, model.d_model
    elem = fused._k["elementwise"]
    heads = model.n_heads * model.head_dim
    kv = model.n_kv_heads * model.head_dim
    rope = elem(0.0, model.dtype_bytes * 2.0 * t * (heads + kv))
    assert rope > 0 and d > 0
    gap = apart.prefill(t, breakdown=True).by_kernel["elementwise"]
    gap -= fused.prefill(t, breakdown=True).by_kernel["elementwise"]
    assert gap == pytest.approx(model.n_attention_layers * rope)
    # Only the element-wise part moves: GEMMs and attention are the same fits.
    for kernel in ("gemm", "attn_prefill"):
        assert fused.prefill(t, breakdown=True).by_kernel[kernel] == pytest.approx(
            apart.prefill(t, breakdown=True).by_kernel[kernel]
        )
