"""Disaggregated prefill and decode (issue 36): each engine's hand-off of a request from
its prefill worker to its decode worker (``twin.engine.disagg.HANDOFFS``). SGLang sends
each prefill chunk's KV as the chunk ends and reserves the decode side's memory before
the prefill starts (which waits for it); vLLM pulls the whole prompt after the prefill."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from test_disagg import _disagg, _drained, _records, _tight
from test_engine_helpers import LinearPricer, generated, run, single_turns, write_rows

from twin.engine.disagg import (
    AFTER_PREFILL,
    SGLANG_PER_CHUNK,
    TIMELINE_FILE,
    TRTLLM_AFTER_CONTEXT,
    handoff_for,
)
from twin.engine.fabric import KvLink
from twin.presets import get_model
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow

# The timeline's columns by position (twin.engine.disagg.TIMELINE_COLUMNS).
PREFILL_END, RESERVED, START, END, TAIL, EARLY = 4, 5, 6, 7, 11, 12


def test_engines_have_their_hand_off():
    assert handoff_for("sglang") is SGLANG_PER_CHUNK
    assert handoff_for("sglang==0.5.10.post1") is SGLANG_PER_CHUNK
    assert handoff_for("vllm") is AFTER_PREFILL
    assert handoff_for("paper") is AFTER_PREFILL
    # TensorRT-LLM's generation server allocates and pulls once the context phase ended.
    trt = handoff_for("trtllm")
    assert trt is TRTLLM_AFTER_CONTEXT and not (trt.reserve_first or trt.per_chunk)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_with_chunked_prefill_sglang_leaves_only_the_last_chunk_after_the_prefill(tmp_path, engine):
    """One 1,024-token prompt prefilled in four 256-token chunks over a link that moves a
    chunk's KV in 1 ms (a chunk's step takes about 3.6 ms, so it keeps up). SGLang sends
    chunks 1-3 as they end: after the prefill only the last chunk's KV and the state go
    (the transfer's tail); vLLM pulls all 1,024 tokens' KV after the prefill."""
    n, out, chunk = 1024, 4, 256
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=n, output_len=out)
    model = get_model("tiny-hybrid")
    kv, state = model.kv_bytes_per_token, model.ssm_checkpoint_bytes
    assert state > 0
    latency = 1e-5
    link = KvLink("test", chunk * kv / 1e-3, latency, "test: a chunk's KV a millisecond")
    config = _disagg(1, 1, engine=engine, max_batched_tokens=chunk)
    cluster, stats, (rec,) = _records(path, model, LinearPricer(), config, link)
    (row,) = cluster.timeline
    prefill_end, start, end, tail = row[PREFILL_END], row[START], row[END], row[TAIL]
    assert row[10] == n * kv + state  # all of the prompt's KV and the state, either way
    transfer = stats.pools["transfer"]
    if engine == "sglang":
        # Chunks 1-3 went while the prefill ran: the first at the first chunk's end.
        assert start < prefill_end and row[EARLY] == 3 * chunk * kv
        assert row[RESERVED] <= rec.admitted_s  # reserved before the prefill started
        assert tail == prefill_end  # the link had kept up
        assert end - prefill_end == pytest.approx((chunk * kv + state) / link.bw_per_gpu + latency)
        assert transfer["early_bytes"] == 3 * chunk * kv
        assert transfer["after_prefill_s"]["max"] == pytest.approx(end - prefill_end)
        assert "each prefill chunk sent as it ends" in transfer["policy"]
    else:
        assert start == tail == row[RESERVED] >= prefill_end and row[EARLY] == 0
        assert end - prefill_end == pytest.approx((n * kv + state) / link.bw_per_gpu + latency)
        assert "early_bytes" not in transfer
        assert transfer["policy"].endswith("no layer-by-layer overlap")
    assert rec.first_token_s == end  # the client's first token: once the KV is there


def test_sglang_per_chunk_tail_waits_for_a_slow_link(tmp_path):
    """A link slower than the prefill: the chunks queue on it (FIFO) and the last piece
    starts when the earlier ones are through, so the transfer ends when all the bytes
    could, from the first chunk's end: no byte is sent twice or skipped."""
    n, chunk = 1024, 256
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=n, output_len=3)
    model = get_model("llama-3-8b")
    kv = model.kv_bytes_per_token
    link = KvLink("slow", chunk * kv / 0.05, 0.0, "test: a chunk's KV in 50 ms")
    config = _disagg(1, 1, engine="sglang", max_batched_tokens=chunk)
    cluster, _, _ = _records(path, model, LinearPricer(), config, link)
    (row,) = cluster.timeline
    assert row[TAIL] > row[PREFILL_END]  # behind the request's own chunks
    assert row[END] - row[START] == pytest.approx(4 * 0.05)
    assert row[TAIL] == pytest.approx(row[START] + 3 * 0.05)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_full_decode_pool_holds_sglang_prefills_back(tmp_path, engine):
    """A decode worker with one request slot, two requests at once. SGLang's prefill
    server keeps the second in its bootstrap queue until the decode side has reserved
    its memory (after the first completes): its prefill starts then. vLLM prefills it at
    once; only its reservation and transfer wait."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0], prompt_len=256, output_len=40)
    model = get_model("tiny-hybrid")
    config = _disagg(1, 1, engine=engine, max_running=1, max_batched_tokens=4096)
    cluster, stats, records = _records(path, model, LinearPricer(), config)
    first, second = sorted(records, key=lambda r: r.completed_s)
    assert not first.rejected and not second.rejected
    if engine == "sglang":
        assert second.admitted_s >= first.completed_s
        assert stats.pools["decode"]["reserve_wait_s"]["max"] == pytest.approx(
            first.completed_s - second.arrival_s
        )
    else:
        assert second.admitted_s < first.completed_s
    assert stats.pools["decode"]["peak_reserved_requests"] == 1
    _drained(cluster)


def test_sglang_back_pressure_from_decode_memory(tmp_path):
    """A decode pool of 1,000 llama-3-8b tokens and three 400-token prompts at once: the
    decode worker reserves two prompts (802 tokens) and the third's prefill waits in the
    prefill server's bootstrap queue until one of the two completes and frees its memory;
    vLLM prefills all three at once and only the third's transfer waits."""
    path = single_turns(tmp_path / "w.parquet", [0.0] * 3, prompt_len=400, output_len=50)
    model = get_model("llama-3-8b")
    admitted = {}
    for engine in ("sglang", "vllm"):
        config = _tight(1000, "continuous", engine=engine)
        cluster, _, records = _records(path, model, LinearPricer(), config)
        assert len(records) == 3 and not any(r.rejected or r.preemptions for r in records)
        *two, last = sorted(cluster.timeline, key=lambda t: t[RESERVED])
        done = min(t[9] for t in two)
        assert last[RESERVED] >= done  # its memory: once one of the two completed
        admitted[engine] = {r.row: r.admitted_s for r in records}[last[0]]
        if engine == "sglang":
            assert admitted[engine] >= last[RESERVED]  # reserved, then prefilled
        else:
            assert admitted[engine] < done
        _drained(cluster)
    assert admitted["sglang"] > admitted["vllm"]


