"""Attention data parallelism (``--dp-attention``, ``twin.engine.dp_attention``): the
synchronised step's price, the ranks' lockstep, dealing, the KV budget per rank, and
the refusals."""

from __future__ import annotations

import pytest
from test_engine_helpers import run, single_turns

from twin.cli.main import run as twin
from twin.costmodel import CostModel
from twin.costmodel.breakdown import StepCost
from twin.costmodel.profile_store import resolve_profile
from twin.engine import EngineConfig, memory_budget
from twin.engine.adp_balance import ADPBalance, adp_balance
from twin.engine.config import ClusterConfig, MemoryConfig, SchedulerConfig
from twin.engine.dp_attention import DPCluster, DPReplica, rank_config
from twin.engine.dp_dealing import RoundRobin, TRTLLMBalanced, VLLMLeastLoaded
from twin.engine.dp_pricing import IDLE, DPStepPricer, dp_pricer
from twin.engine.modes import get_mode
from twin.engine.run import build_run
from twin.errors import TwinError
from twin.parallel import Layout, weight_bytes_per_gpu
from twin.presets import get_model
from twin.workloads.reader import Workload

A, F, R = 1e-3, 1e-4, 1e-5  # attention s/token, FFN s/token, all-reduce s/token


class _Costs:
    """A cost model whose step is ``A`` a token of attention and ``F`` a token of MoE
    (plus an all-reduce the DP price must drop), and whose all-reduce is ``R`` a token."""

    def step_spread_cost(self, prefills, batch, context):
        tokens = sum(c for c, _ in prefills) + batch
        cost = StepCost()
        cost.add("attention", "attention", A * tokens)
        cost.add("head", "gemm", 0.0)
        cost.add("moe", "gemm", F * tokens)
        cost.add("moe", "allreduce", 123.0)  # replaced by the gather/scatter
        return cost

    def step_spread(self, prefills, batch, context):
        return self.step_spread_cost(prefills, batch, context).total_s

    def allreduce_time(self, tokens):
        return R * tokens

    def checkpoint_copy_s(self, n=1):  # CostModel's name (the rank pricer asks for it)
        return 0.0


def _pricer(dp=2, layers=1, step_host_s=0.0, seq_host_s=0.0):
    return DPStepPricer(_Costs(), _Costs(), dp, layers, step_host_s, seq_host_s)


def test_a_step_is_the_slowest_attention_plus_the_ffn_on_every_rank_s_tokens():
    p = _pricer(dp=2, layers=3)
    # Rank 0 prefills 16 tokens, rank 1 decodes 4 sequences: a prefill in the step, so
    # SGLang's SUM_LEN gather: two all-reduces of all 20 tokens a layer.
    steps = [([(16, 0)], 0, 0), ((), 4, 400)]
    assert p.sync_time(steps) == pytest.approx(16 * A + 20 * F + 3 * 2 * 20 * R)
    # Decodes only, 8 and 2 sequences: 2 x 10 > 2 x 8, so padding to the longest
    # (MAX_LEN): one all-reduce's bytes of 2 x 8 rows a layer.
    assert p.sync_time([((), 8, 0), ((), 2, 0)]) == pytest.approx(8 * A + 10 * F + 3 * 16 * R)
    # 8 and 0: 2 x 8 = 2 x 8 is not more, so SUM_LEN again.
    assert p.sync_time([((), 8, 0), IDLE]) == pytest.approx(8 * A + 8 * F + 3 * 2 * 8 * R)
    assert p.sync_time([IDLE, IDLE]) == 0.0
    # Alone, a rank's step is the synchronised step with the others idle.
    assert p.step_time([(16, 0)], 0, 0) == p.sync_time([([(16, 0)], 0, 0), IDLE])


def test_host_time_is_the_busiest_rank_s():
    p = _pricer(step_host_s=0.01, seq_host_s=0.001)
    kernels = _pricer().sync_time([([(4, 0), (4, 0)], 3, 0), ((), 1, 0)])
    got = p.sync_time([([(4, 0), (4, 0)], 3, 0), ((), 1, 0)])
    assert got == pytest.approx(kernels + 0.01 + 5 * 0.001)


