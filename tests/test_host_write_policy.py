"""How the host tier is filled (issue 14): SGLang HiCache's write_through,
write_through_selective and write_back (``twin.cache.requests.WRITE_POLICIES``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_helpers import ConstantPricer, run, write_rows
from test_engine_pool import _pins, _Watch, host_return_trace

from twin.cache import RequestCache
from twin.engine import EngineConfig
from twin.engine.config import MemoryConfig
from twin.engine.modes import get_mode
from twin.errors import TwinError
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.workloads.schema import WorkloadRow

MODELS = ["tiny-transformer", "tiny-hybrid"]


def _tiers(model: str, gpu: float, host: float, policy: str):
    """A GPU cache and a host tier holding about ``gpu`` and ``host`` 63-token sequences."""
    spec = get_model(model)
    one = 64 * spec.kv_bytes_per_token + spec.ssm_checkpoint_bytes
    cache = make_cache(get_policy("sglang+"), spec, int(gpu * one))
    tier = make_cache(get_policy("sglang+"), spec, int(host * one))
    requests = RequestCache(cache, tier, policy)
    evicted: list[np.ndarray] = []
    hook = cache.on_evict
    if hook is not None:  # write-back: record what the GPU hands to the host

        def recording(path: np.ndarray, has_state: bool) -> None:
            evicted.append(path.copy())
            hook(path, has_state)

        cache.on_evict = recording
    return cache, tier, requests, evicted


def _serve(requests: RequestCache, prompt: np.ndarray, output: np.ndarray):
    adm = requests.admit(prompt, np.concatenate((prompt, output)))
    requests.insert_at_prefill_end(adm)
    requests.insert_at_completion(adm)
    requests.release(adm)
    return adm


def _prompts(seed: int, count: int, n: int = 60) -> list[np.ndarray]:
    """Prompts sharing a few prefixes (four systems x a few tails), small vocab."""
    rng = np.random.default_rng(seed)
    systems = [rng.integers(0, 50, n // 2, dtype=np.int32) for _ in range(4)]
    return [
        np.r_[systems[rng.integers(4)], rng.integers(0, 3, n // 2, dtype=np.int32)].astype(np.int32)
        for _ in range(count)
    ]


@pytest.mark.parametrize("model", MODELS)
def test_write_back_puts_nothing_on_the_host_until_the_gpu_evicts(model):
    cache, host, requests, evicted = _tiers(model, 2.5, 10, "write_back")
    a, b, c = (np.arange(60, dtype=np.int32) + k * 1000 for k in range(3))
    out = np.arange(3, dtype=np.int32) + 9000
    _serve(requests, a, out)
    _serve(requests, b, out)
    assert cache.evictions == 0 and host.used_bytes == 0 and not evicted
    _serve(requests, c, out)  # the GPU holds two sequences: A's (least recent) goes
    assert cache.evictions > 0 and len(evicted) == 1
    history = np.r_[a, out, np.arange(5, dtype=np.int32) + 7000].astype(np.int32)
    assert cache.peek(history) == 0 and host.peek(history) == 63  # A + output: host only
    assert requests.written_back_tokens == host.kv_tokens == 63
    # A's session again: the longest prefix across both tiers, loaded back from the host.
    adm = _serve(requests, history, out)
    assert adm.hit.length == 63 and adm.host_tokens == 63
    assert cache.peek(history) >= 63  # cached on the GPU again


@pytest.mark.parametrize("model", MODELS)
def test_a_trace_that_never_evicts_leaves_write_back_no_host_hits(model):
    prompts = _prompts(0, 30)
    out = np.arange(4, dtype=np.int32) + 9000
    results = {}
    for policy in ("write_through", "write_back"):
        cache, host, requests, _ = _tiers(model, 1000, 1000, policy)
        loaded = sum(_serve(requests, p, out).host_tokens for p in prompts)
        assert cache.evictions == 0 and loaded == 0
        results[policy] = (cache, host)
    cache, host = results["write_through"]
    # Write-through: the host holds exactly what the GPU holds.
    assert host.kv_tokens == cache.kv_tokens and host.n_ckpts == cache.n_ckpts
    assert all(host.peek(np.r_[p, out]) == cache.peek(np.r_[p, out]) for p in prompts)
    cache, host = results["write_back"]
    assert host.peak_bytes == 0  # nothing was ever written to the host


@pytest.mark.parametrize("model", MODELS)
def test_write_through_selective_backs_up_a_prefix_at_its_second_insert(model):
    _, host, requests, _ = _tiers(model, 1000, 1000, "write_through_selective")
    system = np.arange(40, dtype=np.int32)
    first = np.r_[system, np.arange(20, dtype=np.int32) + 500].astype(np.int32)
    second = np.r_[system, np.arange(20, dtype=np.int32) + 700].astype(np.int32)
    out = np.arange(3, dtype=np.int32) + 9000
    _serve(requests, first, out)
    assert host.used_bytes == 0  # inserted once: hit count 1 < 2
    _serve(requests, second, out)
    # The shared system prompt was inserted twice; each tail once.
    assert host.peek(np.r_[second, out]) == 40 == host.peek(np.r_[first, out])
    _serve(requests, first, out)  # first's whole sequence now inserted twice
    assert host.peek(np.r_[first, out]) == 63
    assert host.peek(np.r_[second, out]) == 40


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    model=st.sampled_from(MODELS),
    policy=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
    gpu=st.floats(1.0, 4.0),
    host=st.floats(0.5, 6.0),
)
def test_host_hits_are_exact_and_the_host_stays_within_capacity(seed, model, policy, gpu, host):
    cache, tier, requests, evicted = _tiers(model, gpu, host, policy)
    out = np.arange(4, dtype=np.int32) + 9000
    served: list[np.ndarray] = []
    for prompt in _prompts(seed, 40):
        adm = requests.admit(prompt, np.concatenate((prompt, out)))
        hit, loaded = adm.hit.length, adm.host_tokens
        if hit:  # every hit was some earlier request's tokens
            assert any(len(s) >= hit and np.array_equal(s[:hit], prompt[:hit]) for s in served)
        if loaded and policy == "write_back":
            # The loaded prefix really was evicted content (write-back copies only victims).
            assert any(len(p) >= hit and np.array_equal(p[:hit], prompt[:hit]) for p in evicted)
        assert hit - loaded == cache.peek(prompt)  # only what the GPU lacks is loaded
        requests.insert_at_prefill_end(adm)
        requests.insert_at_completion(adm)
        requests.release(adm)
        served.append(np.r_[prompt, out])
        cache.verify()
        tier.verify()  # never past its capacity
        assert tier.peak_bytes <= tier.capacity
    if policy != "write_back":
        assert requests.written_back_tokens == 0


class _WriteBackPricer(ConstantPricer):
    """One second a step; loading costs 1 ms a token, writing back 2 ms a token."""

    def hit_work_time(self, recompute: int, host_tokens: int, host_states: int = 0) -> float:
        return 1e-3 * host_tokens

    def write_back_time(self, tokens: int, states: int) -> float:
        return 2e-3 * tokens + 0.5 * states


@pytest.mark.parametrize("model", MODELS)
def test_write_back_copies_lengthen_the_evicting_step_and_serve_the_return(tmp_path, model):
    spec = get_model(model)
    path, one = host_return_trace(tmp_path, spec)  # A, B evicting A, A's session again
    common = dict(policy="sglang+", gpu_memory_bytes=1e9, cache_bytes=one)
    common["host_cache_bytes"] = 10 * one
    runs = {
        wp: run(path, _WriteBackPricer(), spec, host_write_policy=wp, **common)
        for wp in ("write_through", "write_back")
    }
    through = {r.row: r for r in runs["write_through"][1]}
    back = {r.row: r for r in runs["write_back"][1]}
    assert back[1].hit_tokens == through[1].hit_tokens > 0  # A came back from the host
    tier = runs["write_back"][0]["replicas"][0]["host_cache"]
    states = 1 if spec.n_ssm_layers else 0
    copy = 2e-3 * 401 + 0.5 * states  # one sequence (A or B + its output token) written back
    # B's step evicted A, and A's return evicted B: each waited for its copy.
    assert tier["written_back_tokens"] == 802 and tier["write_back_s"] == pytest.approx(2 * copy)
    assert back[2].ttft_s == pytest.approx(through[2].ttft_s + copy)
    assert back[1].ttft_s == pytest.approx(through[1].ttft_s + copy)
    assert "write_back_s" not in runs["write_through"][0]["replicas"][0]["host_cache"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    model=st.sampled_from(MODELS),
    pool_kb=st.integers(160, 600),
    preemption=st.sampled_from(["recompute", "retract"]),
)
def test_write_back_engine_runs_complete_every_request_once(
    tmp_path_factory, seed, model, pool_kb, preemption
):
    """Pool, cache and host tier checked after every step, every hit exact (``_Watch``)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _write_back_run(tmp_path_factory, _Watch(monkeypatch), seed, model, pool_kb, preemption)