def test_sglang_conservation_and_the_timeline_with_chunks(tmp_path):
    """A chat workload on 2P3D SGLang with 512-token chunks and a prefix-aware router:
    every request prefilled once, transferred once, decoded to completion; the bytes of
    the chunks sent early and of the tails add up to the prompts' KV and states."""
    path = generated(tmp_path / "w.parquet", "chat", 15, 4.0, max_context=4096)
    model = get_model("tiny-hybrid")
    config = _disagg(
        2,
        3,
        engine="sglang",
        router="prefix-aware",
        max_running=8,
        max_batched_tokens=512,
        shared_pool=True,
        gpu_memory_bytes=2 * 1e9,
    )
    summary, records = run(path, LinearPricer(), model, tmp_path / "out", **config)
    wl = Workload.open(path)
    assert sorted(r.row for r in records) == list(range(wl.num_rows))
    assert not any(r.rejected for r in records)
    pools = summary["pools"]
    multi = [r for r in records if r.output_tokens > 1]
    assert pools["transfer"]["prefilled_requests"] == len(records)
    assert pools["transfer"]["transferred_requests"] == len(multi)
    state = model.ssm_checkpoint_bytes
    expected = sum(r.input_tokens * model.kv_bytes_per_token + state for r in multi)
    assert pools["transfer"]["bytes"] == expected
    t = pq.read_table(tmp_path / "out" / TIMELINE_FILE).to_pydict()
    assert sum(t["transfer_bytes"]) == expected
    early = 0
    by_row = {r.row: r for r in records}
    for i, row in enumerate(t["row"]):
        rec = by_row[row]
        assert t["reserved_s"][i] <= rec.admitted_s <= t["prefill_end_s"][i]
        assert t["transfer_start_s"][i] <= t["tail_start_s"][i] < t["transfer_end_s"][i]
        assert t["prefill_end_s"][i] <= t["tail_start_s"][i]
        assert t["transfer_end_s"][i] == rec.first_token_s
        assert t["early_bytes"][i] <= rec.input_tokens * model.kv_bytes_per_token
        if t["early_bytes"][i]:
            assert rec.input_tokens - rec.hit_tokens > 512  # chunked
            assert t["transfer_start_s"][i] < t["prefill_end_s"][i]
        early += t["early_bytes"][i]
    assert early > 0 and pools["transfer"]["early_bytes"] == early


