"""The engine with every policy: plug-in by name, agreement with ``twin replay``, determinism.

``twin replay`` serves requests back to back and inserts a request's
prompt-time checkpoints and its final state in one call. The engine inserts
them at two moments (when the prefill ends, when the request completes:
DESIGN.md, prefix cache semantics). Without overlap the two agree exactly
whenever that split does not change what gets evicted; at the tightest
capacities it can, so those cases are checked against a replay that makes
the same two calls.
"""

from __future__ import annotations

import pytest
from marconi_oracle import python_policies
from test_engine_helpers import LinearPricer, doc_qa, generated, run

from twin.engine import REQUESTS_FILE, SUMMARY_FILE, EngineConfig, build_run, simulate
from twin.engine.config import ArrivalConfig, CacheConfig, ClusterConfig, MemoryConfig
from twin.errors import TwinError
from twin.policies import POLICIES, get_policy
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.replay import Trace, replay
from twin.workloads.examples import example_path
from twin.workloads.reader import Workload

pytestmark = pytest.mark.usefixtures("oracle_structure")

ONLINE = [name for name, cls in POLICIES.items() if not cls.hindsight]


@pytest.fixture(scope="module")
def apart(tmp_path_factory: pytest.TempPathFactory):
    """Workloads whose sessions are 1e7 s apart: requests never overlap."""
    d = tmp_path_factory.mktemp("apart")
    return {
        kind: generated(d / f"{kind}.parquet", kind, n, 1e-7)
        for kind, n in (("chat", 30), ("system-prompt", 150))
    }


@pytest.mark.parametrize("policy", ONLINE)
def test_every_online_policy_plugs_in_by_name(policy, tmp_path):
    path = example_path("system-prompt")
    if policy == "prompt-cache":
        # It reuses only declared modules: a workload with a modules column.
        path = doc_qa(tmp_path / "doc-qa.parquet")
    summary, records = run(
        path,
        LinearPricer(),
        "tiny-hybrid",
        policy=policy,
        cache_bytes=2_000_000,
        replicas=2,
    )
    assert len(records) == Workload.open(path).num_rows
    assert summary["config"]["policy"] == policy
    if policy != "vanilla":
        assert summary["hit"]["token_hit_rate"] > 0


def test_hindsight_policy_is_refused():
    with pytest.raises(TwinError, match="hindsight"):
        run(example_path("chat"), LinearPricer(), policy="oracle")


def test_policy_options_reach_the_policy():
    summary, _ = run(
        example_path("chat"),
        LinearPricer(),
        "tiny-hybrid",
        policy="marconi",
        policy_options={"alpha": 1.5},
        cache_bytes=300_000,
    )
    assert summary["replicas"][0]["policy"]["alpha"] == 1.5
    with pytest.raises(TwinError, match="unknown policy option"):
        run(example_path("chat"), LinearPricer(), policy="marconi", policy_options={"beta": 1})


@pytest.mark.parametrize("model", ["tiny-hybrid", "tiny-transformer"])
@pytest.mark.parametrize("capacity", [2_000_000, 20_000_000])
@pytest.mark.parametrize("policy", ["vanilla", "marconi", "sglang+", "vllm+"])
def test_hit_rates_equal_replay_when_requests_never_overlap(apart, model, capacity, policy):
    # Marconi at alpha > 0: the engine makes the branch checkpoint visible when
    # the prefill ends, so the eviction at completion scores the split nodes'
    # FLOP efficiency; replay splits after evicting (docs/decisions.md, #21).
    options = {"alpha": 0.0} if policy == "marconi" else {}
    for kind in ("chat", "system-prompt"):
        path = apart[kind]
        expected = replay(Trace.load(path), model, capacity, policy, options)
        summary, _ = run(
            path, LinearPricer(), model, policy=policy, cache_bytes=capacity, policy_options=options
        )
        assert summary["hit"]["token_hit_rate"] == pytest.approx(expected.token_hit_rate, abs=1e-12)
        assert summary["hit"]["request_hit_rate"] == pytest.approx(
            expected.request_hit_rate, abs=1e-12
        )
        assert summary["flops"]["saved"] == pytest.approx(expected.flops_saved, rel=1e-12)


