"""Engine fidelity against silicon (issue 31): each engine rule with a known answer.

SGLang's prefill batches ahead of decodes (``twin.engine.sglang_batching``), its
``batch_is_full`` latch and step budget by GPU memory; vLLM V1's preemption
(``twin.engine.vllm_batching``, the victim's blocks kept cached); the host time per step
(``twin.engine.host_time``); TensorRT-LLM's whole-context batching
(``twin.engine.trtllm_batching``); the serving front end and the fitted engine times.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace

import numpy as np
import pytest
from test_engine_helpers import (
    ConstantPricer,
    FillingPricer,
    LinearPricer,
    run,
    single_turns,
    write_rows,
)

from twin.costmodel.profile_store import load_profile, resolve_profile
from twin.engine import SCHEDULERS, EngineConfig, build_config, sim
from twin.engine.admission import DEFAULTS, NewTokenRatio
from twin.engine.config import ClusterConfig, HostTimeConfig, SchedulerConfig
from twin.engine.cost import Chunk
from twin.engine.engine_times import engine_time_defaults
from twin.engine.host_time import EagerPrefillPricer, HostTimePricer
from twin.engine.modes import get_mode
from twin.engine.modes_sglang import sglang_gpu_defaults
from twin.engine.seq import Seq
from twin.engine.sglang_batching import SGLangBatching
from twin.engine.vllm_batching import VLLMBatching
from twin.errors import TwinError
from twin.policies import get_policy
from twin.policies.structures import make_cache
from twin.presets import get_model
from twin.workloads.schema import WorkloadRow


class RecordingPricer(ConstantPricer):
    """Every step takes ``step_s``; the steps priced through ``step_time`` are kept."""

    def __init__(self, step_s: float = 1.0) -> None:
        super().__init__(step_s)
        self.steps: list[tuple[list[Chunk], int]] = []

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        self.steps.append((list(prefills), decode_batch))
        return self.step_s


def _by_row(records):
    return {r.row: r for r in records}


@pytest.mark.parametrize("scheduler", ["continuous", "sglang"])
def test_sglang_runs_a_waiting_prompt_alone_and_the_decodes_pause(tmp_path, scheduler):
    """A decodes from t=1 (one step a second); B arrives at t=1.5. SGLang runs B's prefill
    as a batch of its own at t=2 (A waits: done at 5, one step late); continuous batching
    mixes it into A's decode step (A done at 4)."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 1.5], prompt_len=8, output_len=4)
    pricer = RecordingPricer()
    _, recs = run(path, pricer, policy="vanilla", scheduler=scheduler)
    a, b = _by_row(recs)[0], _by_row(recs)[1]
    assert a.first_token_s == 1.0 and b.admitted_s == 2.0 and b.first_token_s == 3.0
    if scheduler == "sglang":
        assert pricer.steps == [([(8, 0)], 0), ([(8, 0)], 0)]  # prefill batches, no decodes
        assert a.completed_s == 5.0 and b.completed_s == 6.0
    else:
        assert pricer.steps == [([(8, 0)], 0), ([(8, 0)], 1)]  # B's prefill beside A's decode
        assert a.completed_s == 4.0 and b.completed_s == 6.0


