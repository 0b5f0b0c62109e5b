"""Disaggregated prefill and decode (issue 36): conservation, transfer accounting, a
known-answer timeline, and the flags refused in one line."""

from __future__ import annotations

import itertools
import math

import pyarrow.parquet as pq
import pytest
from test_bad_input import assert_clean_error
from test_engine_helpers import LinearPricer, generated, run, single_turns

from twin.engine.config import DisaggConfig, EngineConfig
from twin.engine.disagg import TIMELINE_FILE, DisaggCluster, WorkerPool, transfer_shares
from twin.engine.disagg import DisaggCluster as DC
from twin.engine.fabric import KvLink, kv_link
from twin.engine.memory_rules import held_bytes
from twin.errors import TwinError
from twin.metrics import RequestRecord
from twin.presets import get_model
from twin.workloads.reader import Workload

GB = 1e9
IDEAL = KvLink("ideal", math.inf, 0.0, "test: an infinitely fast link")


def _disagg(p: int, d: int, **fields: object) -> dict[str, object]:
    return {"prefill_workers": p, "decode_workers": d, "replicas": p + d, **fields}


def _records(path, model, pricer, config, link=None):
    records: list[RequestRecord] = []
    cluster = DisaggCluster(
        model, pricer, EngineConfig.of(**config), Workload.open(path), records.append, link
    )
    stats = cluster.run()
    return cluster, stats, records


def test_one_request_known_answer_on_an_infinitely_fast_link(tmp_path):
    """P = D = 1, one request, no transfer time: TTFT is its prefill, e2e is prefill + the
    decode worker's first step (the first token's forward) + the decode steps, each priced
    by hand."""
    n, out = 64, 5
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=n, output_len=out)
    pricer = LinearPricer()
    model = get_model("tiny-hybrid")
    _, stats, (rec,) = _records(path, model, pricer, _disagg(1, 1), IDEAL)
    base, tok, key, per_seq = pricer.base, pricer.per_token, pricer.per_key, pricer.per_seq
    prefill = base + tok * n + key * (n * (n + 1) // 2)
    first = base + tok + key * (n + 1)
    decodes = sum(base + per_seq + key * (n + 1 + j) for j in range(1, out - 1))
    assert rec.ttft_s == pytest.approx(prefill, rel=1e-12)
    assert rec.e2e_s == pytest.approx(prefill + first + decodes, rel=1e-12)
    assert rec.output_tokens == out and not rec.rejected
    assert stats.pools is not None and stats.pools["transfer"]["transferred_requests"] == 1


def test_the_link_adds_the_transfer_of_the_prompt_kv_and_state(tmp_path):
    n, out, tp = 64, 5, 2
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=n, output_len=out)
    model = get_model("tiny-hybrid")
    pricer = LinearPricer()
    config = _disagg(1, 1, tp=tp)
    _, _, (ideal,) = _records(path, model, pricer, config, IDEAL)
    link = kv_link("ib", None, EngineConfig.of(**config))
    cluster, stats, (rec,) = _records(path, model, pricer, config, link)
    nbytes = n * model.kv_bytes_per_token + model.ssm_checkpoint_bytes
    assert model.n_ssm_layers and model.ssm_checkpoint_bytes > 0
    assert stats.pools["transfer"]["bytes"] == nbytes
    seconds = nbytes / tp / link.bw_per_gpu + link.latency_s
    # The client's first token comes from the decode worker, after the transfer.
    assert rec.ttft_s == pytest.approx(ideal.ttft_s + seconds, rel=1e-9)
    assert rec.e2e_s == pytest.approx(ideal.e2e_s + seconds, rel=1e-9)
    (row,) = cluster.timeline
    assert row[7] - row[6] == pytest.approx(seconds, rel=1e-9)  # transfer end - start


