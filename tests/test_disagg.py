"""Disaggregated prefill and decode (issue 36): conservation, transfer accounting, a
known-answer timeline, and the flags refused in one line."""

from __future__ import annotations

import itertools
import math

import pyarrow.parquet as pq
import pytest
from test_bad_input import assert_clean_error
from test_engine_helpers import LinearPricer, generated, run, single_turns

from twin.engine.config import EngineConfig
from twin.engine.disagg import TIMELINE_FILE, DisaggCluster, KvLink, kv_link
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
        model, pricer, EngineConfig(**config), Workload.open(path), records.append, link
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
    link = kv_link("ib", None, EngineConfig(**config))
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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefill-workers", "1"], "give both"),
        (["--decode-workers", "2"], "give both"),
        (["--prefill-workers", "0", "--decode-workers", "1"], "give both"),
        (["--prefill-workers", "1", "--decode-workers", "1", "-r", "4"], "leave --replicas out"),
        (["--prefill-workers", "1", "--decode-workers", "1", "--kv-link", "x"], "ib or nvlink"),
        (
            ["--prefill-workers", "4", "--decode-workers", "4", "--tp", "2", "--kv-link", "nvlink"],
            "share a node",
        ),
        (["--prefill-workers", "1", "--decode-workers", "1", "--engine", "trtllm"], "trtllm"),
    ],
)
def test_bad_disaggregated_flags_are_one_line_errors(capsys, tmp_path, args, message):
    out = tmp_path / "o"
    argv = ["simulate", "--gpu", "h100", "--out", str(out), *args]
    assert_clean_error(capsys, argv, tmp_path, message)


def test_nvlink_within_a_node_is_priced_from_the_gpu_spec():
    cfg = EngineConfig(**_disagg(1, 1, tp=2))
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
    link = kv_link("ib", None, EngineConfig(**config))
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
        EngineConfig(kv_link="nvlink")
    with pytest.raises(TwinError, match="must be ib or nvlink"):
        EngineConfig(kv_link="bogus")
    assert EngineConfig(kv_link="ib").kv_link == "ib"


# --- pools on their own hardware (per-pool GPU, TP, EP) -------------------------------


def _pool(config: dict[str, object], pricer, model, gpu: str | None = "h100"):
    from twin.engine.cluster import memory_budget
    from twin.engine.disagg import WorkerPool

    cfg = EngineConfig(**config)
    return WorkerPool(cfg, pricer, memory_budget(model, cfg), gpu, "test pricer")


@pytest.mark.parametrize("name", ["llama-3-8b", "tiny-hybrid", "deepseek-v3", "qwen3.5-9b"])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_equal_tp_shares_are_the_kv_each_gpu_holds(name, tp):
    from twin.engine.disagg import transfer_shares
    from twin.parallel import Layout, kv_bytes_per_token_per_gpu

    model = get_model(name)
    try:
        held = kv_bytes_per_token_per_gpu(model, Layout(tp))
    except TwinError:
        pytest.skip("the model cannot take this tp")
    assert transfer_shares(model, tp, tp) == (held, held)


def test_mismatched_tp_moves_head_slices_as_sglang_maps_ranks():
    from twin.engine.disagg import transfer_shares

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
    from twin.engine.disagg import transfer_shares

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
    link = kv_link("ib", None, EngineConfig(**config))
    cluster = DisaggCluster(
        model, pre, EngineConfig(**config), Workload.open(path), lambda r: None, link, pool
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
    link = kv_link("ib", None, EngineConfig(**config))
    records: list[RequestRecord] = []
    cluster = DisaggCluster(
        model,
        LinearPricer(),
        EngineConfig(**config),
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
    assert run.profile.gpu == "h200" and run.config.tp == 2
    assert (run.config.decode_gpu, run.config.decode_tp) == ("h100", 4)
    pool = run.decode
    assert pool is not None and pool.gpu == "h100" and pool.config.tp == 4
    assert pool.config.gpu_memory_bytes == 80 * 2**30  # the H100's 80 GiB, not the H200's
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


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--decode-tp", "2"], "only a disaggregated run has pools"),
        (
            [
                "--prefill-workers",
                "1",
                "--decode-workers",
                "1",
                "--prefill-tp",
                "2",
                "--decode-tp",
                "3",
                "-m",
                "llama-3-8b",
            ],
            "one must divide the other",
        ),
        (
            [
                "--prefill-workers",
                "1",
                "--decode-workers",
                "1",
                "--decode-gpu",
                "h200",
                "--kv-link",
                "nvlink",
            ],
            "an HGX node holds one GPU type",
        ),
        (
            [
                "--prefill-workers",
                "1",
                "--decode-workers",
                "1",
                "--decode-gpu",
                "l4",
                "-m",
                "llama-3.1-70b",
                "--prefill-tp",
                "8",
            ],
            "the decode pool (l4, tp 1)",
        ),
        (
            [
                "--prefill-workers",
                "1",
                "--decode-workers",
                "1",
                "--decode-tp",
                "2",
                "--decode-ep",
                "4",
            ],
            "--decode-ep",
        ),
        (["--prefill-workers", "1", "--decode-workers", "1", "--decode-gpu", "nope"], "nope"),
        # SGLang's own flag names a server's role; the twin's pools are the deployment.
        (["--engine", "sglang", "--set", "disaggregation_mode=prefill"], "one SGLang server"),
        (
            [
                "--engine",
                "sglang",
                "--set",
                "disaggregation_mode=null",
                "--prefill-workers",
                "1",
                "--decode-workers",
                "1",
            ],
            "conflicts with --set disaggregation_mode=null",
        ),
    ],
)
def test_bad_pool_flags_are_one_line_errors(capsys, tmp_path, args, message):
    out = tmp_path / "o"
    argv = ["simulate", "--gpu", "h100", "--out", str(out), *args]
    assert_clean_error(capsys, argv, tmp_path, message)