def test_ranks_step_in_lockstep(tmp_path):
    """Two requests dealt round-robin to two ranks: the short prompt's rank waits for
    the long one's, and both decode in the same steps."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0], prompt_len=4, output_len=3)
    wl = Workload.open(path)
    _, records = run(path, _pricer(), "llama-3-8b", tp=2, dp_attention=2)
    assert len(records) == 2 == wl.num_rows
    prefill = 4 * A + 8 * F + 2 * 8 * R  # both prefill 4 tokens (SUM_LEN)
    decode = 1 * A + 2 * F + 2 * R  # both decode one: 2 x 2 > 1 x 2, MAX_LEN
    for r in records:
        assert r.ttft_s == pytest.approx(prefill)
        assert r.e2e_s == pytest.approx(prefill + 2 * decode)


def test_one_rank_alone_pays_only_its_own_tokens(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=6, output_len=2)
    _, records = run(path, _pricer(), "llama-3-8b", tp=2, dp_attention=2)
    (r,) = records
    assert r.ttft_s == pytest.approx(6 * A + 6 * F + 2 * 6 * R)
    assert r.e2e_s == pytest.approx(r.ttft_s + A + F + 2 * R)


class _Load:
    def __init__(self, waiting, running, tokens):
        self.waiting, self.running, self.tokens = waiting, running, tokens


def test_dealing_rules():
    loads = [_Load(0, 5, 500), _Load(1, 0, 10), _Load(0, 2, 900)]
    rr = RoundRobin()
    assert [rr.pick(loads) for _ in range(4)] == [0, 1, 2, 0]
    # vLLM: 4 x waiting + running = 5, 4, 2; ties to the lowest rank.
    assert VLLMLeastLoaded().pick(loads) == 2
    assert VLLMLeastLoaded().pick([_Load(0, 1, 0), _Load(0, 1, 0)]) == 0
    # TensorRT-LLM: active 5, 1, 2; expected max(ceil(9 / 3), 5) = 5: ranks 1 and 2,
    # the fewest active tokens first.
    assert TRTLLMBalanced().pick(loads) == 1
    assert TRTLLMBalanced().pick([_Load(0, 3, 10), _Load(0, 2, 90), _Load(0, 2, 50)]) == 2


def test_the_kv_budget_is_shared_evenly_by_the_ranks(tmp_path):
    model = get_model("llama-3-8b")
    gpu = 80e9
    config = EngineConfig(
        cluster=ClusterConfig(tp=4, dp_attention=2),
        memory=MemoryConfig(gpu_memory_bytes=gpu, shared_pool=True),
    )
    weights = 4 * weight_bytes_per_gpu(model, Layout(4, 1, 2))
    # 8 KV heads over an attention TP of 2: split, so each token's KV bytes add up to
    # kv_bytes_per_token over its rank's GPUs and the replica's bytes serve as they are.
    assert memory_budget(model, config) == pytest.approx(4 * gpu * 0.9 - weights)
    assert weights > model.weight_bytes  # attention weights held by both ranks
    path = single_turns(tmp_path / "w.parquet", [0.0])
    cluster = DPCluster(model, _pricer(), config, Workload.open(path))
    ranks = cluster.replicas[0].ranks
    assert len(ranks) == 2
    assert all(r.memory.budget == cluster.budget / 2 for r in ranks)
    # MLA's latent is whole on every GPU of a rank: the replica's budget counts a
    # token at tp / dp times the latent (twin.parallel.kv_bytes_per_token_per_gpu).
    ds = get_model("deepseek-v3")
    cfg = EngineConfig(
        cluster=ClusterConfig(tp=8, ep=8, dp_attention=4),
        memory=MemoryConfig(gpu_memory_bytes=141e9, shared_pool=True),
    )
    free = 8 * 141e9 * 0.9 - 8 * weight_bytes_per_gpu(ds, Layout(8, 8, 4))
    # 70,272 B of latent a token on each GPU (61 layers x 576 x 2 B), on 2 GPUs a rank.
    scale = ds.kv_bytes_per_token / (2 * 70_272)
    assert memory_budget(ds, cfg) == pytest.approx(free * scale)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tp": 8, "dp_attention": 3}, "--dp-attention 3 must divide --tp 8"),
        ({"tp": 2, "dp_attention": 0}, "--dp-attention must be a positive integer"),
        (  # each pool's attention DP is its own (twin.engine.disagg); it must divide its tp
            {
                "tp": 2,
                "dp_attention": 2,
                "prefill_workers": 1,
                "decode_workers": 1,
                "replicas": 2,
                "decode_dp_attention": 4,
            },
            "--decode-dp-attention: must divide the decode pool's tp 2 .got 4.",
        ),
        (
            {"tp": 2, "dp_attention": 2, "host_cache_bytes": 10**9},
            "--dp-attention 2: not modelled with a host cache tier",
        ),
    ],
)
def test_layouts_and_modes_it_cannot_take_are_refused(fields, message):
    with pytest.raises(TwinError, match=message):
        EngineConfig.of(**fields)


def test_without_dp_attention_the_config_is_unchanged():
    assert "dp_attention" not in EngineConfig().to_dict()
    assert EngineConfig(cluster=ClusterConfig(tp=4, dp_attention=2)).to_dict()["dp_attention"] == 2


def test_cli_refuses_a_layout_in_one_line(tmp_path, capsys):
    for argv in (
        ["simulate", "-m", "llama-3-8b", "--tp", "4", "--dp-attention", "3"],
        ["cost", "-m", "llama-3-8b", "--gpu", "h100", "--tp", "4", "--dp-attention", "3"],
    ):
        rc = twin([*argv, *(["--out", str(tmp_path / "sim")] if argv[0] == "simulate" else [])])
        _, err = capsys.readouterr()
        assert (
            rc == 2
            and err.strip() == "error: --dp-attention 3 must divide --tp 4 (the replica's GPUs)"
        )
    assert not (tmp_path / "sim").exists()


def test_cost_shows_the_synchronised_step_s_parts(capsys):
    import json

    argv = ["cost", "-m", "llama-3-8b", "--gpu", "h100", "--tp", "2", "--dp-attention", "2"]
    assert twin([*argv, "--lengths", "1024", "--batches", "1,16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["tp"], data["dp_attention"]) == (2, 2)
    for row in data["prefill"] + data["decode"]:
        parts = row["attention_s"] + row["ffn_s"] + row["gather_scatter_s"]
        assert (
            row["total_s"] == pytest.approx(parts)
            and min(row["attention_s"], row["ffn_s"], row["gather_scatter_s"]) > 0
        )
    small, big = data["decode"]
    assert big["tokens_per_s"] > small["tokens_per_s"]


def test_a_hybrid_rank_prices_its_state_checkpoint_copy() -> None:
    """A hybrid model's ranks copy recurrent-state checkpoints (vLLM's one state slot): the
    synchronised pricer prices one as the plain pricer does, on the rank's attention-TP
    GPUs (it asked the cost model for a method it does not have, and such a run failed)."""
    model = get_model("qwen3.5-35b-a3b")
    profile = resolve_profile("h200", None, "vllm")
    copy = dp_pricer(model, profile, 2, 1, 2, 0.0, 0.0).checkpoint_copy_time()
    assert copy == CostModel(model, profile, 1).checkpoint_copy_s(1) > 0


def test_a_rank_drops_trtllm_batch_waiting():
    """TensorRT-LLM skips its batch waiting under attention DP (``PyExecutor._schedule``:
    ``should_check_waiting = not cfg.enable_attention_dp and ...``): a rank's config
    drops those options and keeps the rest; a config without them is the same object."""
    wait = {
        "batch_wait_timeout_iters": 20,
        "batch_wait_max_tokens_ratio": 0.9,
        "overlap_scheduler": True,  # the overlap's admission lag: not modelled on a rank
        "async_scheduling": True,  # vLLM's lag likewise (the pricer keeps its overlap)
    }
    config = EngineConfig(scheduling=SchedulerConfig(scheduler_options={**wait, "x": 1}))
    assert rank_config(config).scheduling.scheduler_options == {"x": 1}
    assert config.scheduling.scheduler_options == {**wait, "x": 1}  # not changed in place
    plain = EngineConfig(scheduling=SchedulerConfig(scheduler_options={"x": 1}))
    assert rank_config(plain) is plain


def test_the_trtllm_balance_holds_contexts_until_every_rank_has_one_or_the_timeout():
    """``PyExecutor._balance_adp_requests``: contexts run when every rank has one and
    room, or when some rank has no generation request; else the hold count goes up
    (also with no context anywhere: a clock) and releases them at ``timeout_iters``."""
    b = ADPBalance(timeout_iters=3, batching_wait_iters=0, max_batch_size=4, iteration=1.0)
    assert b.contexts_run([True, True], [2, 2])  # every rank has one
    assert b.contexts_run([True, False], [0, 2])  # a rank runs no generation request
    assert not b.contexts_run([False, False], [2, 2])  # the clock runs: 1
    assert not b.contexts_run([True, False], [2, 2])  # 2
    assert b.contexts_run([True, False], [2, 2])  # 3: the timeout, reset
    assert not b.contexts_run([True, True], [4, 2])  # a full rank: held (1)
    # batching_wait_iters: held that many iterations once every rank has one
    w = ADPBalance(timeout_iters=50, batching_wait_iters=2, max_batch_size=4, iteration=1.0)
    assert [w.contexts_run([True, True], [1, 1]) for _ in range(4)] == [False, False, True, False]
    # a speculative token step is 1 / tau of an iteration: 3 iterations are 6 steps at tau 2
    s = ADPBalance(timeout_iters=3, batching_wait_iters=0, max_batch_size=4, iteration=0.5)
    assert [s.contexts_run([True, False], [1, 1]) for _ in range(6)] == [False] * 5 + [True]


def test_a_late_arrival_waits_for_the_balance_s_timeout(tmp_path):
    """Two ranks decode one request each; a third request arrives during the first step
    and lands on rank 0 alone: with the balance (timeout 5) it is held four decode steps
    (the count runs 1..4) and prefilled in the fifth; without it, in the next step."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0, 0.002], prompt_len=4, output_len=20)
    prefill = 4 * A + 8 * F + 2 * 8 * R
    decode = A + 2 * F + 2 * R
    mixed = 5 * A + 6 * F + 2 * 6 * R  # rank 0 prefills 4 and decodes 1, rank 1 decodes 1
    options = {
        "attention_dp_balance": True,
        "attention_dp_timeout_iters": 5,
        "attention_dp_batching_wait_iters": 0,
    }
    ttft = {}
    for held, opts in ((False, {}), (True, options)):
        _, records = run(
            path, _pricer(), "llama-3-8b", tp=2, dp_attention=2, scheduler_options=opts
        )
        ttft[held] = next(r.ttft_s for r in records if r.session_id == 2)
    assert ttft[False] == pytest.approx(prefill + mixed - 0.002)
    assert ttft[True] == pytest.approx(prefill + 4 * decode + mixed - 0.002)