@pytest.mark.parametrize("shared", [False, True])
def test_conservation_every_request_prefilled_transferred_and_decoded_once(tmp_path, shared):
    path = generated(tmp_path / "w.parquet", "chat", 30, 4.0, max_context=2048)
    model = get_model("tiny-hybrid")
    extra = (
        {"shared_pool": True, "gpu_memory_bytes": 2 * GB}
        if shared
        else {"cache_bytes": int(0.05 * GB), "gpu_memory_bytes": 2 * GB}
    )
    config = _disagg(2, 3, router="prefix-aware", max_running=8, **extra)
    summary, records = run(path, LinearPricer(), model, tmp_path / "out", **config)
    wl = Workload.open(path)
    assert sorted(r.row for r in records) == list(range(wl.num_rows))
    assert not any(r.rejected for r in records)
    assert all(r.completed_s >= r.first_token_s >= r.admitted_s >= r.arrival_s for r in records)
    pools = summary["pools"]
    multi = [r for r in records if r.output_tokens > 1]
    assert pools["transfer"]["prefilled_requests"] == len(records)
    assert pools["transfer"]["transferred_requests"] == len(multi)
    assert pools["prefill"]["requests"] == len(records)
    assert pools["decode"]["requests"] == len(multi)
    assert pools["prefill"]["replicas"] == [0, 1] and pools["decode"]["replicas"] == [2, 3, 4]
    state = model.ssm_checkpoint_bytes if model.n_ssm_layers else 0
    expected = sum(r.input_tokens * model.kv_bytes_per_token + state for r in multi)
    assert pools["transfer"]["bytes"] == expected
    # Prefill workers serve the records (the prefix cache is theirs); decode workers none.
    assert {r.replica for r in records} <= {0, 1}
    timeline = pq.read_table(tmp_path / "out" / TIMELINE_FILE).to_pydict()
    assert sorted(timeline["row"]) == sorted(r.row for r in multi)
    assert sum(timeline["transfer_bytes"]) == expected
    by_row = {r.row: r for r in records}
    for i, row in enumerate(timeline["row"]):
        rec = by_row[row]
        t = {k: v[i] for k, v in timeline.items()}
        assert t["transfer_end_s"] == rec.first_token_s  # the client's first token
        assert t["prefill_end_s"] <= t["reserved_s"] <= t["transfer_start_s"]
        assert t["transfer_start_s"] < t["transfer_end_s"] <= t["first_decode_s"]
        assert t["first_decode_s"] <= t["completed_s"] == rec.completed_s
        assert t["decode_worker"] in (2, 3, 4)
    assert summary["config"]["prefill_workers"] == 2
    assert summary["config"]["kv_link"] == "ib"


def test_the_decode_worker_reserves_memory_before_the_transfer_in_order(tmp_path):
    """A decode worker with one request slot (max_running 1, SGLang's req_to_token_pool):
    the others wait for a reservation (FIFO) before their transfer starts; all complete."""
    n, out = 256, 40
    path = single_turns(tmp_path / "w.parquet", [0.0] * 6, prompt_len=n, output_len=out)
    model = get_model("tiny-hybrid")
    config = _disagg(1, 1, max_running=1, max_batched_tokens=4096)
    cluster, stats, records = _records(path, model, LinearPricer(), config, IDEAL)
    assert len(records) == 6 and not any(r.rejected for r in records)
    assert stats.pools["decode"]["peak_reserved_requests"] == 1
    rows = sorted(cluster.timeline, key=lambda t: t[5])
    for a, b in itertools.pairwise(rows):
        assert b[5] >= a[9]  # reserved only once the one before completed


def _tight(tokens: int, scheduler: str, **fields: object) -> dict[str, object]:
    """A shared pool of ``tokens`` llama-3-8b tokens a decode worker (weights, and what the
    engine's rule holds back besides them, aside: ``twin.engine.memory_rules``)."""
    model = get_model("llama-3-8b")
    config = _disagg(
        1,
        fields.pop("d", 1),
        shared_pool=True,
        gpu_memory_bytes=model.weight_bytes + tokens * model.kv_bytes_per_token,
        memory_utilization=1.0,
        scheduler=scheduler,
        preemption="recompute" if scheduler == "vllm" else "retract",
        **fields,
    )
    held = held_bytes(model, EngineConfig.of(**config), model.weight_bytes)  # type: ignore[arg-type]
    config["gpu_memory_bytes"] = model.weight_bytes + tokens * model.kv_bytes_per_token + held
    return config


