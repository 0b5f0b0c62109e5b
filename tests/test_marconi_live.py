"""The compiled live cache (``policies.compiled.live``) equals ``PrefixCache`` under the
Python oracle of ``marconi`` and ``marconi-twin`` (``marconi_oracle``).

The engine calls the request protocol a step at a time, interleaving requests:
admissions, inserts at a prefill's end and at completion, releases (or the
completion and release in one call, ``complete``, as the engine's replica makes them). Here
hypothesis draws traces (a vocabulary of four: many ties and shared prefixes),
capacities of a few tokens and states, alphas fixed or tuned online, and an
interleaving of those calls, with a shared pool's reclaims between them
(``shrink_to`` a part of what is cached, then the capacity given back); both
caches must answer every call alike (hits, checkpoint positions, states
admitted, tokens cached, bytes left) and end with the same counters, nodes
and policy record. A long run checks that the live cache's
memory follows what it holds, not what it served.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from marconi_oracle import MarconiOracle, MarconiTwinOracle
from test_policies_props import traces
from token_seqs import cache_bytes

from twin.cache import RequestCache, cache_stats
from twin.policies.compiled.live import LiveCache
from twin.policies.marconi import MarconiPolicy
from twin.policies.marconi_twin import MarconiTwinPolicy
from twin.policies.structures import make_cache
from twin.presets import get_model

pytestmark = pytest.mark.usefixtures("oracle_structure")

HYBRID = get_model("tiny-hybrid")
TRANSFORMER = get_model("tiny-transformer")  # no states: any matched prefix hits
# Sliding-window layers (window 8): a node keeps its tail of their KV.
MODELS = st.sampled_from(
    [HYBRID, TRANSFORMER, *map(get_model, ("tiny-swa", "tiny-swa-hybrid", "tiny-ssm"))]
)


ORACLE = {MarconiPolicy: MarconiOracle, MarconiTwinPolicy: MarconiTwinOracle}


def _pair(
    capacity: int,
    alpha: float | None,
    multiplier: float,
    cls=MarconiPolicy,
    model=HYBRID,
    host: int | None = None,
    write_policy: str = "write_through",
):
    """Both caches and their protocols; with ``host`` bytes, each over a host tier of its
    own kind (the policy's own instance, as the engine builds it)."""
    oracle = ORACLE[cls]
    python = make_cache(oracle(alpha=alpha, bootstrap_multiplier=multiplier), model, capacity)
    live = LiveCache(model, capacity, cls(alpha=alpha, bootstrap_multiplier=multiplier))
    if host is None:
        return python, RequestCache(python), live, live.request_cache()
    py_host = make_cache(oracle(alpha=alpha, bootstrap_multiplier=multiplier), model, host)
    live_host = LiveCache(model, host, cls(alpha=alpha, bootstrap_multiplier=multiplier))
    py_req = RequestCache(python, py_host, write_policy)
    return python, py_req, live, live.request_cache(live_host, write_policy)


def _state(cache) -> tuple:
    return (
        cache_stats(cache),
        cache.used_bytes,
        json.dumps(cache.policy.stats(), sort_keys=True),
    )


def _run(
    pairs,
    capacity: int,
    alpha: float | None,
    multiplier: float,
    choices: list[int],
    pool: bool = False,
    cls: type = MarconiPolicy,
    model=HYBRID,
    host: int | None = None,
    write_policy: str = "write_through",
):
    """Serve ``pairs`` on both caches under ``cls``, interleaved by ``choices``; compare
    every answer. ``pool``: a shared pool also reclaims cached bytes now and then
    (``shrink_to``). A request is preempted now and then (its first tokens cached, as
    vLLM mode does on a Transformer). ``host``: both over a host tier of that many bytes,
    filled by ``write_policy``; its answers (hits loaded back, copies written back, its
    own cache) are compared too."""
    python, py_req, live, live_req = _pair(
        capacity, alpha, multiplier, cls, model, host, write_policy
    )
    waiting = list(range(len(pairs)))
    running: list[list] = []  # [request, stage, python admission, live admission]
    step = 0
    while waiting or running:
        pick = choices[step % len(choices)] if choices else 0
        step += 1
        if pool and pick % 4 == 3 and step % 2:
            limit = python.used_bytes * (pick % 3) // 3  # a running request's allocation
            assert python.shrink_to(limit) == live.shrink_to(limit), f"reclaim at {step}"
            assert python.capacity == live.capacity and python.evictions == live.evictions
            python.capacity = live.capacity = capacity  # the request's pages come back
        if waiting and (not running or pick % 3 == 0):
            i = waiting.pop(0)
            prompt, output = pairs[i]
            full = np.concatenate((prompt, output))
            a, b = py_req.admit(prompt, full), live_req.admit(prompt, full)
            assert (a.order, a.hit.length, a.at_prefill, a.at_completion, a.host_tokens) == (
                b.order,
                b.hit.length,
                b.at_prefill,
                b.at_completion,
                b.host_tokens,
            ), f"admission of request {i}"
            running.append([i, 0, a, b])
            continue
        entry = running[pick % len(running)]
        i, stage, a, b = entry
        if stage == 0 and not python.has_ssm and pick % 5 == 4:
            kept = (pick * 7) % (len(a.full) + 1)  # a preemption keeps its first tokens
            made = py_req.insert_preempted(a, kept), live_req.insert_preempted(b, kept)
            assert made[0] == made[1], f"preemption of request {i}"
        if stage == 0:
            made = py_req.insert_at_prefill_end(a), live_req.insert_at_prefill_end(b)
            assert made[0] == made[1] and a.prefill_tokens == b.prefill_tokens, f"prefill {i}"
        elif stage == 1 and pick % 2:  # the engine's request end: both steps, one call
            made = py_req.complete(a), live_req.complete(b)
            assert made[0] == made[1], f"completion and release of request {i}"
            assert b.unpin is None and b.full is None, f"request {i} still held"
            running.remove(entry)
        elif stage == 1:
            made = py_req.insert_at_completion(a), live_req.insert_at_completion(b)
            assert made[0] == made[1], f"completion of request {i}"
        else:
            py_req.release(a)
            live_req.release(b)
            running.remove(entry)
        entry[1] += 1
        assert python.used_bytes == live.used_bytes, f"after a step of request {i}"
        if host is not None:
            assert py_req.host.used_bytes == live_req.host.used_bytes, f"host, request {i}"
    assert _state(python) == _state(live)
    if host is not None:
        written = (py_req.written_back_tokens, py_req.written_back_states)
        assert written == (live_req.written_back_tokens, live_req.written_back_states)
        assert cache_stats(py_req.host) == cache_stats(live_req.host)
        a, b = py_req.host.snapshot(), live_req.host.snapshot()
        assert np.array_equal(a.tokens, b.tokens) and a.parents == b.parents and a.t == b.t
    a, b = python.snapshot(), live.snapshot()  # the live tree exported as the radix tree's
    assert np.array_equal(a.offsets, b.offsets) and np.array_equal(a.tokens, b.tokens)
    a.offsets = b.offsets = a.tokens = b.tokens = np.zeros(0)
    assert a == b
    for prompt, _ in pairs[:5]:
        assert python.peek(prompt) == live.peek(prompt)
    python.verify()
    return python, live, py_req


SETTINGS = settings(max_examples=150, deadline=None)


@SETTINGS
@given(
    traces(),
    st.integers(0, 40),
    st.integers(0, 4),
    st.sampled_from([0.0, 0.1, 0.7, 1.0, 2.0]),
    st.lists(st.integers(0, 30), max_size=40),
    st.booleans(),
    st.sampled_from([MarconiPolicy, MarconiTwinPolicy]),
    MODELS,
)
def test_fixed_alpha_interleaved(pairs, tokens, states, alpha, choices, pool, cls, model) -> None:
    _run(pairs, cache_bytes(tokens, states, model), alpha, 5.0, choices, pool, cls, model)


@SETTINGS
@given(
    traces(),
    st.integers(4, 40),
    st.integers(1, 4),
    st.sampled_from([1.0, 1.5, 2.0, 3.0]),
    st.lists(st.integers(0, 30), max_size=40),
    st.booleans(),
    st.sampled_from([MarconiPolicy, MarconiTwinPolicy]),
    MODELS,
)
def test_tuned_online_interleaved(
    pairs, tokens, states, multiplier, choices, pool, cls, model
) -> None:
    """Alpha tuned online: the window, its snapshot (``marconi-twin``'s is of a cache
    that has evicted: the live tree's own, exported) and the chosen alpha are the same."""
    capacity = cache_bytes(tokens, states, model)
    python, live, _ = _run(pairs, capacity, None, multiplier, choices, pool, cls, model)
    assert python.policy.stats() == live.policy.stats()


@SETTINGS
@given(
    traces(),
    st.integers(0, 40),
    st.integers(0, 4),
    st.integers(0, 60),
    st.sampled_from([None, 0.0, 0.7, 2.0]),
    st.lists(st.integers(0, 30), max_size=40),
    st.booleans(),
    st.sampled_from([MarconiPolicy, MarconiTwinPolicy]),
    MODELS,
    st.sampled_from(["write_through", "write_through_selective", "write_back"]),
)
def test_host_tier_interleaved(
    pairs, tokens, states, host_tokens, alpha, choices, pool, cls, model, write_policy
) -> None:
    """Over a host tier (SGLang's HiCache by write policy, vLLM's CPU offload): the GPU
    caches, the host caches, the hits loaded back and the copies written back are the
    same; alpha fixed or tuned online (the host's policy is never tuned)."""
    capacity, host = cache_bytes(tokens, states, model), cache_bytes(host_tokens, states + 1, model)
    multiplier = 2.0
    python, live, _ = _run(
        pairs, capacity, alpha, multiplier, choices, pool, cls, model, host, write_policy
    )
    assert python.policy.stats() == live.policy.stats()


def test_host_tier_evicts_on_both_tiers() -> None:
    """Long runs where both tiers evict, hits are loaded back and (write-back) victims
    are copied: the comparison of ``_run`` sees every path of the host tier."""
    rng = np.random.default_rng(11)
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    history: list[np.ndarray] = []
    for _ in range(400):
        base = history[int(rng.integers(len(history)))] if history and rng.random() < 0.7 else []
        prompt = np.r_[base, rng.integers(0, 40, int(rng.integers(1, 20)))].astype(np.int32)
        output = rng.integers(0, 40, int(rng.integers(1, 6))).astype(np.int32)
        history = [*history[-30:], np.r_[prompt, output][:200]]
        pairs.append((prompt[:250], output))
    choices = rng.integers(0, 30, 64).tolist()
    for write_policy in ("write_back", "write_through"):
        python, live, req = _run(
            pairs,
            cache_bytes(150, 4, HYBRID),
            None,
            2.0,
            choices,
            True,
            host=cache_bytes(300, 8, HYBRID),
            write_policy=write_policy,
        )
        assert python.evictions > 50 and req.host.evictions > 20, write_policy
        assert python.policy.tuner.phase == live.policy.tuner.phase == "tuned"
        if write_policy == "write_back":
            assert req.written_back_tokens > 0 and req.written_back_states > 0


def test_tuning_completes_and_memory_follows_the_cache() -> None:
    """A long run: the window is tuned, answers stay equal, and the live cache's arrays stay
    near what it holds (ids reused, edges packed) however many tokens pass through."""
    rng = np.random.default_rng(7)
    pairs = []
    history: list[np.ndarray] = []
    for _ in range(1500):
        if history and rng.random() < 0.6:
            base = history[int(rng.integers(len(history)))]
        else:
            base = np.zeros(0, np.int32)
        prompt = np.r_[base, rng.integers(0, 50, int(rng.integers(1, 30)))].astype(np.int32)
        output = rng.integers(0, 50, int(rng.integers(1, 8))).astype(np.int32)
        full = np.r_[prompt, output]
        history = [*history[-40:], full[: min(len(full), 300)]]
        pairs.append((prompt[:400], output))
    capacity = cache_bytes(600, 12, HYBRID)
    choices = rng.integers(0, 30, 64).tolist()
    python, live, _ = _run(pairs, capacity, None, 2.0, choices)
    assert python.policy.tuner.phase == live.policy.tuner.phase == "tuned"
    served = sum(len(p) + len(o) for p, o in pairs)
    held = capacity // HYBRID.kv_bytes_per_token
    assert served > 20 * held
    nodes, tokens = live.st[0].shape[1], len(live.st[9])
    assert nodes <= 4 * held and tokens <= 8 * held + 4 * 500, (nodes, tokens)


def test_engine_runs_it_for_every_model() -> None:
    """``marconi`` and ``marconi-twin`` get the live cache on an SSM hybrid, a Transformer,
    sliding-window layers or a pure SSM model, whatever the workload's lengths."""
    policy = MarconiPolicy()
    assert isinstance(make_cache(policy, HYBRID, 10**9, fast=True), LiveCache)
    twin = make_cache(MarconiTwinPolicy(), HYBRID, 10**9, fast=True)
    assert isinstance(twin, LiveCache) and not twin.reference
    transformer = make_cache(policy, TRANSFORMER, 10**9, fast=True)
    assert isinstance(transformer, LiveCache) and not transformer.has_ssm
    assert isinstance(make_cache(policy, get_model("tiny-swa"), 10**9, fast=True), LiveCache)
    assert isinstance(make_cache(policy, get_model("tiny-ssm"), 10**9, fast=True), LiveCache)
    cache = make_cache(policy, HYBRID, 10**9, fast=True)
    assert cache.request_cache().__class__.__name__ == "LiveRequests"