def test_sglang_chunks_a_long_prompt_across_prefill_batches_before_any_decode(tmp_path):
    """Two 6-token prompts and an 8-token chunk budget: A and the first 2 tokens of B, then
    B's last 4 tokens alone (the chunked request goes first); A decodes only after."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0], prompt_len=6, output_len=3)
    pricer = RecordingPricer()
    _, recs = run(
        path, pricer, policy="vanilla", scheduler="sglang", max_batched_tokens=8, max_running=8
    )
    assert pricer.steps[:2] == [([(6, 0), (2, 0)], 0), ([(4, 2)], 0)]
    a, b = _by_row(recs)[0], _by_row(recs)[1]
    assert a.first_token_s == 1.0 and b.first_token_s == 2.0
    # A's two decode steps come after B's second chunk: at 3 and 4 (B's at 3 and 4 too).
    assert a.completed_s == 4.0 and b.completed_s == 4.0


def _ratio_blocked(tmp_path, scheduler: str):
    """A (10 + 200 tokens) runs alone; B (10 + 200) arrives at 1.5. On a pool of 300
    tokens the new_token_ratio reservation refuses B at first (room 300 - 11 - 0.64 x 198
    < 211) and would let it in once the ratio has decayed (10 decay steps)."""
    model = get_model("tiny-transformer")
    path = single_turns(tmp_path / "w.parquet", [0.0, 1.5], prompt_len=10, output_len=200)
    ratio = {**DEFAULTS, "sglang_new_token_ratio_decay_steps": 10}
    _, recs = run(
        path,
        ConstantPricer(),
        model,
        policy="vanilla",
        preemption="retract",
        new_token_ratio=ratio,
        scheduler=scheduler,
        pool_bytes=300 * model.kv_bytes_per_token,
    )
    return _by_row(recs)


def test_sglang_batch_is_full_holds_the_queue_until_a_request_completes(tmp_path):
    recs = _ratio_blocked(tmp_path, "sglang")
    a, b = recs[0], recs[1]
    # batch_is_full: no new check until the running batch shrinks, at A's completion.
    assert a.completed_s == 200.0
    assert b.admitted_s == a.completed_s
    # Without the latch (the mixed scheduler re-checks every step) B joins mid-way.
    mixed = _ratio_blocked(tmp_path, "continuous")
    assert 2.0 < mixed[1].admitted_s < mixed[0].completed_s


def test_the_sglang_mode_picks_its_scheduler_and_enable_mixed_chunk_the_mixed_one():
    model = get_model("tiny-transformer")
    sglang = get_mode("sglang")
    assert sglang.settings(model, {})["scheduler"] == "sglang"
    assert sglang.settings(model, {"enable_mixed_chunk": "true"})["scheduler"] == "sglang-mixed"
    assert sglang.settings(model, {"max_prefill_tokens": "4096"})["scheduler_options"] == {
        "max_prefill_tokens": 4096
    }
    assert get_mode("vllm").settings(model, {})["scheduler"] == "vllm"
    assert get_mode("paper").settings(model, {})["scheduler"] == "continuous"
    assert SCHEDULERS["sglang"] is SGLangBatching
    # The paper's world keeps its summary: the default scheduler is left out of it.
    assert "scheduler" not in EngineConfig().to_dict()
    assert (
        EngineConfig(scheduling=SchedulerConfig(scheduler="sglang")).to_dict()["scheduler"]
        == "sglang"
    )


@pytest.mark.parametrize(
    ("gpu_bytes", "chunk"),
    [(24e9, 2048), (48e9, 4096), (80e9, 8192), (141e9, 8192), (180e9, 16384)],
)
def test_sglang_step_budget_follows_its_gpu_memory_classes(gpu_bytes, chunk):
    # server_args.py: chunked_prefill_size by GPU memory (MiB) thresholds 35/60/160 GiB.
    # tp_worker.py: max_running_requests at least the request pool's 2,048 slots
    # (mem_fraction_static where not given: tests/test_memory_rules.py)
    found = sglang_gpu_defaults(gpu_bytes, 1, {})
    assert found.pop("memory_utilization") < 0.9
    assert found == {"max_batched_tokens": chunk, "max_running": 2048}
    given = {"max_batched_tokens": 1024, "max_running": 64, "memory_utilization": 0.9}
    assert sglang_gpu_defaults(gpu_bytes, 1, given) == {}
    given = {"max_batched_tokens": 1024, "memory_utilization": 0.9}
    assert sglang_gpu_defaults(gpu_bytes, 1, given) == {"max_running": 2048}


@pytest.mark.parametrize(
    ("gpu", "gpu_bytes", "tokens", "seqs"),
    [
        ("h100", 80e9, 8192, 1024),  # 74.5 GiB >= 70 GiB, not an A100
        ("b200", 180e9, 8192, 1024),
        ("a100", 80e9, 2048, 256),  # an A100 keeps the small defaults (vLLM PR #17885)
        ("l40s", 48e9, 2048, 256),
        ("l4", 24e9, 2048, 256),
    ],
)
def test_vllm_batch_defaults_follow_its_device_classes(gpu, gpu_bytes, tokens, seqs):
    # vllm/engine/arg_utils.py get_batch_defaults (API server): 8,192 tokens and 1,024
    # sequences on 70 GiB or more but an A100, else 2,048 and 256.
    from twin.engine.modes_vllm import vllm_gpu_defaults

    # and its front end's tokeniser batch, whatever the GPU (VLLM_FRONTEND_BATCH)
    front = {"frontend_batch": 32}
    out = {"max_batched_tokens": tokens, "max_running": seqs, **front}
    assert vllm_gpu_defaults(gpu_bytes, 1, {}, gpu) == out
    assert vllm_gpu_defaults(gpu_bytes, 1, {"max_batched_tokens": 512}, gpu) == {
        "max_running": min(seqs, 512),
        **front,
    }
    given = {"max_batched_tokens": 1, "max_running": 1, "frontend_batch": 1}
    assert vllm_gpu_defaults(gpu_bytes, 1, given, gpu) == {}


def test_engine_batch_defaults_reach_the_run_config():
    """build_config applies each mode's defaults on the profile's GPU where not given:
    vLLM 1,024 sequences on an H100, SGLang 2,048, TensorRT-LLM its max_batch_size
    2,048; a given --max-running wins; the paper's world keeps 256."""
    from twin.engine.config_build import build_config

    h100 = load_profile("h100", "vllm")
    assert build_config(h100, engine="vllm").scheduling.max_running == 1024
    assert build_config(h100, engine="vllm", max_running=300).scheduling.max_running == 300
    assert (
        build_config(load_profile("h100", "sglang"), engine="sglang").scheduling.max_running == 2048
    )
    trt = build_config(load_profile("h100", "trtllm"), engine="trtllm")
    assert (trt.scheduling.max_running, trt.scheduling.max_batched_tokens) == (2048, 8192)
    assert build_config(h100, engine="paper").scheduling.max_running == 256
    # the twin's batch holds at most a token a sequence: a defaulted cap is clipped to
    # the step budget (a given one is checked, not clipped)
    sglang = load_profile("h100", "sglang")
    assert (
        build_config(sglang, engine="sglang", max_batched_tokens=1024).scheduling.max_running
        == 1024
    )
    assert (
        build_config(
            load_profile("h100", "trtllm"), engine="trtllm", max_batched_tokens=512
        ).scheduling.max_running
        == 512
    )


