"""The reference executor's MoE FFN: Qwen3-Next's routing rule, checked against a dense
computation, and MoE layers in the plan of both pattern and counts specs (issue 13)."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from twin.presets import get_model  # noqa: E402
from twin.reference.model import HybridLM, layer_plan  # noqa: E402
from twin.reference.moe import moe_forward, route  # noqa: E402

F64 = torch.float64


def test_route_keeps_the_top_k_of_the_softmax_renormalised() -> None:
    router = torch.eye(4, dtype=F64)  # logits = the token's own features
    h = torch.tensor([[3.0, 1.0, 2.0, 0.0]], dtype=F64)
    weights, experts = route(h, router, 2)
    assert experts.tolist() == [[0, 2]]
    # softmax over all four, top two kept and renormalised = softmax over (3, 2)
    e = torch.exp(torch.tensor([3.0, 2.0], dtype=F64))
    assert torch.allclose(weights.double(), (e / e.sum())[None], atol=1e-7)


def _dense(lm: HybridLM, h: torch.Tensor, w: dict[str, torch.Tensor]) -> torch.Tensor:
    """Every expert on every token, weighted by the routing weight (0 when not chosen)."""
    m, x = lm.spec, h[0]
    probs = torch.softmax(x @ w["router"].T, dim=-1)
    top = probs.topk(m.moe_top_k, dim=-1)
    gates = torch.zeros_like(probs).scatter(1, top.indices, top.values)
    gates = gates / gates.sum(dim=-1, keepdim=True)
    out = sum(
        gates[:, e, None] * lm._mlp(x, {"up": w["up"][e], "down": w["down"][e]})
        for e in range(m.moe_n_experts)
    )
    shared = lm._mlp(x, {"up": w["shared_up"], "down": w["shared_down"]})
    return (out + torch.sigmoid(x @ w["shared_gate"].T) * shared)[None]


def test_moe_forward_equals_every_expert_weighted_by_its_gate() -> None:
    lm = HybridLM(get_model("tiny-moe-hybrid"), "cpu", F64, seed=1)
    w = lm.layers[lm.plan.index("moe")]
    h = torch.randn(1, 30, 64, dtype=F64, generator=torch.Generator().manual_seed(4))
    got = moe_forward(h, w, lm.spec.moe_top_k, lm._mlp)
    assert torch.allclose(got, _dense(lm, h, w), atol=1e-12)
    # the shared expert and the routing both matter (the comparison could fail)
    no_shared = {k: v for k, v in w.items() if not k.startswith("shared")}
    assert not torch.allclose(moe_forward(h, no_shared, 2, lm._mlp), got, atol=1e-6)
    assert not torch.allclose(moe_forward(h, w, 1, lm._mlp), got, atol=1e-6)


def test_counts_specs_spread_their_moe_layers_among_the_ffns() -> None:
    spec = dataclasses.replace(
        get_model("tiny-hybrid"),
        n_mlp_layers=2,
        n_moe_layers=2,
        moe_n_experts=4,
        moe_top_k=2,
        moe_d_ff=32,
    )
    plan = layer_plan(spec)
    assert plan.count("moe") == 2 and plan.count("mlp") == 2
    assert [k for k in plan if k in ("mlp", "moe")] == ["mlp", "moe", "mlp", "moe"]
    assert plan.count("attention") == 1 and plan.count("ssm") == 3
    lm = HybridLM(spec, "cpu", F64, seed=0)
    assert torch.isfinite(lm.forward(torch.arange(20)).logits).all()


def test_the_cost_model_prices_the_shared_expert_as_a_dense_mlp() -> None:
    """Each MoE layer's GEMMs grow by exactly a dense MLP of the shared expert's width."""
    from twin.costmodel import CostModel
    from twin.costmodel.profile_store import load_profile

    prof = load_profile("h100")
    spec = get_model("qwen3.5-35b-a3b")
    no_shared = dataclasses.replace(spec, moe_shared_d_ff=0)
    dense = dataclasses.replace(
        spec,
        layers=("gdn/mlp",),
        mlp_d_ff=spec.moe_shared_d_ff,
        **dict.fromkeys(("n_attention_layers", "n_ssm_layers", "n_mlp_layers", "n_moe_layers"), 0),
    )

    def gemm(m, kind):
        return CostModel(m, prof).prefill(2048, 0, breakdown=True).items[kind]["gemm"]

    added = (gemm(spec, "moe") - gemm(no_shared, "moe")) / spec.n_moe_layers  # one layer
    assert added > 0
    assert added == pytest.approx(gemm(dense, "mlp"), rel=1e-12)


def test_layer_overhead_is_measured_on_a_patterned_moe_hybrid() -> None:
    """One layer of each kind is timed (before, a pattern spec could not be cut down)."""
    from twin.calibration.overhead import measure_layer_overhead, one_of_each
    from twin.costmodel.profile_store import load_profile

    spec = get_model("tiny-moe-hybrid")
    one = one_of_each(spec)
    assert one.layers == ("gdn/moe", "mamba2/moe", "swa/moe", "attention/moe", "swa/mlp")
    jamba = one_of_each(get_model("jamba-1.5-mini"))
    assert jamba.layers == ("mamba1/mlp", "mamba1/moe", "attention/mlp")
    entry = measure_layer_overhead(spec, load_profile("cpu"), "cpu", repeats=2)
    assert set(entry["seconds"]) == {"attention", "ssm", "mlp", "moe", "head"}
    assert all(s >= 0 for s in entry["seconds"].values())
