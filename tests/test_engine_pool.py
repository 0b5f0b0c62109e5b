"""The shared KV pool (issue 14): one pool per replica for running requests and the cache,
pages taken as requests grow, cached pages reclaimed, preemption when it runs out."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_helpers import ConstantPricer, LinearPricer, run, single_turns, write_rows

from twin.cache import BlockCache, PrefixCache
from twin.cache.empty import EmptyCache
from twin.engine import EngineConfig
from twin.engine.admission import DEFAULTS as ADMISSION
from twin.engine.config import EngineModeConfig, MemoryConfig
from twin.engine.replica import Replica
from twin.policies.compiled.kernel import state
from twin.policies.compiled.live import LiveCache
from twin.presets import get_model
from twin.workloads.schema import WorkloadRow


def _nodes(cache: PrefixCache) -> Iterator:
    stack = [cache.root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.children.values())


def _pins(cache) -> int:
    if isinstance(cache, PrefixCache):
        return sum(node.lock for node in _nodes(cache))
    if isinstance(cache, LiveCache):  # ``marconi`` in the pool: the compiled tree
        return int(cache.st[0][state.LOCK, cache.live_nodes()].sum())
    if isinstance(cache, EmptyCache):  # ``vanilla``
        return 0
    assert isinstance(cache, BlockCache)
    return sum(sum(s.locks.values()) for s in set(cache.blocks.values()) if s.locks)


class _Watch:
    """Checks the pool after every step and every hit against what was admitted before."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.replicas: list[Replica] = []
        self.seen: dict[int, list[np.ndarray]] = {}
        self.steps = 0
        step_end, admit = Replica.step_end, Replica.admit
        watch = self

        def checked_step_end(self: Replica, prefilled, completed) -> int:
            copies = step_end(self, prefilled, completed)
            if self.memory.pooled:
                self.memory.pool.verify()
            self.cache.verify()
            if self.host is not None:
                self.host.cache.verify()  # never past its capacity
                assert self.host.cache.peak_bytes <= self.host.cache.capacity
            watch.steps += 1
            if self not in watch.replicas:
                watch.replicas.append(self)
            return copies

        def checked_admit(self: Replica, seq) -> None:
            admit(self, seq)
            hit = seq.cached.hit.length
            prompt = seq.req.prompt
            earlier = watch.seen.setdefault(self.index, [])
            # Every hit is exact: the prefix was some earlier request's tokens.
            assert hit == 0 or any(
                len(s) >= hit and np.array_equal(s[:hit], prompt[:hit]) for s in earlier
            )
            earlier.append(np.concatenate((prompt, seq.req.output)))
            if self.memory.pooled:
                self.memory.pool.verify()

        monkeypatch.setattr(Replica, "step_end", checked_step_end)
        monkeypatch.setattr(Replica, "admit", checked_admit)


@st.composite
def traces(draw):
    vocab = draw(st.sampled_from([4, 50, 30000]))  # small vocabularies share prefixes
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    system = rng.integers(0, vocab, draw(st.integers(0, 300)), dtype=np.int32)
    rows = []
    sessions = draw(st.integers(1, 8))
    starts = sorted(draw(st.lists(st.floats(0, 2), min_size=sessions, max_size=sessions)))
    for sid, arrival in enumerate(starts):
        for turn in range(draw(st.integers(1, 3))):
            tail = rng.integers(0, vocab, draw(st.integers(1, 200)), dtype=np.int32)
            prompt = np.concatenate((system, tail)) if turn == 0 else tail
            out = draw(st.integers(1, 60))
            rows.append(
                WorkloadRow(
                    sid, turn, arrival if turn == 0 else None, 0.0, prompt, turn > 0, None, out
                )
            )
    return rows


# The pool property tests' budget (also tests/test_engine_pool_split.py).
POOL_EXAMPLES = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@POOL_EXAMPLES
@given(
    rows=traces(),
    policy=st.sampled_from(["vanilla", "sglang+", "sglang", "marconi", "vllm+", "vllm+@0"]),
    model=st.sampled_from(["tiny-hybrid", "tiny-transformer", "tiny-swa", "tiny-swa-hybrid"]),
    preemption=st.sampled_from(["recompute", "retract"]),
    slots=st.sampled_from([1, 3]),
    pool_kb=st.integers(160, 600),
    host_ratio=st.sampled_from([0.0, 0.5, 3.0]),
    allocator=st.sampled_from(["bytes", "paged", "jenga"]),
    ratio=st.booleans(),
)
def test_pool_invariants_over_random_traces(tmp_path_factory, monkeypatch, rows, **case):
    """In use + cached + free = pool after every step; every hit exact; pins all released;
    every request completes exactly once, whatever preemption happened, with each of the
    pool's allocators (issue 15)."""
    _check_pool_invariants(tmp_path_factory.mktemp("pool"), monkeypatch, rows, **case)


