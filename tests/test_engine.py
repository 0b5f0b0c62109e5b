"""The engine's invariants: conservation, latency accounting, arrivals, memory, routing."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_engine_helpers import (
    ConstantPricer,
    LinearPricer,
    generated,
    run,
    single_turns,
    write_rows,
)

from twin.engine import ROUTERS, EngineConfig, memory_budget
from twin.engine.config import ClusterConfig, MemoryConfig, SchedulerConfig
from twin.errors import TwinError
from twin.presets import get_model
from twin.workloads.examples import example_path
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow

CHAT = example_path("chat")


@pytest.fixture(scope="module")
def quiet_chat(tmp_path_factory: pytest.TempPathFactory):
    """Chat sessions far apart (rate 1e-7/s): no request ever overlaps another."""
    return generated(tmp_path_factory.mktemp("w") / "chat.parquet", "chat", 12, 1e-7)


def _rows(records):
    return {r.row: r for r in records}


def _chat(replicas: int, session_rate: float, **config: object):
    """The bundled chat on ``replicas`` marconi-hybrid-7b replicas, 5 GB of cache each."""
    config |= {"replicas": replicas, "cache_bytes": int(5e9), "session_rate": session_rate}
    return run(CHAT, LinearPricer(), "marconi-hybrid-7b", **config)


@pytest.mark.parametrize("router", list(ROUTERS))
def test_every_request_completes_exactly_once(router):
    wl = Workload.open(CHAT)
    summary, records = _chat(3, 3.0, router=router, gpu_memory_bytes=80e9)
    assert sorted(r.row for r in records) == list(range(wl.num_rows))
    assert summary["requests"]["total"] == wl.num_rows == summary["requests"]["measured"]
    assert sum(r["requests"] for r in summary["replicas"]) == wl.num_rows
    olen = wl.index["output_len"]
    for r in records:
        assert not r.rejected
        assert r.output_tokens == olen[r.row]
        assert r.queue_s >= 0 and 0 < r.prefill_s <= r.ttft_s <= r.e2e_s
        assert r.arrival_s <= r.admitted_s < r.first_token_s <= r.completed_s
        assert math.isnan(r.tpot_s) == (r.output_tokens == 1)
        assert 0 <= r.hit_tokens <= r.input_tokens


def test_closed_loop_turns_arrive_think_time_after_completion():
    wl = Workload.open(CHAT)
    _, records = _chat(2, 1.0)
    by_turn = {(r.session_id, r.turn): r for r in records}
    think, arrival = wl.index["think_s"], wl.index["arrival_s"]
    checked = 0
    for r in records:
        if r.turn == 0:
            continue
        assert np.isnan(arrival[r.row])  # the chat example's later turns are closed loop
        prev = by_turn[(r.session_id, r.turn - 1)]
        assert r.arrival_s == pytest.approx(prev.completed_s + think[r.row], abs=1e-9)
        checked += 1
    assert checked > 500


def test_open_loop_arrivals_follow_the_file_and_request_rate_scales_them(tmp_path):
    times = [0.0, 1.0, 1.5, 4.0, 9.0]
    path = single_turns(tmp_path / "w.parquet", times)
    _, recs = run(path, ConstantPricer(0.01), policy="vanilla")
    assert sorted(r.arrival_s for r in recs) == times
    # File rate: 4 gaps over 9 s; at 2 req/s every gap shrinks by (4/9)/2.
    _, recs = run(path, ConstantPricer(0.01), policy="vanilla", request_rate=2.0)
    np.testing.assert_allclose(sorted(r.arrival_s for r in recs), np.array(times) * 2 / 9)


def test_open_loop_turns_do_not_wait_for_the_previous_turn(tmp_path):
    prompt = np.arange(10, 20, dtype=np.int32)
    rows = [
        WorkloadRow(0, 0, 0.0, None, prompt, False, None, 50),
        WorkloadRow(0, 1, 1.0, None, prompt[:3], True, None, 1),
        WorkloadRow(0, 2, 2.0, None, prompt[:2], True, None, 1),
    ]
    _, recs = run(write_rows(tmp_path / "w.parquet", rows), ConstantPricer(1.0), policy="vanilla")
    first, second, third = sorted(recs, key=lambda r: r.turn)  # all three complete
    assert second.arrival_s == 1.0 and third.arrival_s == 2.0
    assert third.completed_s < first.completed_s == 50.0


def test_parquet_records_hold_nulls_where_times_do_not_apply(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [0.0, 1.0], output_len=1)
    run(path, ConstantPricer(0.1), policy="vanilla", out=tmp_path / "out")
    table = pq.read_table(tmp_path / "out" / "requests.parquet")
    assert table.column("tpot_s").null_count == 2  # one output token: no TPOT
    assert table.column("ttft_s").to_pylist() == pytest.approx([0.1, 0.1])


def test_missing_session_starts_need_a_session_rate(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [None, None])
    with pytest.raises(TwinError, match="session-rate"):
        run(path, ConstantPricer(), policy="vanilla")


def test_low_load_ttft_is_the_priced_prefill_of_the_uncached_tokens(quiet_chat):
    pricer = LinearPricer()
    _, records = run(quiet_chat, pricer, policy="marconi", cache_bytes=10**9)
    hits = 0
    for r in records:
        assert r.queue_s == 0.0
        new = max(1, r.input_tokens - r.hit_tokens)  # the last token is always computed
        expected = pricer.step_time([(new, r.input_tokens - new)], 0, 0)
        # Sessions sit 1e7 s apart: times near 1e8 s carry ~1e-8 s of rounding.
        assert r.ttft_s == pytest.approx(expected, abs=1e-7)
        hits += r.hit_tokens > 0
    assert hits > len(records) // 2  # later turns hit their history


def test_checkpoint_copies_lengthen_the_steps_that_make_them(quiet_chat):
    _, free = run(quiet_chat, LinearPricer(copy_s=0.0), policy="marconi", cache_bytes=10**9)
    _, paid = run(quiet_chat, LinearPricer(copy_s=0.01), policy="marconi", cache_bytes=10**9)
    free_by = _rows(free)
    for r in paid:
        assert r.checkpoints >= 1  # marconi keeps at least the state after the last token
        extra = r.e2e_s - free_by[r.row].e2e_s
        assert extra == pytest.approx(0.01 * r.checkpoints, abs=1e-7)


def test_a_hit_never_slows_a_request(quiet_chat):
    _, cold = run(quiet_chat, LinearPricer(), policy="vanilla")
    _, warm = run(quiet_chat, LinearPricer(), policy="marconi", cache_bytes=10**9)
    cold_by = _rows(cold)
    faster = 0
    for r in warm:
        assert r.ttft_s <= cold_by[r.row].ttft_s + 1e-7
        faster += r.hit_tokens > 0 and r.ttft_s < cold_by[r.row].ttft_s
    assert faster > 0


def test_warmup_and_until(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [float(t) for t in range(10)])
    summary, recs = run(path, ConstantPricer(0.1), policy="vanilla", warmup_s=4.0)
    assert summary["requests"] == {"total": 10, "measured": 6, "warmup_excluded": 4, "rejected": 0}
    assert summary["throughput"]["window_s"] == pytest.approx(9.1 - 4.0)
    _, recs = run(path, ConstantPricer(0.1), policy="vanilla", until_s=5.5)
    assert sorted(r.arrival_s for r in recs) == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize(("arrival", "think"), [(1000.0, None), (None, 1000.0)])
def test_a_turn_due_after_until_ends_the_run_without_waiting_for_it(tmp_path, arrival, think):
    tokens = np.arange(1, 9, dtype=np.int32)
    rows = [
        WorkloadRow(0, 0, 0.0, None, tokens, False, None, 4),
        WorkloadRow(0, 1, arrival, think, tokens[:3], True, None, 4),
    ]
    summary, recs = run(
        write_rows(tmp_path / "w.parquet", rows),
        ConstantPricer(1.0),
        policy="vanilla",
        until_s=10.0,
    )
    assert len(recs) == 1
    assert summary["sim_end_s"] == pytest.approx(4.0)  # 4 one-second steps, then done


# ----------------------------------------------------------------- memory
def test_memory_budget_is_never_overcommitted(tmp_path):
    model = get_model("tiny-hybrid")
    path = single_turns(tmp_path / "w.parquet", [0.0] * 30, prompt_len=1000, output_len=40)
    footprint = 1040 * model.kv_bytes_per_token + model.ssm_checkpoint_bytes
    hbm = (model.weight_bytes + 4.5 * footprint) / 0.9  # room for 4 requests at a time
    _, recs = run(path, ConstantPricer(1.0), model, policy="vanilla", gpu_memory_bytes=hbm)
    events = sorted([(r.admitted_s, 1) for r in recs] + [(r.completed_s, -1) for r in recs])
    running = peak = 0
    for _, step in events:  # completions at a time sort before admissions at that time
        running += step
        peak = max(peak, running)
    assert peak == 4


def test_a_request_larger_than_memory_is_rejected_and_recorded(tmp_path):
    model = get_model("tiny-hybrid")
    prompt = np.arange(2000, dtype=np.int32)
    rows = [
        WorkloadRow(0, 0, 0.0, None, prompt[:10], False, None, 2),
        WorkloadRow(1, 0, 1.0, None, prompt, False, None, 2),
    ]
    hbm = model.weight_bytes + 500 * model.kv_bytes_per_token + model.ssm_checkpoint_bytes
    summary, recs = run(
        write_rows(tmp_path / "w.parquet", rows),
        ConstantPricer(),
        model,
        policy="vanilla",
        gpu_memory_bytes=hbm / 0.9,
    )
    ok, big = sorted(recs, key=lambda r: r.row)
    assert not ok.rejected and big.rejected and math.isnan(big.ttft_s)
    assert summary["requests"]["rejected"] == 1 and summary["requests"]["measured"] == 1


def test_cache_larger_than_free_memory_is_refused():
    model = get_model("marconi-hybrid-7b")
    with pytest.raises(TwinError, match="no memory left"):
        memory_budget(
            model, EngineConfig(memory=MemoryConfig(cache_bytes=int(80e9), gpu_memory_bytes=80e9))
        )
    assert (
        memory_budget(
            model,
            EngineConfig(
                cluster=ClusterConfig(tp=2),
                memory=MemoryConfig(cache_bytes=int(80e9), gpu_memory_bytes=80e9),
            ),
        )
        > 0
    )


# ----------------------------------------------------------------- routers
def test_session_affinity_keeps_a_session_on_one_replica():
    _, recs = _chat(4, 2.0, router="session-affinity")
    homes: dict[int, set[int]] = {}
    for r in recs:
        homes.setdefault(r.session_id, set()).add(r.replica)
    assert all(len(h) == 1 for h in homes.values())
    assert len({next(iter(h)) for h in homes.values()}) == 4


@pytest.mark.parametrize("policy", ["marconi", "vllm+"])
def test_prefix_aware_routing_finds_the_history(policy):
    rr, _ = _chat(4, 2.0, router="round-robin", policy=policy)
    pa, _ = _chat(4, 2.0, router="prefix-aware", policy=policy)
    assert pa["hit"]["token_hit_rate"] > rr["hit"]["token_hit_rate"] + 0.1


def test_least_loaded_balances_outstanding_work():
    summary, _ = _chat(3, 3.0, router="least-loaded")
    counts = [r["requests"] for r in summary["replicas"]]
    assert max(counts) - min(counts) < 0.2 * max(counts)


def test_unknown_names_are_refused():
    with pytest.raises(TwinError, match="valid routers"):
        run(CHAT, LinearPricer(), router="random")
    with pytest.raises(TwinError, match="valid policies"):
        run(CHAT, LinearPricer(), policy="lru")
    with pytest.raises(TwinError, match="max-running"):
        EngineConfig(scheduling=SchedulerConfig(max_running=300, max_batched_tokens=256))
