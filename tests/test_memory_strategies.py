"""The replica's memory strategies (twin.engine.memory_strategies): which one a run gets,
and the accounting of each as the scheduler and the replica drive it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from twin.cache.pool import SharedPool, SplitPool
from twin.engine import build_run
from twin.engine.cluster import Cluster
from twin.engine.memory_strategies import (
    MEMORY_STRATEGIES,
    DedicatedMemory,
    HostTier,
    MemorySetup,
    SharedPoolMemory,
    SplitPoolsMemory,
    WriteBackHostTier,
    get_memory,
)
from twin.engine.seq import Seq
from twin.engine.sim import Environment
from twin.errors import TwinError
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.workloads.examples import example_path
from twin.workloads.reader import Request

CHAT = example_path("chat")
ENGINE = Path(__file__).resolve().parents[1] / "twin" / "engine"


def _replica(**settings):
    run = build_run(CHAT, **settings)
    return Cluster(run.model, run.pricer, run.config, run.workload).replicas[0]


@pytest.mark.parametrize(
    ("settings", "cls", "pool"),
    [
        ({"cache_gb": "20", "policy": "vanilla"}, DedicatedMemory, None),
        ({"cache_gb": "auto"}, SharedPoolMemory, SharedPool),
        ({"engine": "vllm", "cache_gb": "auto"}, SharedPoolMemory, SharedPool),
        # A hybrid under SGLang: its KV pool and mamba pool.
        ({"engine": "sglang", "cache_gb": "auto"}, SplitPoolsMemory, SplitPool),
        (
            {"engine": "sglang", "cache_gb": "auto", "model": "llama-3-8b"},
            SharedPoolMemory,
            SharedPool,
        ),
    ],
)
def test_each_run_gets_the_strategy_of_its_memory_mode(settings, cls, pool):
    memory = _replica(**settings).memory
    assert type(memory) is cls and MEMORY_STRATEGIES[cls.name] is cls
    assert type(getattr(memory, "pool", None)) is (pool or type(None))
    summary_pool = memory.stats()
    assert (summary_pool is None) == (pool is None)
    if pool is SplitPool:
        assert summary_pool["state_bytes"] == memory.pool.state_size > 0


def test_host_tiers_by_write_policy():
    sets = {"enable_hierarchical_cache": "true"}
    host = _replica(engine="sglang", cache_gb="auto", sets=sets).host
    assert type(host) is HostTier and host.write_back_time(None) == 0.0  # type: ignore[arg-type]
    sets["hicache_write_policy"] = "write_back"
    back = _replica(engine="sglang", cache_gb="auto", policy="sglang", sets=sets).host
    assert type(back) is WriteBackHostTier
    assert _replica(engine="sglang", cache_gb="auto").host is None


def _seq(tokens: int, env: Environment, memory) -> Seq:
    full = np.arange(tokens, dtype=np.int32)
    req = Request(0, 0, 0, 0.0, 0.0, full[:-4], full[-4:], full, tokens - 4, False)
    return Seq(req, 0, 0.0, memory.footprint(tokens), env)


def test_dedicated_memory_reserves_whole_footprints_and_never_preempts():
    model = get_model("tiny-hybrid")
    cache = make_cache(get_policy("vanilla"), model, 10**6)
    one = 100 * model.kv_bytes_per_token + model.ssm_checkpoint_bytes
    memory = get_memory("dedicated", MemorySetup(model, cache, budget=2.5 * one))
    env = Environment()
    seqs = [_seq(100, env, memory) for _ in range(3)]
    assert seqs[0].footprint == one and not memory.too_big(one)
    for seq in seqs[:2]:
        assert memory.fits(seq)
        memory.admitted(seq, gpu_hit=50)  # the hit is not subtracted: its own partition
    assert not memory.fits(seqs[2]) and memory.used == 2 * one
    assert memory.grow(10**9) and memory.room_tokens() >= 10**9  # growth was reserved
    memory.completed(seqs[0])
    assert memory.fits(seqs[2]) and memory.stats() is None
    with pytest.raises(NotImplementedError):
        memory.preempted(seqs[1], 0)
    with pytest.raises(TwinError, match="unknown memory strategy 'paged'"):
        get_memory("paged", MemorySetup(model, cache, budget=1.0))


def test_the_scheduler_reads_the_replica_through_its_protocols_alone():
    """No scheduler module probes the replica with getattr, nor reaches past its
    protocols to the pool, the allocator or the memory mode."""
    for name in ("batching", "sglang_batching", "trtllm_batching", "vllm_batching"):
        tree = ast.parse((ENGINE / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr":
                assert getattr(node.args[0], "id", None) != "replica", name
            if isinstance(node, ast.Attribute):
                assert node.attr not in ("pool", "kv", "split", "shared"), (name, node.attr)


@pytest.mark.parametrize("cache_gb", ["20", "auto"])
def test_a_completed_request_no_longer_loads_its_replica(cache_gb):
    """The routers' load signal (``outstanding_tokens``) falls back to 0 once every request
    routed to a replica completed, in every memory mode (dedicated memory never lowered it
    before: least-loaded and prefix-aware routing saw every request ever routed)."""
    run = build_run(CHAT, cache_gb=cache_gb, policy="vanilla", replicas=2, router="least-loaded")
    cluster = Cluster(run.model, run.pricer, run.config, run.workload)
    cluster.run()
    assert sum(r.submitted for r in cluster.replicas) > 0
    assert [r.outstanding_tokens for r in cluster.replicas] == [0, 0]