def test_pool_invariants_when_a_state_lands_inside_a_pinned_sliding_window_edge(
    tmp_path, monkeypatch
):
    """Issue 15c, hypothesis's shrunk example: request 1 places a state at 202 inside
    request 0's cached, pinned 211-token node; the split adds a window tail the
    truncated insert did not count, and the pool over-committed by 128 bytes."""
    rng = np.random.default_rng(0)
    shared = rng.integers(0, 4, 201, dtype=np.int32)
    first = np.append(shared, 1).astype(np.int32)
    rows = [
        WorkloadRow(0, 0, 0.0, 0.0, first, False, None, 9),
        WorkloadRow(
            1, 0, 0.0, 0.0, np.r_[first, rng.integers(0, 4, 72, dtype=np.int32)], False, None, 2
        ),
        WorkloadRow(2, 0, 0.0, 0.0, np.append(shared, 2).astype(np.int32), False, None, 1),
    ]
    case = {"policy": "marconi", "model": "tiny-swa-hybrid", "preemption": "recompute"}
    case |= {"slots": 1, "pool_kb": 160, "host_ratio": 0.0, "allocator": "paged", "ratio": False}
    _check_pool_invariants(tmp_path, monkeypatch, rows, **case)


def _check_pool_invariants(
    tmp_path,
    monkeypatch,
    rows,
    policy,
    model,
    preemption,
    slots,
    pool_kb,
    host_ratio,
    allocator,
    ratio,
) -> None:
    spec = get_model(model)
    # vllm+@0: vLLM's default retention (recurrent states at junctions and the replay boundary)
    policy, _, retention = policy.partition("@")
    options = {"block_size": 16} if policy == "vllm+" else {}
    if retention:
        options["retention_interval"] = int(retention)
    watch = _Watch(monkeypatch)
    path = write_rows(tmp_path / "w.parquet", rows)
    summary, recs = run(
        path,
        LinearPricer(),
        spec,
        policy=policy,
        policy_options=options,
        preemption=preemption,
        state_slots=slots,
        host_cache_ratio=host_ratio,
        kv_allocator=allocator,
        new_token_ratio=dict(ADMISSION) if ratio else {},  # SGLang's admission control
        pool_bytes=pool_kb * 1000,
        max_batched_tokens=256,
    )
    assert sorted(r.row for r in recs) == list(range(len(rows)))
    assert summary["preemption"]["preemptions"] == sum(r.preemptions for r in recs)
    for replica in watch.replicas:
        assert replica.memory.pool.running == 0  # every page handed back
        assert _pins(replica.cache) == 0
    for r in recs:
        if not r.rejected:
            assert r.first_token_s <= r.completed_s


class _CountingPricer(LinearPricer):
    """A linear pricer that counts the prefill tokens it priced."""

    def __init__(self) -> None:
        super().__init__()
        self.prefill_tokens = 0

    def step_time(self, prefills, decode_batch, decode_context) -> float:
        self.prefill_tokens += sum(n for n, _ in prefills)
        return super().step_time(prefills, decode_batch, decode_context)


@pytest.mark.parametrize("preemption", ["recompute", "retract"])
def test_preempted_requests_complete_once_and_their_recompute_is_priced(tmp_path, preemption):
    model = get_model("tiny-hybrid")
    path = single_turns(tmp_path / "w.parquet", [0.0] * 12, prompt_len=300, output_len=200)
    pricer = _CountingPricer()
    # Room for every prompt but not for every output: decodes run the pool dry.
    pool = 12 * (300 * model.kv_bytes_per_token + model.ssm_checkpoint_bytes)
    summary, recs = run(
        path,
        pricer,
        model,
        policy="vanilla",
        preemption=preemption,
        pool_bytes=pool,
    )
    assert sorted(r.row for r in recs) == list(range(12))
    pre = summary["preemption"]
    assert pre["preemptions"] > 0 and pre["recomputed_tokens"] > 0
    # Every prompt once, and the tokens lost to preemption again.
    assert pricer.prefill_tokens == 12 * 300 + pre["recomputed_tokens"]
    assert all(r.output_tokens == 200 and r.completed_s > r.first_token_s for r in recs)


def test_vllm_preempts_the_youngest_and_sglang_the_shortest_decode(tmp_path, monkeypatch):
    model = get_model("tiny-transformer")
    rows = [
        WorkloadRow(i, 0, 0.01 * i, None, np.arange(50, dtype=np.int32) + 1000 * i, False, None, o)
        for i, o in enumerate([400, 400, 400, 400])
    ]
    path = write_rows(tmp_path / "w.parquet", rows)
    pool = 4 * 50 * model.kv_bytes_per_token + 600 * model.kv_bytes_per_token
    first = {}
    for preemption in ("recompute", "retract"):
        _, recs = run(
            path,
            LinearPricer(),
            model,
            policy="vanilla",
            preemption=preemption,
            pool_bytes=pool,
        )
        first[preemption] = {r.row for r in recs if r.preemptions}
    # vLLM: the request scheduled last goes first (row 3); the others keep running.
    assert 3 in first["recompute"] and 0 not in first["recompute"]
    assert first["retract"]  # SGLang retracts too, by fewest output tokens