def test_a_step_where_any_rank_prefills_pays_the_eager_host_time_once(tmp_path):
    """TensorRT-LLM replays a CUDA graph under attention DP only when every rank's batch
    is generation-only (``cuda_graph_runner.py`` ``maybe_get_cuda_graph``): a step where
    one rank prefills runs eagerly on all of them, and the replica pays
    ``eager_prefill_s`` once (the ranks issue their kernels at once); decode steps do
    not pay it."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0, 0.002], prompt_len=4, output_len=20)
    prefill = 4 * A + 8 * F + 2 * 8 * R
    mixed = 5 * A + 6 * F + 2 * 6 * R  # rank 0 prefills 4 and decodes 1, rank 1 decodes 1
    eager = 0.05
    records = {}
    for e in (0.0, eager):
        _, got = run(path, _pricer(), "llama-3-8b", tp=2, dp_attention=2, eager_prefill_s=e)
        records[e] = {r.session_id: r for r in got}
    assert records[0.0][2].ttft_s == pytest.approx(prefill + mixed - 0.002)
    assert records[eager][2].ttft_s == pytest.approx(prefill + mixed + 2 * eager - 0.002)
    assert records[eager][0].ttft_s == pytest.approx(prefill + eager)
    # the first request's later tokens: one mixed step (eager) among decode steps
    late = records[eager][0].tpot_s - records[0.0][0].tpot_s
    assert late == pytest.approx(eager / 19)


def test_a_built_run_leaves_the_eager_host_time_to_the_ranks_step_loop(tmp_path):
    """``build_run`` under attention DP does not wrap the synchronised pricer in the eager
    floor (``run_pricing.run_pricer``; it would no longer price synchronised steps): the replica's
    loop pays it (``DPReplica.eager_s``), in a disaggregated pool's ranks too, where it
    moves a request as much as it does without attention DP."""
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=64, output_len=4)
    disagg = {"prefill_workers": 1, "decode_workers": 1, "replicas": 2}

    def moved(dp: int, **pools: int) -> tuple[float, float]:
        got = {}
        for e in (0.0, 0.05):
            built = build_run(
                path, model="gpt-oss-20b", gpu="h100", engine="trtllm", tp=2,
                dp_attention=dp, eager_prefill_s=e, **pools,
            )  # fmt: skip
            records: list = []
            built.simulate(on_record=records.append)
            got[e] = (records[0].ttft_s, records[0].e2e_s)
        return got[0.05][0] - got[0.0][0], got[0.05][1] - got[0.0][1]

    assert moved(2) == pytest.approx((0.05, 0.05))  # the one prefilling step
    assert moved(2, **disagg) == pytest.approx(moved(1, **disagg))
    assert moved(2, **disagg)[0] == pytest.approx(0.05)


def test_the_balance_ticks_once_an_executor_iteration():
    """TensorRT-LLM calls the balance once an iteration, after its scheduler's
    preemptions (``PyExecutor._schedule``): the loop's re-plan after a rank preempted all
    it ran takes its pass's tick back; a memory wait's tick (a waiting rank with no
    generation request) leaves the hold count 0 and the batching count as they would be
    after any number of the executor's spinning iterations."""
    b = ADPBalance(timeout_iters=5, batching_wait_iters=3, max_batch_size=4, iteration=1.0)
    assert not b.contexts_run([True, True], [1, 1])  # batching wait: 1
    assert not b.contexts_run([True, False], [1, 1])  # held: 1
    assert (b.waited, b.batched) == (1.0, 1.0)
    assert not b.contexts_run([True, False], [1, 1])
    b.take_back()
    assert (b.waited, b.batched) == (1.0, 1.0)
    for _ in range(3):  # the memory wait: the same state after one tick or many
        assert b.contexts_run([False, False], [0, 1])
        assert (b.waited, b.batched) == (0.0, 1.0)