def _drained(cluster: DisaggCluster) -> None:
    """Every decode worker ends empty: no request queued, reserved or running, and its
    pool holds no byte of a request (every page taken was given back)."""
    assert not any(cluster._prealloc)
    for worker in cluster.decode:
        sched = worker.scheduler
        assert not sched.waiting and not sched.prefilling and not sched.decoding
        assert worker.reserved == worker.preempted_waiting == 0
        memory = worker.memory
        assert memory.pool.running == 0 if memory.pooled else memory.used == 0


@pytest.mark.parametrize("scheduler", ["continuous", "vllm"])
def test_a_preempted_decode_request_does_not_block_arrivals_holding_memory(tmp_path, scheduler):
    """Regression: three 300-token prompts, 400 tokens out, a decode pool of 1,000 tokens
    and a slow link. The first request decodes while the other two hold reservations for
    their transfers; it grows until the pool is full and is preempted with nothing else
    running, and it cannot take its memory back before the others arrive. It used to stay
    at the queue's head, blocking the arrivals whose memory it needed (``IndexError`` in
    ``_plan_run``); as in vLLM (``skipped_waiting`` first) and SGLang (``retracted_queue``
    apart), the arrivals decode first and it is recomputed after."""
    path = single_turns(tmp_path / "w.parquet", [0.0] * 3, prompt_len=300, output_len=400)
    slow = KvLink("slow", 1e6, 0.0, "test: 1 MB/s")
    model = get_model("llama-3-8b")
    cluster, stats, records = _records(path, model, LinearPricer(), _tight(1000, scheduler), slow)
    assert len(records) == 3 and not any(r.rejected for r in records)
    assert stats.pools["decode"]["preemptions"] == 1
    (victim,) = [r for r in records if r.preemptions]
    if scheduler == "vllm":  # recomputed: the prompt, the first token and what it decoded
        assert victim.recomputed_tokens > 301
    else:  # SGLang's retract: its KV kept in host memory and loaded back
        assert victim.recomputed_tokens == 0
    timeline = {t[0]: t for t in cluster.timeline}
    others = [r for r in records if r is not victim]
    for r in others:
        # Decoded at once on arrival (the worker's next step), however the victim waits.
        first_decode, transfer_end = timeline[r.row][8], timeline[r.row][7]
        assert first_decode - transfer_end < 0.01
    # The victim takes its memory back once the next arrival has completed.
    assert min(r.completed_s for r in others) < victim.completed_s
    _drained(cluster)


def test_sglang_decode_retraction_keeps_the_kv_in_host_memory(tmp_path):
    """SGLang's decode worker (retract) copies a retracted request's KV to host memory and
    loads it back when it resumes: no recompute, the load priced as a host-to-device copy
    of the tokens it kept (the copy out falls in the worker's idle time here)."""

    class Copies(LinearPricer):
        def __init__(self) -> None:
            super().__init__()
            self.out: list[int] = []

        def write_back_time(self, tokens: int, states: int) -> float:
            self.out.append(tokens)
            return tokens * 1e-3

        def hit_work_time(self, recompute: int, host_tokens: int, host_states: int = 0) -> float:
            return host_tokens * 1e-3

    path = single_turns(tmp_path / "w.parquet", [0.0] * 3, prompt_len=300, output_len=400)
    slow = KvLink("slow", 1e6, 0.0, "test: 1 MB/s")
    model = get_model("llama-3-8b")
    config = _tight(1000, "continuous")
    _, _, free = _records(path, model, LinearPricer(), config, slow)
    pricer = Copies()
    _, stats, priced = _records(path, model, pricer, config, slow)
    assert stats.pools["decode"]["preemptions"] == 1
    (kept,) = pricer.out  # all but the last token of the prompt, first token and decodes
    assert kept > 301
    (victim,) = [r for r in priced if r.preemptions]
    assert victim.recomputed_tokens == 0
    before = next(r for r in free if r.row == victim.row)
    assert victim.completed_s - before.completed_s == pytest.approx(kept * 1e-3, rel=1e-6)