def test_the_default_pool_no_longer_starves_running_requests(tmp_path):
    """Issue 14's measurement: a dedicated 20 GB cache left an A100-40GB 2.5 GB for requests."""
    model = get_model("llama-7b-transformer")
    path = single_turns(tmp_path / "w.parquet", [0.0] * 20, 1500, 200)  # 0.87 GB each
    a100 = 40e9
    dedicated, _ = run(
        path, LinearPricer(), model, policy="vanilla", cache_bytes=int(20e9), gpu_memory_bytes=a100
    )
    shared, _ = run(
        path, LinearPricer(), model, policy="vanilla", shared_pool=True, gpu_memory_bytes=a100
    )
    assert shared["ttft_s"]["p95"] < dedicated["ttft_s"]["p95"] / 5
    assert shared["preemption"]["preemptions"] == 0


def test_extra_buffer_fits_fewer_running_requests_by_the_states_it_holds(tmp_path):
    model = get_model("tiny-hybrid")
    path = single_turns(tmp_path / "w.parquet", [0.0] * 8, prompt_len=100, output_len=1)
    one = 100 * model.kv_bytes_per_token + model.ssm_checkpoint_bytes
    pool = 4 * one  # four requests with one state each; one with three
    peaks = {}
    for slots in (1, 3):
        _, recs = run(
            path,
            LinearPricer(),
            model,
            policy="vanilla",
            state_slots=slots,
            pool_bytes=pool,
        )
        admitted = [r.admitted_s for r in recs]
        peaks[slots] = max(admitted.count(t) for t in admitted)
    extra = 2 * model.ssm_checkpoint_bytes
    assert peaks[1] == pool // one == 4
    assert peaks[3] == pool // (one + extra) < peaks[1]


def test_the_paper_world_keeps_its_summary_keys():
    cfg = EngineConfig(memory=MemoryConfig(cache_bytes=1))
    assert not {"shared_pool", "engine", "preemption", "state_slots"} & set(cfg.to_dict())
    shared = EngineConfig(
        memory=MemoryConfig(shared_pool=True, state_slots=3), mode=EngineModeConfig(engine="sglang")
    ).to_dict()
    assert shared["shared_pool"] and shared["engine"] == "sglang" and shared["state_slots"] == 3


class _HostPricer(ConstantPricer):
    """One second a step; loading from the host costs 1 ms a token plus 0.25 s a state."""

    def hit_work_time(self, recompute: int, host_tokens: int, host_states: int = 0) -> float:
        return 1e-3 * host_tokens + 0.25 * host_states


def host_return_trace(tmp_path, spec) -> tuple:
    """Session 0 asks A, session 1 asks B (evicting A from a one-prompt GPU cache), then
    session 0 comes back: its history A + output is a hit on the host tier.

    Returns the trace's path and one prompt's worth of cache bytes.
    """
    a = np.arange(400, dtype=np.int32)
    b = np.arange(400, dtype=np.int32) + 5000
    rows = [
        WorkloadRow(0, 0, 0.0, None, a, False, None, 1),
        WorkloadRow(0, 1, None, 20.0, np.arange(5, dtype=np.int32) + 9000, True, None, 1),
        WorkloadRow(1, 0, 10.0, None, b, False, None, 1),
    ]
    one = 401 * spec.kv_bytes_per_token + 2 * spec.ssm_checkpoint_bytes
    return write_rows(tmp_path / "w.parquet", rows), one


@pytest.mark.parametrize("model", ["tiny-transformer", "tiny-hybrid"])
def test_host_tier_hits_cost_the_copy_time_and_stay_within_its_capacity(tmp_path, model):
    spec = get_model(model)
    path, one = host_return_trace(tmp_path, spec)
    common = dict(policy="sglang+", gpu_memory_bytes=1e9)
    _, gpu = run(path, _HostPricer(), spec, cache_bytes=10 * one, **common)
    summary, host = run(
        path, _HostPricer(), spec, cache_bytes=one, host_cache_bytes=10 * one, **common
    )
    _, none = run(path, _HostPricer(), spec, cache_bytes=one, **common)
    by = {
        name: {r.row: r for r in recs}
        for name, recs in (("gpu", gpu), ("host", host), ("none", none))
    }
    assert by["none"][1].hit_tokens == 0  # the GPU cache lost A to B
    hit = by["gpu"][1].hit_tokens
    assert hit > 0 and by["host"][1].hit_tokens == hit  # the host tier still had it
    states = 1 if spec.n_ssm_layers else 0
    load = 1e-3 * hit + 0.25 * states
    assert by["host"][1].ttft_s == pytest.approx(by["gpu"][1].ttft_s + load)
    tier = summary["replicas"][0]["host_cache"]
    assert tier["loaded_tokens"] == hit and tier["load_s"] == pytest.approx(load)
    assert tier["peak_bytes"] <= tier["capacity_bytes"] == 10 * one