def test_a_re_plan_is_not_an_iteration_of_the_balance(tmp_path, monkeypatch):
    """The late arrival of the test above, with the loop planning its third iteration
    twice (as after a rank preempted all it ran): the request is held as long."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.0, 0.002], prompt_len=4, output_len=20)
    options = {
        "attention_dp_balance": True,
        "attention_dp_timeout_iters": 5,
        "attention_dp_batching_wait_iters": 0,
    }

    def ttft():
        _, records = run(
            path, _pricer(), "llama-3-8b", tp=2, dp_attention=2, scheduler_options=options
        )
        return next(r.ttft_s for r in records if r.session_id == 2)

    held = ttft()
    real = DPReplica._plan
    calls: list[int] = []

    def plan(self, s, rec, contexts=True):
        calls.append(1)
        if len(calls) in (5, 6):  # both ranks of the third iteration: plan again
            self._retry = True
            rec.last = IDLE
            return None
        return real(self, s, rec, contexts)

    monkeypatch.setattr(DPReplica, "_plan", plan)
    assert ttft() == pytest.approx(held)
    assert len(calls) > 6


def test_the_trtllm_mode_reads_attention_dp_config():
    model = get_model("tiny-transformer")
    sets = {
        "attention_dp_balance": "true",
        "attention_dp_timeout_iters": "60",
        "attention_dp_batching_wait_iters": "0",
    }
    settings = get_mode("trtllm").settings(model, sets)
    assert settings["scheduler_options"] == {
        "attention_dp_balance": True,
        "attention_dp_timeout_iters": 60,
        "attention_dp_batching_wait_iters": 0,
    }
    assert "scheduler_options" not in get_mode("trtllm").settings(model, {})  # off by default
    with pytest.raises(TwinError, match="attention_dp_timeout_iters=-1: must be at least 0"):
        get_mode("trtllm").settings(model, {"attention_dp_timeout_iters": "-1"})
    with pytest.raises(TwinError, match="attention_dp_balance"):
        get_mode("trtllm").settings(model, {"attention_dp_balance": "maybe"})


def test_the_balance_alone_takes_attention_dp_config_s_defaults():
    """``--set attention_dp_balance=true`` alone: ``AttentionDpConfig``'s 50 iterations of
    hold and 10 of batching wait (``tensorrt_llm/llmapi/llm_args.py``); counted in the
    pricer's iterations (``1 / tau`` a token step); off: no balance."""
    from types import SimpleNamespace

    model = get_model("tiny-transformer")
    options = get_mode("trtllm").settings(model, {"attention_dp_balance": "true"})
    sched = {"scheduler_options": options["scheduler_options"], "max_running": 64}
    config = EngineConfig(scheduling=SchedulerConfig(**sched))
    b = adp_balance(config, _pricer())
    assert b is not None
    assert (b.timeout, b.batching, b.max_batch, b.iteration) == (50, 10, 64, 1.0)
    spec = adp_balance(config, SimpleNamespace(tau=2.5))  # type: ignore[arg-type]
    assert spec is not None and spec.iteration == pytest.approx(0.4)
    assert adp_balance(EngineConfig(), _pricer()) is None