@pytest.mark.parametrize("scheduler", ["continuous", "vllm"])
def test_conservation_under_memory_pressure_with_preemption(tmp_path, scheduler):
    """Decode pools too small for their reservations and growth: requests are preempted on
    the decode workers, and still every request is prefilled once, transferred once and
    decoded to completion; bytes, preemptions and recomputed tokens add up."""
    path = generated(tmp_path / "w.parquet", "chat", 20, 4.0, max_context=2048)
    model = get_model("llama-3-8b")
    slow = KvLink("slow", 1e8, 0.0, "test: 100 MB/s")
    config = _tight(3000, scheduler)
    cluster, stats, records = _records(path, model, LinearPricer(), config, slow)
    wl = Workload.open(path)
    assert sorted(r.row for r in records) == list(range(wl.num_rows))
    assert not any(r.rejected for r in records)
    pools = stats.pools
    assert pools["decode"]["preemptions"] > 0
    multi = [r for r in records if r.output_tokens > 1]
    assert pools["transfer"]["prefilled_requests"] == pools["prefill"]["requests"] == len(records)
    assert pools["transfer"]["transferred_requests"] == pools["decode"]["requests"] == len(multi)
    assert sorted(t[0] for t in cluster.timeline) == sorted(r.row for r in multi)
    assert pools["transfer"]["bytes"] == sum(
        r.input_tokens * model.kv_bytes_per_token for r in multi
    )
    # Each preemption is one record's; under vLLM it recomputes the prompt, the first
    # token and what it had decoded (at least 2 tokens more than the prompt), under
    # SGLang's retract nothing (the KV is kept in host memory).
    assert sum(r.preemptions for r in records) == (
        pools["decode"]["preemptions"] + pools["prefill"]["preemptions"]
    )
    for r in records:
        if scheduler == "vllm":
            assert (r.recomputed_tokens > r.input_tokens) == (r.preemptions > 0)
        else:
            assert r.recomputed_tokens == 0
        assert r.completed_s >= r.first_token_s >= r.admitted_s >= r.arrival_s
    _drained(cluster)


def test_nvlink_within_a_node_is_priced_from_the_gpu_spec():
    cfg = EngineConfig.of(**_disagg(1, 1, tp=2))
    link = kv_link("nvlink", "h200", cfg)
    assert link.bw_per_gpu == 450 * GB
    with pytest.raises(TwinError, match="no NVLink"):
        kv_link("nvlink", None, cfg)


def test_each_gpu_sends_the_kv_heads_it_holds(tmp_path):
    # tiny-hybrid has 2 KV heads: at tp 4 each GPU holds (and sends) a whole head's KV,
    # twice its 1/tp share, as twin.parallel counts KV per GPU.
    n, out, tp = 64, 3, 4
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=n, output_len=out)
    model = get_model("tiny-hybrid")
    assert model.n_kv_heads < tp
    config = _disagg(1, 1, tp=tp)
    link = kv_link("ib", None, EngineConfig.of(**config))
    cluster, stats, _ = _records(path, model, LinearPricer(), config, link)
    per_gpu = n * model.kv_bytes_per_token / model.n_kv_heads + model.ssm_checkpoint_bytes / tp
    (row,) = cluster.timeline
    assert row[7] - row[6] == pytest.approx(per_gpu / link.bw_per_gpu + link.latency_s)
    # The summary's bytes stay the request's KV and state, once.
    assert stats.pools["transfer"]["bytes"] == n * model.kv_bytes_per_token + (
        model.ssm_checkpoint_bytes
    )


def test_a_kv_link_without_disaggregation_is_refused():
    with pytest.raises(TwinError, match="only a disaggregated run"):
        EngineConfig(disagg=DisaggConfig(kv_link="nvlink"))
    with pytest.raises(TwinError, match="must be ib or nvlink"):
        EngineConfig(disagg=DisaggConfig(kv_link="bogus"))
    assert EngineConfig(disagg=DisaggConfig(kv_link="ib")).disagg.kv_link == "ib"


# --- pools on their own hardware (per-pool GPU, TP, EP) -------------------------------