def _write_back_run(tmp_path_factory, watch, seed, model, pool_kb, preemption) -> None:
    spec = get_model(model)
    rng = np.random.default_rng(seed)
    out = int(rng.integers(1, 40))
    rows = []
    for s in range(8):  # two turns a session: the second extends the first's history
        prompt = rng.integers(0, 4, int(rng.integers(50, 300)), dtype=np.int32)
        rows.append(WorkloadRow(s, 0, 0.5 * s, None, prompt, False, None, out))
        more = rng.integers(0, 4, 20, dtype=np.int32)
        rows.append(WorkloadRow(s, 1, None, float(rng.uniform(0, 5)), more, True, None, out))
    path = write_rows(tmp_path_factory.mktemp("wb") / "w.parquet", rows)
    _, recs = run(
        path,
        ConstantPricer(),
        spec,
        policy="sglang+",
        preemption=preemption,
        host_cache_ratio=2.0,
        host_write_policy="write_back",
        pool_bytes=pool_kb * 1000,
        max_batched_tokens=256,
    )
    assert sorted(r.row for r in recs) == list(range(len(rows)))
    for replica in watch.replicas:
        assert replica.memory.pooled and replica.memory.pool.running == 0
        assert _pins(replica.cache) == 0


def test_sglang_write_policy_flags():
    model = get_model("tiny-hybrid")
    sglang = get_mode("sglang")
    on = {"enable_hierarchical_cache": "true"}
    for policy in ("write_through", "write_through_selective", "write_back"):
        got = sglang.settings(model, {**on, "hicache_write_policy": policy})
        assert got["host_write_policy"] == policy and got["host_cache_ratio"] == 2.0
    with pytest.raises(TwinError, match=r"hicache_write_policy.*enable_hierarchical_cache"):
        sglang.settings(model, {"hicache_write_policy": "write_back"})
    with pytest.raises(TwinError, match="hicache_write_policy=lazy: expected one of"):
        sglang.settings(model, {**on, "hicache_write_policy": "lazy"})
    with pytest.raises(TwinError, match="--host-write-policy: must be one of"):
        EngineConfig(memory=MemoryConfig(cache_bytes=1, host_write_policy="lazy"))


@pytest.mark.parametrize("policy", ["vllm+", "prompt-cache"])
def test_write_back_is_refused_for_caches_whose_evictions_never_reach_the_host(tmp_path, policy):
    """The block pool and the module store never call ``on_evict``: their host would stay empty."""
    spec = get_model("tiny-hybrid")
    path, one = host_return_trace(tmp_path, spec)
    common = dict(cache_bytes=one, host_cache_bytes=10 * one, gpu_memory_bytes=1e9)
    with pytest.raises(TwinError, match=r"write_back: policy .* whose evictions the host tier"):
        run(path, ConstantPricer(), spec, policy=policy, host_write_policy="write_back", **common)
    # write_through still runs with them
    _, recs = run(path, ConstantPricer(), spec, policy=policy, **common)
    assert len(recs) == 3
