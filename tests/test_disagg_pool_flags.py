"""Each pool's own engine flags (issue 36): ``--prefill-set`` / ``--decode-set``."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from test_bad_input import assert_clean_error
from test_disagg import POOLS
from test_engine_helpers import single_turns

from twin.engine import build_run
from twin.engine.disagg import TIMELINE_FILE


def _build(path, engine="vllm", **flags):
    """Llama-3-8B on H100, one prefill and one decode worker on shared KV pools."""
    return build_run(
        path,
        model="llama-3-8b",
        gpu="h100",
        engine=engine,
        cache_gb="auto",
        prefill_workers=1,
        decode_workers=1,
        **flags,
    )


def _run(path, out, **flags):
    run = _build(path, **flags)
    summary = run.simulate(out).to_dict()
    return run, summary, pq.read_table(out / TIMELINE_FILE).to_pydict()


@pytest.fixture(scope="module")
def workload(tmp_path_factory):
    # 16 single-turn requests of 1,000 prompt and 64 output tokens, one every 20 ms: the
    # decode worker runs several at once by default. Open loop: arrivals do not depend on
    # completions, so what one pool does cannot move the other's arrivals.
    path = tmp_path_factory.mktemp("w") / "w.parquet"
    return single_turns(path, [0.02 * i for i in range(16)], prompt_len=1000, output_len=64)


def test_a_decode_flag_changes_the_decode_pool_and_only_it(workload, tmp_path):
    base_run, base, base_t = _run(workload, tmp_path / "base")
    run, summary, timeline = _run(
        workload, tmp_path / "capped", decode_engine_flags={"max_num_seqs": "2"}
    )
    # The decode pool's servers run --max-num-seqs 2; the prefill pool's keep vLLM's cap.
    assert run.decode is not None and run.decode.config.scheduling.max_running == 2
    assert run.config.scheduling.max_running == base_run.config.scheduling.max_running > 2
    assert run.config.mode.engine_flags == {} and run.decode.config.mode.engine_flags == {
        "max_num_seqs": "2"
    }
    assert summary["config"]["decode_engine_flags"] == {"max_num_seqs": "2"}
    # The cap binds: the default decode worker ran more at once, the capped one at most 2.
    assert base["pools"]["decode"]["peak_running_requests"] > 2
    assert summary["pools"]["decode"]["peak_running_requests"] <= 2
    assert summary["pools"]["decode"]["peak_reserved_requests"] <= 2
    assert summary["pools"]["decode"]["max_running"] == 2
    # vLLM's prefill instance does not wait for the decode side (NIXL pull after the
    # prefill): every prefill is exactly as before, the decode side slower.
    order = sorted(range(len(base_t["row"])), key=lambda i: base_t["row"][i])
    again = sorted(range(len(timeline["row"])), key=lambda i: timeline["row"][i])
    assert [base_t["prefill_end_s"][i] for i in order] == [
        timeline["prefill_end_s"][i] for i in again
    ]
    assert summary["ttft_s"]["mean"] > base["ttft_s"]["mean"]  # waits for a decode slot
    assert summary["requests"]["measured"] == base["requests"]["measured"] == 16


def test_a_prefill_flag_changes_the_prefill_pool_and_only_it(workload, tmp_path):
    base_run, _, base_t = _run(workload, tmp_path / "base")
    run, summary, timeline = _run(
        workload, tmp_path / "chunked", prefill_engine_flags={"max_num_batched_tokens": "256"}
    )
    assert run.config.scheduling.max_batched_tokens == 256
    assert run.config.mode.engine_flags == {"max_num_batched_tokens": "256"}  # the prefill pool's
    assert run.decode is not None
    assert (
        run.decode.config.scheduling.max_batched_tokens
        == base_run.config.scheduling.max_batched_tokens
        != 256
    )
    assert run.decode.config.scheduling.max_running == base_run.config.scheduling.max_running
    assert summary["pools"]["prefill"]["engine_flags"] == {"max_num_batched_tokens": "256"}
    assert summary["pools"]["decode"]["engine_flags"] == {}
    # 256-token chunks: each 1,000-token prompt takes four steps to prefill, not one.
    spans = [e - a for a, e in zip(timeline["arrival_s"], timeline["prefill_end_s"], strict=True)]
    base_spans = [e - a for a, e in zip(base_t["arrival_s"], base_t["prefill_end_s"], strict=True)]
    assert sum(spans) > sum(base_spans)


def test_flags_in_set_are_both_pools_and_pool_flags_default_to_them(workload, tmp_path):
    """``--set`` alone: one configuration for both pools (no decode pool of its own);
    ``--set`` with a pool's flag: the pool's flags are --set's and its own."""
    shared = _build(workload, sets={"max_num_seqs": "3"})
    assert shared.decode is None and shared.config.scheduling.max_running == 3
    both = _build(
        workload,
        sets={"max_num_seqs": "3"},
        decode_engine_flags={"max-num-batched-tokens": "512"},
    )
    assert both.decode is not None
    assert both.decode.config.mode.engine_flags == {
        "max_num_seqs": "3",
        "max_num_batched_tokens": "512",
    }
    assert (
        both.decode.config.scheduling.max_running,
        both.decode.config.scheduling.max_batched_tokens,
    ) == (3, 512)
    assert (
        both.config.scheduling.max_running == 3 and both.config.scheduling.max_batched_tokens != 512
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--decode-set", "max_num_seqs=4"], "--decode-set: only a disaggregated run has pools"),
        (
            [*POOLS, "--set", "max_num_seqs=8", "--decode-set", "max_num_seqs=4"],
            "--set max_num_seqs already sets it for both pools",
        ),
        (
            [*POOLS, "--prefill-set", "nope=1"],
            "--prefill-set nope=1: engine 'vllm' has no such flag",
        ),
        (
            [*POOLS, "--decode-set", "max_num_seqs=x"],
            "--decode-set max_num_seqs=x: expected an integer",
        ),
        (
            [*POOLS, "--max-running", "8", "--decode-set", "max_num_seqs=4"],
            "--decode-set max_num_seqs=4 conflicts with --max-running 8",
        ),
        (
            [*POOLS, "--decode-set", "max_num_seqs"],
            "--decode-set 'max_num_seqs': expected KEY=VALUE",
        ),
    ],
)
def test_bad_pool_engine_flags_are_one_line_errors(capsys, tmp_path, args, message):
    argv = ["simulate", "-m", "llama-3-8b", "--engine", "vllm", "--out", str(tmp_path / "o")]
    assert_clean_error(capsys, [*argv, *args], tmp_path, message)