# ---------------------------------------------------------------- vLLM V1 preemption
def _seq(prompt: int, out: int, order: int):
    req = SimpleNamespace(
        prompt=np.zeros(prompt, np.int32), output=np.zeros(out, np.int32), decode_scale=1.0
    )
    seq = Seq(req, 0, 0.0, 0, sim.Environment())  # type: ignore[arg-type]
    seq.order = order
    return seq


def test_vllm_admits_no_one_in_the_step_that_preempted():
    """vLLM V1 Scheduler.schedule: `if not preempted_reqs:` guards the waiting loop, so the
    victim (now the queue's head) is not taken back until the next step."""
    preempted = []
    replica = SimpleNamespace(
        memory=None,  # never asked: nothing grows here
        preemption="recompute",
        schedule_policy="fcfs",
        new_token_ratio=None,
        scheduler_options={},
        fits=lambda seq: True,
        preempt=lambda seq, decoded, kept: preempted.append((seq, decoded, kept)),
    )
    sched = VLLMBatching(sim.Environment(), replica, ConstantPricer(), 64, 8)  # type: ignore[arg-type]
    running = _seq(8, 4, order=0)
    running.start_step, running.finish_step = 0, 3
    sched.decoding = [(3, 0, running)]
    sched.ctx_base = running.prompt_len
    sched._preempt_one()
    assert preempted and sched.waiting[0] is running
    assert not sched._can_admit()  # the step that preempted admits no one
    sched._complete_due()  # that step is over
    assert sched._can_admit()


def test_a_preempted_requests_full_blocks_stay_cached_for_its_next_admission(tmp_path):
    """vLLM frees a preempted request's blocks still hashed: 51 tokens (prompt and output so
    far) leave its 3 full 16-token blocks in the block pool."""
    model = get_model("tiny-transformer")
    cache = make_cache(get_policy("vllm+", block_size=16), model, 10**9)
    requests = cache.request_cache(None, "write_through")
    full = np.arange(100, dtype=np.int32)
    adm = requests.admit(full[:32], full)
    assert requests.insert_preempted(adm, 51) == 48
    requests.release(adm)
    assert cache.peek(full[:51]) == 48


def _preempting(tmp_path, cached: bool):
    model = get_model("tiny-transformer")
    rng = np.random.default_rng(0)
    rows = [
        WorkloadRow(i, 0, 0.0, None, rng.integers(0, 30000, 64, dtype=np.int32), False, None, o)
        for i, o in enumerate([95] * 5 + [200])
    ]
    path = write_rows(tmp_path / "w.parquet", rows)
    summary, recs = run(
        path,
        ConstantPricer(),
        model,
        policy="vllm+",
        policy_options={"block_size": 16},
        preemption="recompute",
        scheduler="vllm",
        scheduler_options={"cache_preempted": cached},
        pool_bytes=900 * model.kv_bytes_per_token,
    )
    return summary, recs


