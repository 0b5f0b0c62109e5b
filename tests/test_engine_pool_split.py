"""SGLang's two pools under the shared pool (issue 14): a hybrid model's KV pool and mamba
pool, sized by mamba_full_memory_ratio, each holding running requests' and cached entries of
its own kind, each evicting its own kind (twin.cache.pool.SplitPool)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_engine_helpers import LinearPricer, run, write_rows
from test_engine_pool import POOL_EXAMPLES, traces

from twin.cache.pool import SplitPool
from twin.engine.admission import DEFAULTS as ADMISSION
from twin.engine.replica import Replica
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.workloads.schema import WorkloadRow

HYBRID = get_model("tiny-hybrid")
CK = HYBRID.ssm_checkpoint_bytes


class _PoolWatch:
    """After every step: per pool, running + cached + free = size; state slots held exactly
    by the requests holding memory (admitted, or the queue's head that took its pages)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.replicas: list[Replica] = []
        step_end = Replica.step_end
        watch = self

        def checked(self: Replica, prefilled, completed) -> int:
            copies = step_end(self, prefilled, completed)
            pool = self.memory.pool
            assert isinstance(pool, SplitPool)
            cache = self.cache
            assert pool.running + cache.kv_bytes + pool.free == pool.size
            assert pool.running_states + cache.ssm_bytes + pool.state_free == pool.state_size
            assert min(pool.free, pool.state_free, pool.running, pool.running_states) >= 0
            waiting = self.scheduler.waiting
            holders = self.memory.running_requests + (1 if waiting and waiting[0].alloc else 0)
            assert pool.running_states == holders * self.memory.kv.state
            cache.verify()
            if self not in watch.replicas:
                watch.replicas.append(self)
            return copies

        monkeypatch.setattr(Replica, "step_end", checked)


@POOL_EXAMPLES
@given(
    rows=traces(),
    model=st.sampled_from(["tiny-hybrid", "tiny-swa-hybrid"]),
    preemption=st.sampled_from(["recompute", "retract"]),
    slots=st.sampled_from([1, 3]),
    pool_kb=st.integers(160, 600),
    mamba_ratio=st.sampled_from([0.1, 0.9, 4.0]),
    ratio=st.booleans(),
)
def test_each_pool_keeps_running_plus_cached_plus_free_over_random_traces(
    tmp_path_factory, monkeypatch, rows, model, preemption, slots, pool_kb, mamba_ratio, ratio
):
    spec = get_model(model)
    watch = _PoolWatch(monkeypatch)
    path = write_rows(tmp_path_factory.mktemp("split") / "w.parquet", rows)
    summary, recs = run(
        path,
        LinearPricer(),
        spec,
        policy="sglang",
        policy_options={"mamba_full_memory_ratio": mamba_ratio},
        preemption=preemption,
        state_slots=slots,
        new_token_ratio=dict(ADMISSION) if ratio else {},
        pool_bytes=pool_kb * 1000,
        max_batched_tokens=256,
    )
    assert sorted(r.row for r in recs) == list(range(len(rows)))  # each exactly once
    for replica in watch.replicas:
        pool = replica.memory.pool
        assert pool.running == 0 and pool.running_states == 0  # everything handed back
    budget = int(summary["memory_budget_bytes"])
    for rep in summary["replicas"]:
        assert rep["pool"]["state_bytes"] + rep["pool"]["bytes"] == budget


def test_the_pools_are_sized_as_sglang_sizes_them():
    # model_runner _handle_max_mamba_cache: whole states in rest x r / (1 + r) (200,000
    # bytes: 12 states of 16,128); the KV pool gets what they leave.
    from twin.policies import get_policy

    cache = make_cache(get_policy("sglang", mamba_full_memory_ratio=0.25), HYBRID, 0)
    pool = SplitPool(1_000_000, cache)
    assert pool.state_size == 12 * CK and pool.size == 1_000_000 - 12 * CK
    assert cache.state_capacity == 12 * CK and cache.kv_capacity == pool.size
    assert pool.allocate_states(3 * CK) and pool.allocate(1000)
    assert cache.state_capacity == 9 * CK and cache.kv_capacity == pool.size - 1000
    pool.verify()


@pytest.mark.parametrize("slots", [1, 3])
def test_a_full_mamba_pool_holds_the_queue_without_retracting(tmp_path, slots):
    """Running requests' states fill the mamba pool: the next request waits (SGLang's
    alloc_req_slots fails; decode never needs a new state, so nothing is retracted), even
    though the KV pool has room for every request."""
    rows = [
        WorkloadRow(i, 0, 0.0, None, np.arange(100, dtype=np.int32) + 1000 * i, False, None, 50)
        for i in range(5)
    ]
    kv_room = 200_000  # every prompt and output fits the KV pool
    states = 2.5 * slots * CK  # room for two running requests' slots
    total = kv_room + states
    summary, recs = run(
        write_rows(tmp_path / "w.parquet", rows),
        LinearPricer(),
        HYBRID,
        policy="sglang",
        policy_options={"mamba_full_memory_ratio": states / kv_room},
        preemption="retract",
        state_slots=slots,
        pool_bytes=total,
    )
    pool = summary["replicas"][0]["pool"]
    assert pool["peak_running_requests"] == 2
    assert pool["peak_running_state_bytes"] == 2 * slots * CK
    assert summary["preemption"]["preemptions"] == 0
    assert sorted(r.row for r in recs) == list(range(5))


def test_a_request_whose_states_cannot_fit_the_mamba_pool_is_rejected(tmp_path):
    rows = [WorkloadRow(0, 0, 0.0, None, np.arange(50, dtype=np.int32), False, None, 5)]
    _, (rec,) = run(
        write_rows(tmp_path / "w.parquet", rows),
        LinearPricer(),
        HYBRID,
        policy="sglang",
        policy_options={"mamba_full_memory_ratio": 0.01},  # a mamba pool under one state
        preemption="retract",
        pool_bytes=100 * CK,
    )
    assert rec.rejected
