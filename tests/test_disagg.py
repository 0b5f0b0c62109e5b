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