def test_cached_preemption_recomputes_less_than_dropping_the_victims_blocks(tmp_path):
    """Six 64-token prompts on a 900-token pool outgrow it; the victim comes back when the
    five 95-token outputs complete, and with its blocks cached (those its own allocation
    did not reclaim) it computes again less than its whole prompt and output so far.
    (Equal outputs no longer show it: the others' decodes now take the victim's cached
    blocks before anyone else is preempted, as vLLM's free queue gives them out.)"""
    dropped, recs_d = _preempting(tmp_path, cached=False)
    _, recs_k = _preempting(tmp_path, cached=True)
    for recs in (recs_d, recs_k):
        assert sorted(r.row for r in recs) == list(range(6))
    assert dropped["preemption"]["preemptions"] > 0
    assert sum(r.recomputed_tokens for r in recs_k) < sum(r.recomputed_tokens for r in recs_d)


# ---------------------------------------------------------------- host time per step
def test_the_host_time_is_added_once_per_step_with_its_part_per_sequence(tmp_path):
    """1 s of kernels per step, 0.5 s + 0.1 s per sequence of host time: a lone request's
    prefill step takes 1.6 s, and each of its 2 decode steps 1.6 s (done at 4.8 s)."""
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=8, output_len=3)
    for inner in (ConstantPricer(), LinearPricer(1.0, 0.0, 0.0, 0.0, affine=False)):
        _, recs = run(path, HostTimePricer(inner, 0.5, 0.1), policy="vanilla")
        assert recs[0].first_token_s == pytest.approx(1.6)
        assert recs[0].completed_s == pytest.approx(4.8)
    two = HostTimePricer(ConstantPricer(), 0.5, 0.1)
    assert two.step_time([(8, 0)], 3, 100) == pytest.approx(1.0 + 0.5 + 0.1 * 4)
    assert two.decode_affine(3) == (pytest.approx(1.0 + 0.5 + 0.3), 0.0)


def test_compiled_decode_ends_move_by_the_host_time_of_the_steps_before():
    fill = HostTimePricer(FillingPricer(), 0.25, 0.0).decode_ends(2, 0)
    assert fill is not None
    ends = np.zeros(5)
    fill(ends, 0, 3)
    fill(ends, 3, 2)
    assert list(ends) == [1.25, 2.5, 3.75, 5.0, 6.25]


def test_an_eager_prefill_step_adds_its_host_time_to_the_kernels(tmp_path):
    """1 s of kernels a step and 2.5 s of eager host time on a step that prefills: a lone
    request's first token comes at 3.5 s (host time in series with the kernels, as
    measured: docs/decisions.md) and its 2 decode steps (graph replays) take 1 s each
    (done at 5.5 s); a host time shorter than the kernels still adds."""
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=8, output_len=3)
    for inner in (ConstantPricer(), LinearPricer(1.0, 0.0, 0.0, 0.0, affine=False)):
        _, recs = run(path, EagerPrefillPricer(inner, 2.5), policy="vanilla")
        assert recs[0].first_token_s == pytest.approx(3.5)
        assert recs[0].completed_s == pytest.approx(5.5)
    _, low = run(path, EagerPrefillPricer(ConstantPricer(), 0.5), policy="vanilla")
    assert (low[0].first_token_s, low[0].completed_s) == (pytest.approx(1.5), pytest.approx(3.5))
    floored = EagerPrefillPricer(ConstantPricer(), 2.5)
    assert floored.step_time([(8, 0)], 3, 100) == 3.5  # a mixed step prefills too
    assert floored.step_time([], 3, 100) == 1.0
    assert floored.decode_affine(3) == (1.0, 0.0)
    assert list(floored.decode_run(2, 0, 3)) == [1.0, 1.0, 1.0]


def test_the_eager_prefill_floor_is_checked_and_left_out_of_the_summary_when_off():
    assert "eager_prefill_s" not in EngineConfig().to_dict()  # the paper's summary is unchanged
    assert (
        EngineConfig(host_time=HostTimeConfig(eager_prefill_s=0.2)).to_dict()["eager_prefill_s"]
        == 0.2
    )
    with pytest.raises(TwinError, match="--eager-prefill-s: must be >= 0"):
        EngineConfig(host_time=HostTimeConfig(eager_prefill_s=-0.1))
    with pytest.raises(TwinError, match="--eager-prefill-s: is not modelled with pipeline"):
        EngineConfig(
            cluster=ClusterConfig(tp=2, pp=2),
            host_time=HostTimeConfig(eager_prefill_s=0.2),
        )
    # attention DP takes it (the replica's step loop: twin.engine.dp_attention.DPReplica),
    # not vLLM's graph-size rule
    EngineConfig(
        cluster=ClusterConfig(tp=2, dp_attention=2), host_time=HostTimeConfig(eager_prefill_s=0.2)
    )
    with pytest.raises(TwinError, match="--eager-graph-tokens: is not modelled with attention"):
        EngineConfig(
            cluster=ClusterConfig(tp=2, dp_attention=2),
            host_time=HostTimeConfig(eager_prefill_s=0.2, eager_graph_tokens=512),
        )
    # nor the host time under the kernels: the ranks' step loop adds it in series
    with pytest.raises(TwinError, match="--eager-overlap: is not modelled with attention"):
        EngineConfig(
            cluster=ClusterConfig(tp=2, dp_attention=2),
            host_time=HostTimeConfig(eager_prefill_s=0.2, eager_overlap=True),
        )