def test_a_pool_flag_may_not_set_the_deployment(capsys, tmp_path):
    argv = ["simulate", "-m", "llama-3-8b", "--engine", "sglang", "--out", str(tmp_path / "o")]
    assert_clean_error(
        capsys,
        [*argv, *POOLS, "--prefill-set", "disaggregation_mode=null"],
        tmp_path,
        "--prefill-set disaggregation_mode=null: sets the deployment's prefill_workers",
    )


def test_tensorrt_llm_serves_disaggregated_with_its_own_batch_sizes(workload, tmp_path):
    """TensorRT-LLM's context and generation servers: every request prefilled, sent after
    its context phase ended (the generation server allocates and pulls then) and decoded
    once; the generation servers' --max_batch_size caps the decode pool alone."""
    run = _build(workload, "trtllm", decode_engine_flags={"max_batch_size": "2"})
    assert run.decode is not None and run.decode.config.scheduling.max_running == 2
    assert run.config.scheduling.max_running > 2
    summary = run.simulate(tmp_path / "trt").to_dict()
    t = pq.read_table(tmp_path / "trt" / TIMELINE_FILE).to_pydict()
    transfer = summary["pools"]["transfer"]
    assert transfer["prefilled_requests"] == transfer["transferred_requests"] == 16
    assert "after the context phase" in transfer["policy"]
    assert all(s >= e for s, e in zip(t["transfer_start_s"], t["prefill_end_s"], strict=True))
    assert all(r >= e for r, e in zip(t["reserved_s"], t["prefill_end_s"], strict=True))
    assert summary["pools"]["decode"]["peak_running_requests"] <= 2
    assert summary["requests"]["measured"] == 16