def _split_replay(trace: Trace, model_name: str, capacity: int, policy_name: str) -> float:
    """``twin replay`` with the engine's two insertions per request."""
    model = get_model(model_name)
    cache = make_cache(get_policy(policy_name), model, capacity)
    requests = cache.request_cache()
    hit_tokens = 0
    for full, n in zip(trace.fulls, trace.prompt_lens, strict=True):
        adm = requests.admit(full[:n], full)
        requests.insert_at_prefill_end(adm)
        requests.insert_at_completion(adm)
        requests.release(adm)
        hit_tokens += adm.hit.length
    return hit_tokens / trace.prompt_tokens


@pytest.mark.parametrize("capacity", [100_000, 200_000, 500_000])
@pytest.mark.parametrize("policy", ["marconi", "sglang+"])
def test_tight_caches_match_replay_with_split_insertion(apart, capacity, policy):
    path = apart["system-prompt"]
    summary, _ = run(path, LinearPricer(), "tiny-ssm", policy=policy, cache_bytes=capacity)
    expected = _split_replay(Trace.load(path), "tiny-ssm", capacity, policy)
    assert summary["hit"]["token_hit_rate"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("policy", ["marconi", "sglang+"])
def test_overlapping_requests_hit_no_more_than_replay(tmp_path, policy):
    """Requests admitted before earlier ones finish miss the state those would cache."""
    path = generated(tmp_path / "sp.parquet", "system-prompt", 150, 1.0)
    expected = replay(Trace.load(path), "tiny-hybrid", 50_000_000, policy).token_hit_rate
    apart, _ = run(path, LinearPricer(), policy=policy, cache_bytes=50_000_000, request_rate=1e-3)
    crowded, _ = run(path, LinearPricer(), policy=policy, cache_bytes=50_000_000, request_rate=1e4)
    assert apart["hit"]["token_hit_rate"] == pytest.approx(expected, abs=1e-12)
    assert crowded["hit"]["token_hit_rate"] < expected


def test_same_inputs_and_seed_give_byte_identical_outputs(tmp_path):
    def once(out):
        run(
            example_path("chat"),
            LinearPricer(copy_s=1e-4),
            "marconi-hybrid-7b",
            out=out,
            replicas=3,
            router="prefix-aware",
            policy="marconi",
            cache_bytes=int(3e9),
            gpu_memory_bytes=80e9,
            session_rate=2.0,
            seed=9,
            warmup_s=20.0,
        )
        return (out / REQUESTS_FILE).read_bytes(), (out / SUMMARY_FILE).read_bytes()

    first, second = once(tmp_path / "a"), once(tmp_path / "b")
    assert first == second
    assert not list((tmp_path / "a").glob(".*tmp*"))  # no temporary files left behind


def test_a_failed_run_leaves_no_files(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(TwinError):
        run(example_path("chat"), LinearPricer(), out=out, policy="nope")
    assert not out.exists() or not any(out.iterdir())


def test_summary_carries_configuration_and_occupancy(tmp_path):
    summary, _ = run(
        example_path("chat"),
        LinearPricer(),
        "marconi-hybrid-7b",
        replicas=2,
        policy="marconi",
        cache_bytes=int(2e9),
        session_rate=1.0,
        seed=4,
    )
    assert (
        summary["config"]
        == EngineConfig(
            cluster=ClusterConfig(replicas=2),
            memory=MemoryConfig(cache_bytes=int(2e9)),
            cache=CacheConfig(policy="marconi"),
            arrivals=ArrivalConfig(session_rate=1.0, seed=4),
        ).to_dict()
    )
    assert summary["seed"] == 4 and summary["twin_version"]
    occ = summary["cache_occupancy"]
    assert len(occ["kv_bytes"]) == 2 and len(occ["t_s"]) == len(occ["ssm_bytes"][1]) > 10
    assert max(max(x) for x in occ["kv_bytes"]) > 0
    for rep in summary["replicas"]:
        assert rep["cache"]["peak_bytes"] <= int(2e9)


_HYBRID = get_model("tiny-hybrid")
# A dedicated cache of 400 kB, or a shared pool of as much beside the weights (its
# cache's capacity is what running requests leave: it shrinks and grows with them).
MEMORY = {
    "dedicated": {"cache_bytes": int(4e5)},
    "shared_pool": {"shared_pool": True, "gpu_memory_bytes": (_HYBRID.weight_bytes + 4e5) / 0.9},
}


@pytest.mark.parametrize("memory", list(MEMORY))
@pytest.mark.parametrize("policy", ["marconi", "marconi-twin"])
def test_online_tuning_is_the_same_compiled(policy, memory, tmp_path, monkeypatch):
    """The replicas' caches and alpha grids run as compiled code (``policies.compiled``)
    or as the Python oracle (``python_policies``), in a dedicated cache or a shared pool:
    the outputs are byte-identical."""

    def once(out):
        summary, _ = run(
            example_path("chat"),
            LinearPricer(copy_s=1e-4),
            out=out,
            replicas=2,
            policy=policy,
            session_rate=2.0,
            seed=3,
            **MEMORY[memory],
        )
        return summary, (out / REQUESTS_FILE).read_bytes(), (out / SUMMARY_FILE).read_bytes()

    from twin.policies.compiled.live import LiveCache

    made = []
    init = LiveCache.__init__
    monkeypatch.setattr(LiveCache, "__init__", lambda self, *a: made.append(1) or init(self, *a))
    summary, *fast = once(tmp_path / "compiled")
    # Both Marconis' replicas hold the compiled live cache.
    assert len(made) == 2
    boots = [r["policy"]["bootstrap"] for r in summary["replicas"]]
    assert all(b.get("completed") for b in boots), boots
    assert len({str(sorted(b["grid"].items())) for b in boots}) == len(boots)
    assert all(r["cache"]["evictions"] for r in summary["replicas"])
    python_policies(monkeypatch)
    _, *slow = once(tmp_path / "python")
    assert fast == slow


def test_vanilla_empty_cache_is_the_same(tmp_path, monkeypatch):
    """``vanilla`` runs on an :class:`~twin.cache.empty.EmptyCache` in the engine: the
    outputs are those of the radix-tree cache it stands for, byte for byte."""
    from twin.cache.empty import EmptyCache
    from twin.policies.vanilla import VanillaPolicy

    def once(out, router):
        run(
            example_path("chat"),
            LinearPricer(copy_s=1e-4),
            out=out,
            replicas=2,
            policy="vanilla",
            router=router,
            session_rate=2.0,
            seed=3,
        )
        return (out / REQUESTS_FILE).read_bytes(), (out / SUMMARY_FILE).read_bytes()

    import twin.engine.cluster as cluster

    real = cluster.build_structure
    made: list = []

    def spied(*args):
        made.append(real(*args))
        return made[-1]

    monkeypatch.setattr(cluster, "build_structure", spied)
    for router in ("session-affinity", "prefix-aware"):
        made.clear()
        empty = once(tmp_path / f"empty-{router}", router)
        assert made and all(isinstance(c, EmptyCache) for c in made)
        with monkeypatch.context() as m:  # no stand-in: the radix tree
            m.setattr(VanillaPolicy, "fast_structure", None)
            made.clear()
            assert once(tmp_path / f"tree-{router}", router) == empty
            assert made and not any(isinstance(c, EmptyCache) for c in made)


def test_collector_threshold_raised_during_the_run_only():
    """``simulate`` raises the young collector threshold while the cluster runs (the run's
    short-lived objects) and gives the caller's back, also when the run fails."""
    import gc

    before = gc.get_threshold()
    seen = []
    spec = get_model("tiny-hybrid")
    workload = Workload.open(example_path("chat"))
    config = EngineConfig(
        cluster=ClusterConfig(replicas=1),
        cache=CacheConfig(policy="vanilla"),
        arrivals=ArrivalConfig(session_rate=2.0, seed=1),
    )

    def spy(rec):
        seen.append(gc.get_threshold()[0])

    simulate(workload, spec, LinearPricer(), config, on_record=spy)
    assert seen and min(seen) >= 20_000
    assert gc.get_threshold() == before

    def fail(rec):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        simulate(workload, spec, LinearPricer(), config, on_record=fail)
    assert gc.get_threshold() == before


def test_vanilla_in_vllm_mode_survives_preemption():
    """Regression: vLLM mode keeps a preempted request's blocks cached
    (``insert_preempted``); ``vanilla``'s empty cache lacked that call of the request
    protocol (an AttributeError once a request was preempted), found when its protocol
    was typed. Nothing is cached: every admission misses."""
    run = build_run(
        example_path("chat"),
        model="llama-3-8b",
        engine="vllm",
        cache_gb="auto",
        policy="vanilla",
        concurrency=64,
        memory_utilization=0.2,
        duration_s=30,
    )
    summary = run.simulate()
    replicas = summary.cluster.replicas
    assert sum(r["pool"]["preemptions"] for r in replicas) > 0
    assert all(r["cache"]["kv_bytes"] == 0 for r in replicas)