# ---------------------------------------------------------------- TensorRT-LLM
def test_trtllm_batches_whole_contexts_and_leaves_a_context_that_does_not_fit(tmp_path):
    """An 8-token budget: A (6 tokens) runs; B (6) does not fit the 2 left and waits for the
    next step (continuous batching would chunk 2 of its tokens into the first step)."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0], prompt_len=6, output_len=3)
    pricer = RecordingPricer()
    _, recs = run(
        path, pricer, policy="vanilla", scheduler="trtllm", max_batched_tokens=8, max_running=8
    )
    assert pricer.steps[:2] == [([(6, 0)], 0), ([(6, 0)], 1)]  # B whole, beside A's decode
    a, b = _by_row(recs)[0], _by_row(recs)[1]
    assert a.first_token_s == 1.0 and b.first_token_s == 2.0


@pytest.mark.parametrize(
    ("iters", "ratio", "budget", "first"),
    [
        (0, 0.0, 64, 3.0),  # off (TensorRT-LLM's default): B runs beside A's decode at t=2
        (3, 0.9, 64, 6.0),  # held 3 iterations (9 tokens < 57.6): B's context runs at t=5
        (3, 0.9, 10, 3.0),  # 9 tokens reach 0.9 x 10: no hold
        (0, 0.5, 64, 3.0),  # a timeout of 0 ends every hold at once (count >= 0)
    ],
)
def test_trtllm_batch_waiting_holds_a_context_while_a_generation_runs(
    tmp_path, iters, ratio, budget, first
):
    """TensorRT-LLM's batch waiting (``PyExecutor._waiting_requests``): A (8 tokens)
    prefills alone at t=0 (no generation request: no hold); B (8 tokens) arrives at 1.5
    and, while A decodes (1 token), is held until ``iters`` iterations passed or the
    scheduled tokens (9) reach ``ratio x max_num_tokens``."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 1.5], prompt_len=8, output_len=20)
    pricer = RecordingPricer()
    options = {"batch_wait_timeout_iters": iters, "batch_wait_max_tokens_ratio": ratio}
    _, recs = run(
        path,
        pricer,
        policy="vanilla",
        scheduler="trtllm",
        max_batched_tokens=budget,
        max_running=8,
        scheduler_options=options,
    )
    a, b = _by_row(recs)[0], _by_row(recs)[1]
    assert a.first_token_s == 1.0
    assert b.first_token_s == first
    # B's context runs whole beside A's decode once let through (the held iterations
    # are A's decode steps, priced as decode runs)
    assert pricer.steps[:2] == [([(8, 0)], 0), ([(8, 0)], 1)]
    assert a.completed_s == 20.0  # A decodes every step: the hold does not slow it


def test_trtllm_batch_waiting_flags():
    model = get_model("tiny-transformer")
    settings = get_mode("trtllm").settings(
        model, {"batch_wait_timeout_iters": "20", "batch_wait_max_tokens_ratio": "0.9"}
    )
    assert settings["scheduler_options"] == {
        "batch_wait_timeout_iters": 20,
        "batch_wait_max_tokens_ratio": 0.9,
    }
    with pytest.raises(TwinError, match=r"batch_wait_max_tokens_ratio=1\.5: must be in"):
        get_mode("trtllm").settings(model, {"batch_wait_max_tokens_ratio": "1.5"})
    with pytest.raises(TwinError, match="batch_wait_timeout_iters=-1: must be at least 0"):
        get_mode("trtllm").settings(model, {"batch_wait_timeout_iters": "-1"})


def _recorded_run(path, scheduler, options):
    """``scheduler``'s batching with ``options`` at a 64-token budget, on a constant-price
    recording pricer: (the pricer, the records)."""
    pricer = RecordingPricer()
    _, recs = run(
        path,
        pricer,
        policy="vanilla",
        scheduler=scheduler,
        max_batched_tokens=64,
        max_running=8,
        scheduler_options=options,
    )
    return pricer, recs


def _trtllm_run(path, overlap):
    """TensorRT-LLM's batching, with or without the overlap scheduler."""
    return _recorded_run(path, "trtllm", {"overlap_scheduler": overlap})


