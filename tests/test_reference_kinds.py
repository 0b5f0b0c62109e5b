"""The reference executor runs every mixer kind with real states through the twin's cache:
reuse is exact (issue 13)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_reference import _executor, _rel, serve_traffic  # noqa: E402

from twin.cache.kinds import KindBytes  # noqa: E402
from twin.presets import get_model  # noqa: E402
from twin.reference.executor import ExecutorConfig, ReferenceExecutor  # noqa: E402
from twin.reference.model import HybridLM, SeqState, layer_plan  # noqa: E402

F64 = torch.float64
KINDS = [
    "tiny-gdn-hybrid",
    "tiny-mamba1-hybrid",
    "tiny-parallel",
    "tiny-swa",
    "tiny-swa-hybrid",
    "tiny-moe-hybrid",
]


def test_layer_plan_follows_the_pattern() -> None:
    assert layer_plan(get_model("tiny-gdn-hybrid")) == ["gdn", "mlp"] * 3 + ["attention", "mlp"]
    assert layer_plan(get_model("tiny-parallel")) == ["attention+ssm", "mlp"] * 3
    assert layer_plan(get_model("tiny-swa"))[:3] == ["swa", "mlp", "swa"]


@pytest.mark.parametrize(
    "name",
    ["tiny-hybrid", "tiny-gdn-hybrid", "tiny-mamba1-hybrid", "tiny-parallel", "tiny-moe-hybrid"],
)
def test_resuming_from_states_equals_one_pass(name: str) -> None:
    lm = HybridLM(get_model(name), "cpu", F64, seed=3)
    ids = torch.randint(0, 512, (45,), generator=torch.Generator().manual_seed(0))
    whole = lm.forward(ids, stops=[19])
    first = lm.forward(ids[:19])
    rest = lm.forward(ids[19:], SeqState(first.kv, first.ssm_end))
    assert _rel(rest.logits, whole.logits) < 1e-12
    for (s1, c1), (s2, c2) in zip(whole.ssm_at[19], first.ssm_end, strict=True):
        assert torch.allclose(s1, s2, atol=1e-12) and torch.allclose(c1, c2, atol=1e-12)


@pytest.mark.parametrize("name", KINDS)
def test_hits_stay_exact_through_evictions(name: str) -> None:
    spec = get_model(name)
    kinds = KindBytes(spec)
    per_token = kinds.full_kv_per_token + kinds.swa_kv_per_token
    ex = _executor(name, "sglang+", 90 * per_token + 3 * kinds.state_bytes)
    worst, hits = serve_traffic(ex, 10, 5, (2, 40), 0.6, (15, 8), lambda ex: ex.cache.verify())
    assert hits >= 3 and ex.cache.evictions > 0
    assert worst < 1e-10
    if get_model(name).mixer_counts.get("swa"):  # the old window KV really is gone from the store
        assert any(torch.isnan(k).any() for t in ex.store.nodes.values() for k, _ in t.kv)


def test_a_hit_inside_a_dropped_window_would_be_caught(monkeypatch) -> None:
    """Without the back-off of the sliding-window hit rule, the dropped KV is read."""
    monkeypatch.setattr(KindBytes, "hit_inside_ok", lambda self, n, off: True)
    ex = _executor("tiny-swa", "sglang+", 10**9)
    rng = np.random.default_rng(5)
    first = rng.integers(0, 500, 60).astype(np.int32)
    ex.serve(first, rng.integers(0, 500, 3).astype(np.int32))
    prompt = np.r_[first[:40], rng.integers(0, 500, 10)].astype(np.int32)
    served = ex.serve(prompt, rng.integers(0, 500, 2).astype(np.int32))
    assert served.hit == 40 and torch.isnan(served.logits).any()


def test_a_counts_spec_with_a_window_runs_sliding_window_attention() -> None:
    """The cache treats its attention layers as ``swa`` (drops old KV), so must the model."""
    import dataclasses

    spec = dataclasses.replace(get_model("tiny-hybrid"), sliding_window=8)
    assert layer_plan(spec).count("swa") == 1 and "attention" not in layer_plan(spec)
    ex = ReferenceExecutor(
        spec, ExecutorConfig(policy="sglang+", cache_bytes=10**8, repeats=1), F64
    )
    rng = np.random.default_rng(1)
    first = rng.integers(0, 500, 50).astype(np.int32)
    out = rng.integers(0, 500, 3).astype(np.int32)
    ex.serve(first, out)
    prompt = np.r_[first, out, rng.integers(0, 500, 10)].astype(np.int32)  # the next turn
    served = ex.serve(prompt, rng.integers(0, 500, 2).astype(np.int32))
    assert served.hit == 53 and served.exact
    assert _rel(served.logits, ex.lm.forward(ex._ids(prompt)).logits) < 1e-10