def _pool(config: dict[str, object], pricer, model, gpu: str | None = "h100"):
    from twin.engine.budget import memory_budget

    cfg = EngineConfig.of(**config)
    return WorkerPool(cfg, pricer, memory_budget(model, cfg), gpu, "test pricer")


@pytest.mark.parametrize("name", ["llama-3-8b", "tiny-hybrid", "deepseek-v3", "qwen3.5-9b"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_equal_tp_shares_are_the_kv_each_gpu_holds(name, tp):
    from twin.parallel import Layout, kv_bytes_per_token_per_gpu

    model = get_model(name)
    try:
        held = kv_bytes_per_token_per_gpu(model, Layout(tp))
    except TwinError:
        pytest.skip("the model cannot take this tp")
    assert transfer_shares(model, tp, tp) == (held, held)


def test_mismatched_tp_moves_head_slices_as_sglang_maps_ranks():
    llama = get_model("llama-3-8b")  # 8 KV heads
    full = llama.kv_bytes_per_token
    assert llama.n_kv_heads == 8
    # Prefill tp 2 (4 heads a GPU) -> decode tp 4 (2 heads): each prefill GPU sends its 4
    # heads as two slices, one to each of its two decode GPUs.
    assert transfer_shares(llama, 2, 4) == (full / 2, full / 4)
    # Prefill tp 4 -> decode tp 2: each decode GPU gathers the heads of two prefill GPUs.
    assert transfer_shares(llama, 4, 2) == (full / 4, full / 2)
    # 2 KV heads on 4 decode GPUs: each holds a whole (replicated) head; the one prefill
    # GPU sends each of the four its head, twice the model's KV in all.
    tiny = get_model("tiny-hybrid")
    assert tiny.n_kv_heads == 2
    assert transfer_shares(tiny, 1, 4) == (2 * tiny.kv_bytes_per_token, tiny.kv_bytes_per_token / 2)
    # MLA's latent is whole on every rank: sent once per decode rank it feeds, and only by
    # one of the prefill ranks a decode rank pulls from.
    mla = get_model("deepseek-v3")
    latent = mla.kv_bytes_per_token
    assert transfer_shares(mla, 2, 8) == (4 * latent, latent)
    assert transfer_shares(mla, 8, 2) == (latent, latent)


def test_tps_that_do_not_divide_each_other_are_refused():
    with pytest.raises(TwinError, match="one must divide the other"):
        transfer_shares(get_model("llama-3-8b"), 2, 3)


def test_a_decode_pool_of_its_own_prices_the_transfer_and_the_decode(tmp_path):
    """Known answer: prefill tp 1 with one pricer, decode tp 2 with another. The transfer
    lasts as long as the busier end's share (the prefill GPU sends all the KV, as two
    slices, and the whole state); the decode steps are the decode pool's prices."""
    n, out = 64, 5
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=n, output_len=out)
    model = get_model("tiny-hybrid")
    pre, dec = LinearPricer(), LinearPricer(base=3e-3, per_token=2e-5, per_key=3e-9)
    config = _disagg(1, 1, gpu_memory_bytes=4 * GB, cache_bytes=int(0.1 * GB))
    _, _, (ideal,) = _records(path, model, pre, config, IDEAL)
    pool = _pool({"tp": 2, "gpu_memory_bytes": 4 * GB, "cache_bytes": int(0.1 * GB)}, dec, model)
    link = kv_link("ib", None, EngineConfig.of(**config))
    cluster = DisaggCluster(
        model, pre, EngineConfig.of(**config), Workload.open(path), lambda r: None, link, pool
    )
    records: list[RequestRecord] = []
    cluster.on_record = records.append
    stats = cluster.run()
    (rec,) = records
    sent = n * model.kv_bytes_per_token + model.ssm_checkpoint_bytes  # ptp 1: everything
    received = sent / 2
    seconds = max(sent, received) / link.bw_per_gpu + link.latency_s
    assert rec.ttft_s == pytest.approx(ideal.ttft_s + seconds, rel=1e-9)
    first = dec.base + dec.per_token + dec.per_key * (n + 1)
    decodes = sum(dec.base + dec.per_seq + dec.per_key * (n + 1 + j) for j in range(1, out - 1))
    assert rec.e2e_s == pytest.approx(rec.ttft_s + first + decodes, rel=1e-9)
    pools = stats.pools
    assert pools["prefill"]["gpus"] == 1 and pools["decode"]["gpus"] == 2
    assert pools["decode"]["tp"] == 2 and pools["prefill"]["tp"] == 1
    assert pools["decode"]["memory_budget_bytes"] == pool.budget != cluster.budget
    assert "decode ranks 2i .. 2i + 1" in pools["transfer"]["rank_mapping"]
    assert pools["transfer"]["bytes"] == sent


@pytest.mark.parametrize(("ptp", "dtp"), [(1, 2), (4, 2)])
def test_conservation_with_pools_of_different_tp(tmp_path, ptp, dtp):
    path = generated(tmp_path / "w.parquet", "chat", 30, 4.0, max_context=2048)
    model = get_model("tiny-hybrid")
    mem = {"shared_pool": True, "gpu_memory_bytes": 2 * GB}
    config = _disagg(2, 3, router="prefix-aware", max_running=8, tp=ptp, **mem)
    pool = _pool({"tp": dtp, "max_running": 4, **mem}, LinearPricer(base=2e-3), model)
    link = kv_link("ib", None, EngineConfig.of(**config))
    records: list[RequestRecord] = []
    cluster = DisaggCluster(
        model,
        LinearPricer(),
        EngineConfig.of(**config),
        Workload.open(path),
        records.append,
        link,
        pool,
    )
    stats = cluster.run()
    wl = Workload.open(path)
    assert sorted(r.row for r in records) == list(range(wl.num_rows))  # each once
    assert not any(r.rejected for r in records)
    multi = [r for r in records if r.output_tokens > 1]
    transfer = stats.pools["transfer"]
    assert transfer["prefilled_requests"] == len(records)
    assert transfer["transferred_requests"] == len(multi) == len(cluster.timeline)
    assert sorted(t[0] for t in cluster.timeline) == sorted(r.row for r in multi)
    state = model.ssm_checkpoint_bytes
    assert transfer["bytes"] == sum(
        r.input_tokens * model.kv_bytes_per_token + state for r in multi
    )
    # Decoded to completion on the decode pool, under its own running cap.
    assert stats.pools["decode"]["requests"] == len(multi)
    assert stats.pools["decode"]["peak_reserved_requests"] <= 4
    assert stats.pools["decode"]["gpus"] == 3 * dtp and stats.pools["prefill"]["gpus"] == 2 * ptp
    send, recv = cluster.kv_send_per_token_gpu, cluster.kv_recv_per_token_gpu
    for t in cluster.timeline:
        rec = next(r for r in multi if r.row == t[0])
        share = max(rec.input_tokens * send + state / ptp, rec.input_tokens * recv + state / dtp)
        assert t[7] - t[6] == pytest.approx(share / link.bw_per_gpu + link.latency_s, rel=1e-9)


def test_build_run_gives_the_decode_pool_its_own_gpu_tp_and_memory(tmp_path):
    from twin.engine import build_run, memory_budget

    path = generated(tmp_path / "w.parquet", "chat", 4, 2.0, max_context=2048)
    run = build_run(
        path,
        model="llama-3-8b",
        engine="sglang",
        cache_gb="auto",
        prefill_workers=1,
        decode_workers=2,
        prefill_gpu="h200",
        decode_gpu="h100",
        prefill_tp=2,
        decode_tp=4,
    )
    assert run.profile.gpu == "h200" and run.config.cluster.tp == 2
    assert (run.config.disagg.decode_gpu, run.config.disagg.decode_tp) == ("h100", 4)
    pool = run.decode
    assert pool is not None and pool.gpu == "h100" and pool.config.cluster.tp == 4
    assert pool.config.memory.gpu_memory_bytes == 80 * 2**30  # the H100's 80 GiB, not the H200's
    assert pool.budget == memory_budget(run.model, pool.config)
    summary = run.simulate(tmp_path / "out").to_dict()
    pools = summary["pools"]
    assert (pools["prefill"]["gpu"], pools["decode"]["gpu"]) == ("h200", "h100")
    assert (pools["prefill"]["gpus"], pools["decode"]["gpus"]) == (2, 8)
    assert summary["config"]["decode_gpu"] == "h100"
    # The same pools named through the run's own flags: nothing stored for the decode pool.
    same = build_run(
        path,
        model="llama-3-8b",
        gpu="h200",
        tp=2,
        prefill_workers=1,
        decode_workers=1,
        decode_gpu="h200",
        decode_tp=2,
    )
    assert same.decode is None and "decode_tp" not in same.config.to_dict()


@pytest.mark.parametrize("shared", [False, True])
def test_decode_side_prefix_reuse_sends_only_what_the_decode_worker_lacks(tmp_path, shared):
    """``decode_prefix_cache``: a later turn's prompt starts with the earlier turn's prompt
    and output, which the decode worker that served it keeps in its cache; the transfer
    sends the rest only. Against the same run without reuse: the same requests complete,
    and the bytes saved are exactly the hit tokens' KV."""
    path = generated(tmp_path / "w.parquet", "chat", 12, 2.0, max_context=2048)
    model = get_model("llama-3-8b")
    memory = {"shared_pool": True} if shared else {"cache_bytes": int(2 * GB)}
    config = _disagg(
        1, 2, gpu_memory_bytes=model.weight_bytes + 6 * GB, memory_utilization=1.0, **memory
    )
    runs = {}
    for reuse in (False, True):
        runs[reuse] = _records(
            path, model, LinearPricer(), {**config, "decode_prefix_cache": reuse}, IDEAL
        )
    (_, plain_stats, plain_recs), (cluster, stats, records) = runs[False], runs[True]
    assert sorted(r.row for r in records) == sorted(r.row for r in plain_recs)
    transfer = stats.pools["transfer"]
    hits = transfer["decode_hit_tokens"]
    assert "decode_hit_tokens" not in plain_stats.pools["transfer"]
    assert 0 < hits < sum(r.input_tokens for r in records)
    kv = model.kv_bytes_per_token
    assert transfer["bytes"] == plain_stats.pools["transfer"]["bytes"] - hits * kv
    assert sum(t[10] for t in cluster.timeline) == transfer["bytes"]
    # A request's bytes: its prompt less the hit; later turns are the ones that hit.
    by_row = {r.row: r for r in records}
    saved = [t for t in cluster.timeline if t[10] < by_row[t[0]].input_tokens * kv]
    assert saved and all(by_row[t[0]].turn > 0 for t in saved)
    assert all(w.hit_tokens >= 0 for w in cluster.decode)
    _drained(cluster)
    if shared:
        for w in cluster.decode:
            w.memory.pool.verify()  # running + cached + free = size


def test_attention_dp_pools_conserve_requests_and_map_attention_ranks(tmp_path, monkeypatch):
    """A prefill pool of 8 attention-DP ranks (tp 8, ep 1) and a decode pool of plain tp 8
    / ep 8 workers, then the reverse: every request prefilled, transferred and decoded once,
    every unit drained, each DP rank serving its share; the KV moves between the pools'
    attention TP ranks (DeepSeek's MLA latent: a prefill rank of attention TP 1 sends it
    to each of the 8 decode ranks it serves, as SGLang maps attn_tp_size)."""
    from twin.engine import build_run
    from twin.engine.dp_attention import DPReplica

    path = single_turns(tmp_path / "w.parquet", [0.05 * i for i in range(24)], 512, 24)
    model = get_model("deepseek-v3")
    latent = model.kv_bytes_per_token
    seen: list[DC] = []
    original = DC.__init__

    def keep(self, *args, **kwargs):
        original(self, *args, **kwargs)
        seen.append(self)

    monkeypatch.setattr(DC, "__init__", keep)
    for dp_pool, send_times in (("prefill", 8), ("decode", 1)):
        records: list[RequestRecord] = []
        run = build_run(
            path,
            model="deepseek-v3",
            gpu="h200",
            engine="sglang",
            cache_gb="auto",
            tp=8,
            ep=8,
            prefill_workers=2,
            decode_workers=1,
            **{f"{dp_pool}_dp_attention": 8, f"{dp_pool}_ep": 8 if dp_pool == "decode" else 1},
        )
        summary = run.simulate(tmp_path / dp_pool, on_record=records.append).to_dict()
        cluster = seen[-1]
        assert len(records) == 24 and not any(r.rejected for r in records)
        pools = summary["pools"]
        assert pools["layout"] == "2P1D"
        assert pools[dp_pool]["dp_attention"] == 8 and pools[dp_pool]["gpus"] == 8 * (
            2 if dp_pool == "prefill" else 1
        )
        transfer = pools["transfer"]
        assert transfer["prefilled_requests"] == transfer["transferred_requests"] == 24
        assert transfer["bytes"] == 24 * 512 * latent
        assert transfer["kv_send_bytes_per_token_per_gpu"] == send_times * latent
        assert transfer["kv_recv_bytes_per_token_per_gpu"] == latent
        dp_workers = cluster.prefill if dp_pool == "prefill" else cluster.replicas[2:]
        assert all(isinstance(w, DPReplica) and len(w.ranks) == 8 for w in dp_workers)
        # Each rank served requests: the engine's dealer spreads them (round-robin).
        served = [r.submitted for w in dp_workers for r in w.ranks]
        assert sum(served) == 24 and min(served) >= 1
        assert len(cluster.decode) == (8 if dp_pool == "decode" else 1)
        _drained(cluster)


# One prefill worker and one decode worker: the smallest disaggregated run.
POOLS = ["--prefill-workers", "1", "--decode-workers", "1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefill-workers", "1"], "give both"),
        (["--decode-workers", "2"], "give both"),
        (["--prefill-workers", "0", "--decode-workers", "1"], "give both"),
        ([*POOLS, "-r", "4"], "leave --replicas out"),
        ([*POOLS, "--kv-link", "x"], "ib or nvlink"),
        (
            ["--prefill-workers", "4", "--decode-workers", "4", "--tp", "2", "--kv-link", "nvlink"],
            "share a node",
        ),
        (["--decode-tp", "2"], "only a disaggregated run has pools"),
        (
            [*POOLS, "--prefill-tp", "2", "--decode-tp", "3", "-m", "llama-3-8b"],
            "one must divide the other",
        ),
        ([*POOLS, "--decode-gpu", "h200", "--kv-link", "nvlink"], "an HGX node holds one GPU type"),
        (
            [*POOLS, "--decode-gpu", "l4", "-m", "llama-3.1-70b", "--prefill-tp", "8"],
            "the decode pool (l4, tp 1)",
        ),
        ([*POOLS, "--decode-tp", "2", "--decode-ep", "4"], "--decode-ep"),
        ([*POOLS, "--decode-gpu", "nope"], "nope"),
        (
            [*POOLS, "--tp", "8", "--decode-dp-attention", "3", "-m", "deepseek-v3"],
            "--decode-dp-attention: must divide the decode pool's tp 8",
        ),
        (["--decode-dp-attention", "2", "--tp", "2"], "only a disaggregated run has pools"),
        (["--decode-prefix-cache"], "only a disaggregated run has a decode pool"),
        # The overlap scheduler's admission lag is modelled on an aggregated replica only.
        (
            ["--engine", "trtllm", "--set", "overlap_scheduler=true", *POOLS],
            "--set overlap_scheduler: not modelled with disaggregated pools",
        ),
        # SGLang's own flag names a server's role; the twin's pools are the deployment.
        (["--engine", "sglang", "--set", "disaggregation_mode=prefill"], "one SGLang server"),
        (
            ["--engine", "sglang", "--set", "disaggregation_mode=null", *POOLS],
            "conflicts with --set disaggregation_mode=null",
        ),
    ],
)
def test_bad_pool_flags_are_one_line_errors(capsys, tmp_path, args, message):
    out = tmp_path / "o"
    argv = ["simulate", "--gpu", "h100", "--out", str(out), *args]
    assert_clean_error(capsys, argv, tmp_path, message)
