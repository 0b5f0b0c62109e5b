"""The reference executor: exact reuse, a tensor store that follows the tree, the engine's order."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from twin.costmodel import CostModel  # noqa: E402
from twin.costmodel.profile_store import load_profile  # noqa: E402
from twin.errors import TwinError  # noqa: E402
from twin.policies.structures import make_cache  # noqa: E402
from twin.presets import get_model  # noqa: E402
from twin.reference.executor import ExecutorConfig, ReferenceExecutor  # noqa: E402
from twin.reference.model import layer_plan  # noqa: E402
from twin.reference.store import cache_edges  # noqa: E402

F64 = torch.float64


def _executor(
    model: str = "tiny-hybrid", policy: str = "marconi", cache: int = 10**9
) -> ReferenceExecutor:
    return ReferenceExecutor(
        get_model(model), ExecutorConfig(policy=policy, cache_bytes=cache, repeats=1), dtype=F64
    )


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _full(ex: ReferenceExecutor, prompt: np.ndarray) -> torch.Tensor:
    return ex.lm.forward(ex._ids(prompt)).logits


def _check_store(ex: ReferenceExecutor) -> None:
    """Every tree node has its tensors: KV of exactly its tokens, a state iff a checkpoint."""
    ex.cache.verify()
    edges = cache_edges(ex.cache)
    assert {nid for _, nid, *_ in edges} == set(ex.store.nodes)
    for _, nid, _, end, tokens, ckpt in edges:
        held = ex.store.nodes[nid]
        assert held.start == end - len(tokens) and np.array_equal(held.path[held.start :], tokens)
        assert all(k.shape[2] == len(tokens) for k, _ in held.kv)
        if ex.spec.n_ssm_layers:
            assert (held.ckpt is not None) == ckpt


def test_layer_plan_spreads_attention_among_the_mixers() -> None:
    plan = layer_plan(get_model("marconi-hybrid-7b"))
    assert (plan.count("attention"), plan.count("ssm"), plan.count("mlp")) == (4, 24, 28)
    mixers = [k for k in plan if k != "mlp"]
    at = [i for i, k in enumerate(mixers) if k == "attention"]
    assert at == [3, 10, 17, 24]  # one in every seven mixers, as the paper's 1:6 ratio
    assert all(plan[i + 1] == "mlp" for i, k in enumerate(plan) if k != "mlp")


def test_shared_prefix_hits_at_the_branch_point_exactly() -> None:
    ex = _executor()
    rng = np.random.default_rng(0)
    system = rng.integers(0, 500, 80).astype(np.int32)
    hits = []
    for _ in range(3):
        prompt = np.concatenate([system, rng.integers(0, 500, 30).astype(np.int32)])
        served = ex.serve(prompt, rng.integers(0, 500, 10).astype(np.int32))
        hits.append(served.hit)
        assert served.exact and _rel(served.logits, _full(ex, prompt)) < 1e-12
    # Marconi sec. 4.1: the 2nd request checkpoints the branch point, the 3rd hits it.
    assert hits == [0, 0, 80]
    _check_store(ex)


def test_next_turn_hits_the_previous_input_and_output_exactly() -> None:
    ex = _executor()
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 500, 60).astype(np.int32)
    out = rng.integers(0, 500, 25).astype(np.int32)
    ex.serve(prompt, out)
    nxt = np.concatenate([prompt, out, rng.integers(0, 500, 12).astype(np.int32)])
    served = ex.serve(nxt, out[:3])
    assert served.hit == 85
    assert _rel(served.logits, _full(ex, nxt)) < 1e-12


# One pair stays in the default suite; the rest take minutes on a loaded 2-core
# machine (PyTorch forwards in float64) and run with ``pytest -m slow``.
def serve_traffic(
    ex: ReferenceExecutor,
    requests: int,
    sessions: int,
    systems: tuple[int, int],
    keep: float,
    longest: tuple[int, int],
    check: Callable[[ReferenceExecutor], None] = _check_store,
) -> tuple[float, int]:
    """Serve ``requests`` random turns of ``sessions`` sessions, each on its session's last
    turn (probability ``keep``) or on one of ``systems`` = (count, tokens) shared system
    prompts, with fewer than ``longest`` = (new prompt, output) tokens; every reuse must be
    exact, and ``check`` holds after each. (Worst relative logit error against a full
    forward pass, turns that hit.)"""
    rng = np.random.default_rng(2)
    shared = [rng.integers(0, 500, systems[1]).astype(np.int32) for _ in range(systems[0])]
    history: dict[int, np.ndarray] = {}
    worst, hits = 0.0, 0
    for _ in range(requests):
        sid = int(rng.integers(0, sessions))
        base = history.get(sid) if rng.random() < keep else None
        base = shared[sid % systems[0]] if base is None else base
        new = rng.integers(0, 500, int(rng.integers(1, longest[0]))).astype(np.int32)
        prompt = np.concatenate([base, new])
        out = rng.integers(0, 500, int(rng.integers(1, longest[1]))).astype(np.int32)
        served = ex.serve(prompt, out)
        history[sid] = np.concatenate([prompt, out])
        assert served.exact
        worst = max(worst, _rel(served.logits, _full(ex, prompt)))
        hits += served.hit > 0
        check(ex)
    return worst, hits


@pytest.mark.parametrize(
    ("model", "policy"),
    [
        ("tiny-hybrid", "sglang+"),
        *(
            pytest.param(m, p, marks=pytest.mark.slow)
            for m, p in [
                ("tiny-hybrid", "marconi"),
                ("tiny-transformer", "marconi"),
                ("tiny-ssm", "marconi"),
                ("tiny-transformer", "sglang+"),
                ("tiny-ssm", "sglang+"),
            ]
        ),
    ],
)
def test_hits_stay_exact_through_evictions(model: str, policy: str) -> None:
    spec = get_model(model)
    cap = (
        400 * spec.kv_bytes_per_token + 3 * spec.ssm_checkpoint_bytes
        if spec.n_attention_layers
        else 6 * spec.ssm_checkpoint_bytes
    )
    ex = _executor(model, policy, cap)
    worst, hits = serve_traffic(ex, 50, 8, (3, 60), 0.7, (30, 15))
    assert ex.cache.evictions > 10 and hits > 10
    assert worst < 1e-12


def test_whole_prompt_hit_is_flagged_on_ssm_models_and_exact_on_transformers() -> None:
    rng = np.random.default_rng(4)
    prompt = rng.integers(0, 500, 40).astype(np.int32)
    out = rng.integers(0, 500, 5).astype(np.int32)
    for model, exact in (("tiny-hybrid", False), ("tiny-transformer", True)):
        ex = _executor(model)
        full = np.concatenate([prompt, out])
        ex.serve(prompt, out)
        served = ex.serve(full, out)  # the whole prompt is cached
        assert served.hit == len(full) and served.exact is exact
        if exact:
            assert _rel(served.logits, _full(ex, full)) < 1e-12
        _check_store(ex)


def test_hits_equal_the_twin_replay_in_the_same_order() -> None:
    spec = get_model("tiny-hybrid")
    cap = 300 * spec.kv_bytes_per_token + 4 * spec.ssm_checkpoint_bytes
    ex = _executor("tiny-hybrid", "marconi", cap)
    from twin.policies import get_policy

    twin_cache = make_cache(get_policy("marconi"), spec, cap).request_cache()  # compiled
    rng = np.random.default_rng(5)
    system = rng.integers(0, 500, 50).astype(np.int32)
    prev = system
    for i in range(40):
        prompt = np.concatenate(
            [prev if i % 3 else system, rng.integers(0, 500, 20).astype(np.int32)]
        )
        out = rng.integers(0, 500, 8).astype(np.int32)
        served = ex.serve(prompt, out)
        assert served.hit == twin_cache.serve(prompt, np.concatenate([prompt, out])).length
        # The store follows the live cache's nodes through its splits and evictions.
        _check_store(ex)
        assert served.exact and _rel(served.logits, _full(ex, prompt)) < 1e-12
        prev = np.concatenate([prompt, out])
    assert ex.cache.evictions > 10


def test_measured_service_is_positive_and_priced_positive() -> None:
    # The wall-clock comparison (predicted / measured within 0.1-10) failed under
    # load; it is benchmarks/bench_reference_cpu.py now (issue 17).
    ex = ReferenceExecutor(get_model("tiny-hybrid"), ExecutorConfig(repeats=3))
    served = ex.serve(np.arange(300, dtype=np.int32), np.arange(4, dtype=np.int32))
    predicted = CostModel(get_model("tiny-hybrid"), load_profile("cpu")).prefill(300, 0)
    assert served.service_s > 0 and predicted > 0


def test_policies_on_their_own_structure_are_refused() -> None:
    with pytest.raises(TwinError, match="vllm"):
        _executor(policy="vllm+")
    with pytest.raises(TwinError, match=r"'jamba-1\.5-mini' is too large"):  # 52 B parameters
        _executor(model="jamba-1.5-mini")


def test_layer_overhead_composes_into_the_cost_model() -> None:
    from twin.calibration.overhead import measure_layer_overhead

    spec, prof = get_model("tiny-hybrid"), load_profile("cpu")
    entry = measure_layer_overhead(spec, prof, "cpu", repeats=3)
    assert entry["mode"] == "add" and set(entry["seconds"]) == {"attention", "ssm", "mlp", "head"}
    assert all(s >= 0 for s in entry["seconds"].values())
    bare, with_host = (
        CostModel(spec, prof),
        CostModel(spec, dataclasses.replace(prof, layer_overhead=entry)),
    )
    host = sum(
        entry["seconds"][k] * n for k, n in (("attention", 1), ("ssm", 3), ("mlp", 4), ("head", 1))
    )
    for n, c in ((1, 0), (200, 100)):
        assert with_host.prefill(n, c) == pytest.approx(bare.prefill(n, c) + host)
        assert with_host.prefill(n, c, breakdown=True).total_s == pytest.approx(
            with_host.prefill(n, c)
        )
    gpu = dataclasses.replace(prof, layer_overhead={**entry, "mode": "max"})
    assert CostModel(spec, gpu).prefill(1, 0) == pytest.approx(max(bare.prefill(1, 0), host))


def test_calibration_grid_covers_the_model_shapes() -> None:
    from twin.calibration.kernels import SweepContext, registry

    spec = get_model("tiny-hybrid")
    ctx = SweepContext(
        torch=torch, device="cpu", dtype=torch.float32, dtype_bytes=4, level="tiny", model=spec
    )
    reg = registry()
    scan = reg["ssm_scan"].grid(ctx)
    assert any(s["h"] == spec.n_ssm_heads and s["q"] == spec.ssm_chunk_size for s in scan)
    only = dataclasses.replace(ctx, model_only=True)
    assert all(s["d"] == spec.head_dim for s in reg["attn_prefill"].grid(only))
    assert reg["copy_d2d"].grid(only)  # kernels without model shapes keep their grid