@pytest.mark.parametrize(("lag", "first"), [(False, 3.0), (True, 4.0)])
@pytest.mark.parametrize(
    ("engine", "flag"), [("trtllm", "overlap_scheduler"), ("vllm", "async_scheduling")]
)
def test_an_overlapped_scheduler_takes_an_arrival_two_steps_on(tmp_path, engine, flag, lag, first):
    """TensorRT-LLM's overlap scheduler (``PyExecutor._executor_loop_overlap``: step n+1's
    batch is fixed when step n starts) and vLLM's asynchronous scheduling (0.19.0
    ``EngineCore.step_with_batch_queue``: step n+1 is scheduled before step n's result is
    awaited), one implementation (``ContinuousBatching``): A (8 tokens) arrives at an idle
    server at 0 and prefills at once (first token 1.0); B arrives at 1.5, while step 2
    (1-2) runs, so step 3 (2-3) was already formed without it and B prefills in step 4
    (3-4), beside A's decode; without the lag it prefills in step 3. A decodes every step
    either way."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 1.5], prompt_len=8, output_len=20)
    pricer, recs = _recorded_run(path, engine, {flag: lag})
    a, b = _by_row(recs)[0], _by_row(recs)[1]
    assert a.first_token_s == 1.0
    assert b.first_token_s == first
    assert pricer.steps[:2] == [([(8, 0)], 0), ([(8, 0)], 1)]  # B whole, beside A's decode
    assert a.completed_s == 20.0


def test_trtllm_overlap_scheduler_takes_an_arrival_at_a_prefill_step_two_steps_on(tmp_path):
    """B arrives at 0.5 while A's prefill step (0-1) runs: step 2 (1-2) was formed
    without it (A's first decode), so B prefills in step 3 (2-3); C, arriving at 0.6 in
    the same step, waits as long and runs beside B (one budget of 64 tokens)."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.5, 0.6], prompt_len=8, output_len=20)
    pricer, recs = _trtllm_run(path, overlap=True)
    by = _by_row(recs)
    assert by[0].first_token_s == 1.0
    assert by[1].first_token_s == by[2].first_token_s == 3.0
    assert pricer.steps[:2] == [([(8, 0)], 0), ([(8, 0), (8, 0)], 1)]


def test_trtllm_overlap_scheduler_flag():
    model = get_model("tiny-transformer")
    settings = get_mode("trtllm").settings(model, {"overlap_scheduler": "true"})
    assert settings["scheduler_options"] == {"overlap_scheduler": True}
    assert "scheduler_options" not in get_mode("trtllm").settings(model, {})  # off by default
    with pytest.raises(TwinError, match="overlap_scheduler"):
        get_mode("trtllm").settings(model, {"overlap_scheduler": "maybe"})


def test_the_trtllm_mode_guarantees_no_eviction():
    settings = get_mode("trtllm").settings(get_model("tiny-transformer"), {})
    assert settings["scheduler"] == "trtllm"
    held = NewTokenRatio.from_options(settings["new_token_ratio"])
    assert held.ratio == held.min == 1.0 and held.decay == 0.0  # every remaining output kept
    assert held.clip >= 1 << 30


# ---------------------------------------------------------------- the serving front end
def test_the_front_end_takes_requests_one_at_a_time_and_ttft_counts_it(tmp_path):
    """Two requests sent at 0 through a 0.25 s front end reach the engine at 0.25 and 0.5:
    A's prefill step runs 0.25-1.25, B's the next one (1.25-2.25); both were sent at 0."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0], prompt_len=8, output_len=2)
    _, recs = run(path, ConstantPricer(), policy="vanilla", frontend_s=0.25)
    a, b = _by_row(recs)[0], _by_row(recs)[1]
    assert a.arrival_s == b.arrival_s == 0.0
    assert a.admitted_s == 0.25 and a.first_token_s == 1.25
    assert b.admitted_s == 1.25 and b.first_token_s == 2.25
    assert "frontend_s" not in EngineConfig().to_dict()  # the paper's summary is unchanged


def test_engine_modes_get_their_fitted_engine_times_on_the_gpu_they_were_fitted_on():
    assert engine_time_defaults("vllm", "h100")["seq_host_s"] > 0
    assert engine_time_defaults("vllm", "b200") == {
        "frontend_s": 0.03
    }  # its front end only (passes of 32)
    assert engine_time_defaults("vllm", "b300") == {"frontend_s": 0.015}
    assert engine_time_defaults("vllm", "gb200") == {}  # none fitted
    assert engine_time_defaults("trtllm", "h100")["frontend_s"] == 0.02  # refitted, session 23
    assert engine_time_defaults("paper", "h100") == {}
    prof = resolve_profile("h100", None, "vllm")
    fitted = build_config(prof, cache_gb="auto", engine="vllm")
    assert fitted.host_time.step_host_s == engine_time_defaults("vllm", "h100")["step_host_s"]
    given = build_config(prof, cache_gb="auto", engine="vllm", step_host_s=0.0)
    assert given.host_time.step_host_s == 0.0  # what is given wins
    assert build_config(prof, cache_gb="auto").host_time.step_host_s == 0.0  # the paper's world


@pytest.mark.parametrize("scheduler", ["sglang", "continuous"])
@pytest.mark.parametrize("affine", [True, False])
def test_sglang_polls_for_new_requests_every_n_decode_iterations(tmp_path, scheduler, affine):
    """SGLang's --scheduler-recv-interval 10: A prefills in [0, 1] and decodes one step a
    second; the loop polls at the first boundary after the prefill (t=1) and every 10
    decode steps after it (t=11, 21, ...). B arrives at t=3.5 and is first seen at t=11
    (with an interval of 1: at t=4); C arrives at t=13.5, after B's prefill moved the
    poll to the boundary after it, t=12: C waits for t=22. D arrives at t=3.5 beside a
    request that completes at t=5, before the poll: the server, then idle, polls at once."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 3.5, 13.5], prompt_len=8, output_len=40)
    pricer = LinearPricer(base=1.0, per_token=0.0, per_key=0.0, per_seq=0.0, affine=affine)
    _, plain = run(path, pricer, policy="vanilla", scheduler=scheduler)
    assert _by_row(plain)[1].admitted_s == 4.0
    opts = {"scheduler_recv_interval": 10}
    _, recs = run(path, pricer, policy="vanilla", scheduler=scheduler, scheduler_options=opts)
    b, c = _by_row(recs)[1], _by_row(recs)[2]
    assert b.admitted_s == 11.0 and b.first_token_s == 12.0
    # B's prefill at [11, 12] polls at 12; C (t=13.5) waits for 12 + 10 = 22
    assert c.admitted_s == 22.0
    short = single_turns(tmp_path / "s.parquet", [0.0, 3.5], prompt_len=8, output_len=5)
    _, recs = run(short, pricer, policy="vanilla", scheduler=scheduler, scheduler_options=opts)
    assert _by_row(recs)[0].completed_s == 5.0 and _by_row(recs)[1].admitted_s == 5.0


class SpeculatingPricer(LinearPricer):
    """A LinearPricer whose token steps are ``1 / tau`` of an engine iteration, as
    ``twin.engine.speculative_pricing.SpeculativePricer``'s."""

    def __init__(self, tau: float, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.tau = tau

    def tokens_per_iteration(self) -> float:
        return self.tau


@pytest.mark.parametrize("affine", [True, False])
def test_sglang_polls_every_n_iterations_of_a_speculative_decode(tmp_path, affine):
    """SGLang counts engine iterations toward --scheduler-recv-interval, and a speculative
    iteration counts once (0.5.9 scheduler_recv_skipper.py; eagle_worker.py leaves the
    batch in DECODE): at an acceptance length of 2 a token step is half an iteration, so an
    interval of 5 polls every 10 token steps, as the plain loop's 10 does above."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 3.5, 13.5], prompt_len=8, output_len=40)
    pricer = SpeculatingPricer(2.0, base=1.0, per_token=0.0, per_key=0.0, per_seq=0.0)
    pricer.affine = affine
    opts = {"scheduler_recv_interval": 5}
    _, recs = run(path, pricer, policy="vanilla", scheduler="sglang", scheduler_options=opts)
    b, c = _by_row(recs)[1], _by_row(recs)[2]
    assert (b.admitted_s, c.admitted_s) == (11.0, 22.0)
    plain = LinearPricer(base=1.0, per_token=0.0, per_key=0.0, per_seq=0.0, affine=affine)
    _, recs = run(path, plain, policy="vanilla", scheduler="sglang", scheduler_options=opts)
    assert _by_row(recs)[1].admitted_s == 6.0  # every 5 token steps without speculation


@pytest.mark.parametrize("scheduler", ["sglang-mixed", "sglang", "continuous"])
def test_sglang_mixed_chunk_rides_the_decodes_in_the_prefill_batch_off_its_budgets(
    tmp_path, scheduler
):
    """A and B (8 + 4 tokens) start at 0; C, D and E (8 + 4) arrive at 1.5. SGLang
    0.5.6.post2 with --enable-mixed-chunk (PrefillAdder(mixed_with_decode_tokens=2)):
    max_prefill_tokens 20 - 2 running = 18 takes C and D, E waits (AddReqResult.OTHER),
    and A and B decode in that batch. Without mixing the batch is C and D alone (20 - 0
    leaves 4 < 8 for E), then E alone, and A and B sit both out; the generic mixed step
    takes all three."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0, 1.5, 1.5, 1.5], 8, 4)
    pricer = RecordingPricer()
    options = {"max_prefill_tokens": 20}
    _, recs = run(path, pricer, policy="vanilla", scheduler=scheduler, scheduler_options=options)
    by = _by_row(recs)
    assert pricer.steps[0] == ([(8, 0), (8, 0)], 0)
    if scheduler == "sglang-mixed":
        assert pricer.steps[1] == ([(8, 0), (8, 0)], 2)  # C, D and the two decodes
        assert pricer.steps[2] == ([(8, 0)], 4)  # E with C and D's decodes too (A, B done)
        assert by[0].completed_s == 4.0  # A's three decodes at 2, 3, 4: none sat out
        assert by[4].first_token_s == 4.0
    elif scheduler == "sglang":
        assert pricer.steps[1:3] == [([(8, 0), (8, 0)], 0), ([(8, 0)], 0)]  # C, D; then E
        assert by[0].completed_s == 6.0  # A sat both prefill batches out
    else:
        assert pricer.steps[1] == ([(8, 0), (8, 0), (8, 0)], 2)  # no input budget
        assert by[4].first_token_s == 3.0


def test_sglang_mixed_chunk_admits_one_request_when_the_decodes_spend_the_input_budget(tmp_path):
    """max_prefill_tokens 2: SGLang 0.5.6.post2's PrefillAdder admits the first request of
    a batch whatever ``rem_input_tokens`` is left (``add_one_req``'s quick check needs a
    non-empty ``can_run_list``), then stops (``budget_state``). A (8 + 4) prefills alone
    at 0; B joins at 1 beside A's decode (2 - 1 left); at 2 the two decodes leave 0, and C
    still prefills, alone (D and E wait)."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0, 1.5, 1.5, 1.5], 8, 4)
    pricer = RecordingPricer()
    options = {"max_prefill_tokens": 2}
    run(path, pricer, policy="vanilla", scheduler="sglang-mixed", scheduler_options=options)
    assert pricer.steps[:3] == [([(8, 0)], 0), ([(8, 0)], 1), ([(8, 0)], 2)]


def test_the_lag_is_each_engines_own_option(tmp_path):
    """The lag follows the engine's own flag only: vLLM's scheduler ignores
    TensorRT-LLM's ``overlap_scheduler``, and so does plain continuous batching."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 1.5], prompt_len=8, output_len=20)
    for scheduler in ("vllm", "continuous"):
        _, recs = _recorded_run(path, scheduler, {"overlap_scheduler": True})
        assert _by_row(recs)[1].first_token_s == 3.0


def test_the_response_path_hands_out_each_streamed_token_in_turn(tmp_path):
    """``stream_token_s`` 0.25 s a token: A and B prefill together in [0, 1], their two
    first tokens are handed out at 1.5; the two decode steps [1, 3] give four more, handed
    out from 1.5 on but the last step's two not before 3: 3.5. At 0.75 s a token the path
    falls behind (2.5, then 2.5 + 4 x 0.75 = 5.5): the backlog, not the GPU, sets both."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0], prompt_len=8, output_len=3)
    for token_s, first, done in ((0.0, 1.0, 3.0), (0.25, 1.5, 3.5), (0.75, 2.5, 5.5)):
        _, recs = run(path, ConstantPricer(), policy="vanilla", stream_token_s=token_s)
        for rec in recs:
            assert (rec.first_token_s, rec.completed_s) == (first, done)
    assert "stream_token_s" not in EngineConfig().to_dict()  # the paper's summary is unchanged


def test_a_closed_loop_client_sends_its_next_request_when_the_last_token_reaches_it(tmp_path):
    """One client, two requests of 3 tokens, 0.25 s a token: the first's last token leaves
    the GPU at 3 and reaches the client at 3.25, which sends the second then."""
    path = single_turns(tmp_path / "w.parquet", [None, None], prompt_len=8, output_len=3)
    _, recs = run(path, ConstantPricer(), policy="vanilla", concurrency=1, stream_token_s=0.25)
    a, b = recs
    assert (a.first_token_s, a.completed_s) == (a.arrival_s + 1.25, a.arrival_s + 3.25)
    assert b.arrival_s == a.completed_s
    assert b.first_token_s == b.arrival_s + 1.25


def test_the_response_path_is_refused_where_no_single_loop_streams():
    with pytest.raises(TwinError, match="stream-token-s"):
        EngineConfig.of(stream_token_s=1e-4, dp_attention=2, tp=2)