def _two_requests(path, n: int, follow_up: bool):
    """Two single-turn sessions 1 s apart: a prompt of ``n`` tokens, then the same prompt
    (or, ``follow_up``, it with the first's output and 256 tokens more)."""
    rng = np.random.default_rng(3)
    prompt = rng.integers(0, 30000, n, dtype=np.int32)
    out = rng.integers(0, 30000, 4, dtype=np.int32)
    second = np.concatenate([prompt, out, rng.integers(0, 30000, 256, dtype=np.int32)])
    rows = [
        WorkloadRow(0, 0, 0.0, None, prompt, False, out, 4),
        WorkloadRow(1, 0, 1.0, None, second if follow_up else prompt, False, None, 4),
    ]
    return write_rows(path, rows)


@pytest.mark.parametrize(("name", "policy"), [("llama-3-8b", "marconi"), ("tiny-hybrid", "sglang")])
def test_a_shared_kv_tier_serves_a_prefix_another_prefill_worker_computed(tmp_path, name, policy):
    """2P1D, round-robin: the second request goes to the other prefill worker, whose GPU
    has nothing; with a shared store it loads the first's prefix from there (a hybrid's
    only at a checkpoint with its state), priced over the NIC, and computes the rest."""
    n = 1024
    path = _two_requests(tmp_path / "w.parquet", n, follow_up=True)
    model = get_model(name)
    config = _disagg(2, 1, cache_bytes=int(20e9), policy=policy)
    _, _, plain = _records(path, model, LinearPricer(), config)
    cluster, stats, shared = _records(
        path, model, LinearPricer(), {**config, "shared_kv_tier_bytes": int(50e9)}
    )
    plain_second = max(plain, key=lambda r: r.arrival_s)
    second = max(shared, key=lambda r: r.arrival_s)
    assert {r.replica for r in shared} == {0, 1}  # one on each prefill worker
    # The first's prefill request (its prompt and first token) was cached whole there.
    assert plain_second.hit_tokens == 0 and second.hit_tokens == n + 1
    tier = stats.pools["shared_tier"]
    looked = 2 * n + 4 + 256
    assert tier["lookups"] == 2 and tier["looked_up_tokens"] == looked
    assert tier["requests_hit"] == 1 and tier["loaded_tokens"] == n + 1
    assert tier["hit_rate_tokens"] == (n + 1) / looked
    store = cluster.shared_tier
    state = model.ssm_checkpoint_bytes if model.n_ssm_layers else 0
    load = (second.hit_tokens * store.kv_per_token_gpu + state) / store.link.bw_per_gpu
    assert tier["load_s"] == pytest.approx(load + store.link.latency_s)
    if model.n_ssm_layers:
        assert tier["checkpoints_hit"] == 1
    # The load is cheaper than the prefill it saves (LinearPricer: 10 us a token).
    assert second.ttft_s < plain_second.ttft_s


def test_a_hybrid_shared_tier_hit_is_an_exact_checkpoint(tmp_path):
    """Marconi's policy keeps a single-turn request's state only after its last token
    (prompt + output): a second request with the same prompt finds no checkpoint within
    its prompt in the store, so nothing is loaded (the exact-checkpoint rule)."""
    path = _two_requests(tmp_path / "w.parquet", 1024, follow_up=False)
    model = get_model("tiny-hybrid")
    config = _disagg(2, 1, cache_bytes=int(20e9), policy="marconi")
    _, stats, records = _records(
        path, model, LinearPricer(), {**config, "shared_kv_tier_bytes": int(50e9)}
    )
    tier = stats.pools["shared_tier"]
    assert tier["checkpoints_admitted"] >= 1 and tier["kv_bytes"] > 0
    assert tier["requests_hit"] == 0 and tier["loaded_tokens"] == 0
    assert all(r.hit_tokens == 0 for r in records)


def test_the_shared_kv_tier_flag_is_refused_where_it_cannot_be(tmp_path):
    from twin.engine.config import DisaggConfig, EngineConfig
    from twin.errors import TwinError

    with pytest.raises(TwinError, match="--shared-kv-tier: a store the pools"):
        EngineConfig(disagg=DisaggConfig(shared_kv_tier_bytes=10**9))
    with pytest.raises(TwinError, match="--shared-kv-tier: not modelled with a host"):
        EngineConfig.of(**_disagg(1, 1, shared_kv_tier_bytes=10**9, host_cache_bytes=10**9))
