"""Pipeline parallelism (``--pp``, ``twin.engine.pipeline``): stage layers and memory, the
flow shop's timing, conservation of requests, and the low- and high-load behaviour on a
measured profile."""

from __future__ import annotations

import math

import pytest
from test_engine_helpers import ConstantPricer, LinearPricer, generated, run, single_turns

from twin.cli.main import run as twin
from twin.engine import EngineConfig, memory_budget
from twin.engine.config import ClusterConfig, MemoryConfig, SchedulerConfig
from twin.engine.pipeline import FlowShop, PipelineCluster, PipelinePricer
from twin.engine.run import build_run
from twin.engine.sim import Environment
from twin.errors import TwinError
from twin.hardware import GPUS
from twin.parallel import (
    Layout,
    check_layout,
    stage_models,
    stage_sizes,
    stage_weight_bytes_per_gpu,
    weight_bytes_per_gpu,
)
from twin.presets import get_model
from twin.workloads.reader import Workload


def test_stage_sizes_follow_vllm_get_pp_indices():
    # vLLM 0.19.0 get_pp_indices: the remainder to the stages before the last, backwards.
    assert stage_sizes(80, 2) == [40, 40]
    assert stage_sizes(10, 4) == [2, 3, 3, 2]
    assert stage_sizes(61, 4) == [15, 15, 16, 15]
    assert stage_sizes(32, 3) == [11, 11, 10]
    assert stage_sizes(5, 5) == [1] * 5
    # SGLang 0.5.10.post1 get_pp_indices: the remainder to the last stages.
    assert stage_sizes(10, 4, "sglang") == [2, 2, 3, 3]
    assert stage_sizes(61, 4, "sglang") == [15, 15, 15, 16]
    assert stage_sizes(80, 2, "sglang") == [40, 40]
    with pytest.raises(TwinError, match="unknown pipeline split"):
        Layout(pp=2, pp_split="nosuch")


def test_stage_models_cut_the_pattern_in_order():
    m = get_model("qwen3.5-9b")  # (3 gdn, 1 attention) x 8
    first, second = stage_models(m, 2)
    assert first.layers == m.layers[:16] and second.layers == m.layers[16:]
    assert first.mixer_counts["gdn"] == 12 and second.mixer_counts["attention"] == 4
    # A transformer given by counts is one layer kind repeated.
    parts = stage_models(get_model("llama-3-8b"), 3)
    assert [p.n_attention_layers for p in parts] == [11, 11, 10]
    assert sum(p.kv_bytes_per_token for p in parts) == get_model("llama-3-8b").kv_bytes_per_token


def test_stage_memory_known_answer_llama_3_1_70b():
    """Llama-3.1-70B at tp 4, pp 2 (config.json: d 8192, 80 layers, 64 heads, 8 KV heads
    of 128, d_ff 28672, vocab 128256, untied): a layer is q/o 2 x 8192^2 + k/v 2 x 8192 x
    1024 + MLP 3 x 8192 x 28672 + two norms = 855,654,400 parameters."""
    m = get_model("llama-3.1-70b")
    layer = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    assert layer == 855_654_400
    vocab = 128256 * 8192
    first = (40 * layer + vocab) * 2 // 4  # embedding on the first stage, bf16, over 4
    last = (40 * layer + vocab + 8192) * 2 // 4  # LM head and final norm on the last
    assert stage_weight_bytes_per_gpu(m, Layout(4, pp=2)) == [first, last]
    assert first == 17_638_424_576 and last == 17_638_428_672
    assert weight_bytes_per_gpu(m, Layout(4, pp=2)) == last
    # The pool: each stage holds half of every token's KV, so the tighter stage's free
    # bytes count twice in the engine's whole-model bytes.
    gpu = GPUS["h100"].hbm_bytes
    config = EngineConfig(
        cluster=ClusterConfig(tp=4, pp=2),
        memory=MemoryConfig(gpu_memory_bytes=gpu, shared_pool=True),
    )
    assert memory_budget(m, config) == pytest.approx(2 * (4 * gpu * 0.9 - 4 * last))
    # Against all eight GPUs in one tp 8 replica: the same but for the tied-free copy
    # rounding (the stages' weights add up to the model's).
    tp8 = EngineConfig(
        cluster=ClusterConfig(tp=8), memory=MemoryConfig(gpu_memory_bytes=gpu, shared_pool=True)
    )
    assert memory_budget(m, config) == pytest.approx(memory_budget(m, tp8), abs=1e5)
    assert 4 * (first + last) == pytest.approx(m.weight_bytes, abs=64)


def test_a_stage_that_cannot_hold_its_weights_is_refused():
    m = get_model("llama-3.1-70b")
    gpu = 70e9  # 63 GB usable: a stage of 40 layers (70.6 GB) does not fit one GPU
    with pytest.raises(TwinError, match="no memory left"):
        memory_budget(
            m,
            EngineConfig(
                cluster=ClusterConfig(tp=1, pp=2),
                memory=MemoryConfig(gpu_memory_bytes=gpu, shared_pool=True),
            ),
        )
    # Four stages of one GPU each hold it.
    assert (
        memory_budget(
            m,
            EngineConfig(
                cluster=ClusterConfig(tp=1, pp=4),
                memory=MemoryConfig(gpu_memory_bytes=gpu, shared_pool=True),
            ),
        )
        > 0
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pp": 2, "tp": 2, "dp_attention": 2}, "--pp 2: not modelled with --dp-attention"),
        ({"pp": 2, "host_cache_ratio": 1.0}, "--pp 2: not modelled with a host cache tier"),
        ({"pp": 2, "prefill_workers": 1, "decode_workers": 1}, "disaggregated"),
        (
            {"pp": 2, "scheduler": "trtllm", "scheduler_options": {"overlap_scheduler": True}},
            "--pp 2: not modelled with TensorRT-LLM's overlap scheduler",
        ),
        ({"pp": 0}, "--pp"),
    ],
)
def test_layouts_it_cannot_take_are_refused(fields, message):
    with pytest.raises(TwinError, match=message):
        EngineConfig.of(**fields)


def test_more_stages_than_layers_is_refused_in_one_line():
    m = get_model("tiny-transformer")
    n = m.n_attention_layers
    with pytest.raises(TwinError, match=rf"--pp {n + 1}: model 'tiny-transformer' has {n} "):
        check_layout(m, Layout(1, pp=n + 1))
    with pytest.raises(TwinError, match="gives layer counts without their order"):
        stage_models(get_model("marconi-hybrid-7b"), 2)


def test_without_pp_the_config_is_unchanged():
    assert "pp" not in EngineConfig().to_dict()
    assert EngineConfig(cluster=ClusterConfig(pp=2)).to_dict()["pp"] == 2


def test_flow_shop_two_micro_batches_two_stages():
    """Stages of 2 s and 3 s, a 1 s send: the first micro-batch leaves at 2 + 1 + 3 = 6;
    the second, planned at the same time, takes stage 0 at 2 (4), arrives at 5 and waits
    for stage 1 until 6: out at 9. The replica was busy 9 s."""
    env = Environment()
    shop = FlowShop(env, 2)
    assert shop.enter([2.0, 3.0], [1.0]) == 6.0
    assert shop.enter([2.0, 3.0], [1.0]) == 9.0
    assert shop.free == [4.0, 9.0]
    env.run(until=4.0)
    assert shop.busy_until_now_s() == 4.0
    env.run(until=20.0)
    assert shop.busy_until_now_s() == 9.0
    # Planned at 20 with the stages free: no wait; idle time is not busy.
    assert shop.enter([2.0, 3.0], [1.0]) == 6.0
    env.run(until=30.0)
    assert shop.busy_until_now_s() == 15.0


def _pipeline(step_s=1.0, latency=0.5, stages=2):
    return PipelinePricer([ConstantPricer(step_s)] * stages, math.inf, latency, 0.0)


def test_two_lanes_overlap_in_the_pipeline(tmp_path):
    """Stages of 1 s, a 0.5 s send. Request A at 0 is lane 0's micro-batch (out at 2.5);
    B at 0.25 is lane 1's: stage 0 free at 1, stage 1 at 2.5, out at 3.5. Each decode
    step of a lane waits for the other lane's micro-batch in the stages:
    A's decodes leave at 5 and 7.5, B's at 6 and 8.5."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.25], prompt_len=4, output_len=3)
    _, records = run(path, _pipeline(), "llama-3-8b", pp=2)
    by_row = {r.row: r for r in records}
    a, b = by_row[0], by_row[1]
    assert (a.first_token_s, a.completed_s) == pytest.approx((2.5, 7.5))
    assert (b.first_token_s, b.completed_s) == pytest.approx((3.5, 8.5))


def test_the_host_is_a_stage_ahead_of_the_gpus(tmp_path):
    """Host time 0.5 s a micro-batch, stages of 1 s, sends of 0.5 s. A alone at 0: host
    0-0.5, stage 0 0.5-1.5, stage 1 2-3: first token at 3. B at 0.25 takes the host at
    0.5-1 and stage 0 when A leaves it (1.5-2.5), stage 1 at 3-4: its host time overlaps
    A's stages instead of adding to them."""
    path = single_turns(tmp_path / "w.parquet", [0.0, 0.25], prompt_len=4, output_len=1)
    pricer = PipelinePricer([ConstantPricer(1.0)] * 2, math.inf, 0.5, 0.0, step_host_s=0.5)
    _, records = run(path, pricer, "llama-3-8b", pp=2)
    by_row = {r.row: r for r in records}
    assert by_row[0].first_token_s == pytest.approx(3.0)
    assert by_row[1].first_token_s == pytest.approx(4.0)
    assert pricer.step_time([(4, 0)], 0, 0) == pytest.approx(3.0)


def test_one_request_alone_pays_every_stage_and_send(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=4, output_len=4)
    summary, records = run(path, _pipeline(stages=3), "llama-3-8b", pp=3)
    (r,) = records
    one = 3 * 1.0 + 2 * 0.5  # three stages and two sends
    assert r.ttft_s == pytest.approx(one) and r.e2e_s == pytest.approx(4 * one)
    rep = summary["replicas"][0]
    assert rep["steps"] == 4 and rep["busy_s"] == pytest.approx(4 * one)


@pytest.mark.parametrize(
    "scheduler",
    ["vllm", "sglang", pytest.param("trtllm", marks=pytest.mark.slow), "continuous"],
)
def test_every_request_completes_once(tmp_path, scheduler):
    """A loaded chat run whose small shared pool preempts, under each mode's lanes: every
    request is recorded once, its events in order. (SGLang's lanes once stalled here: a
    lane left ``batch_is_full`` with nothing running never admitted again.)"""
    path = generated(tmp_path / "w.parquet", "chat", sessions=12, rate=8.0, max_context=1024)
    wl = Workload.open(path)
    stage = LinearPricer(base=2e-3, per_token=2e-5, per_seq=2e-4, affine=False)
    pricer = PipelinePricer([stage, stage], 1e11, 1e-5, 8192.0)
    summary, records = run(
        path,
        pricer,
        "llama-3-8b",
        pp=2,
        scheduler=scheduler,
        preemption="retract" if scheduler == "sglang" else "recompute",
        shared_pool=True,
        gpu_memory_bytes=9.0e9,  # each stage's GPU: 8.0 GB of weights, 0.14 GB of pool
        max_running=32,
        max_batched_tokens=1024,
    )
    assert summary["preemption"]["preemptions"] > 0
    assert len(records) == wl.num_rows
    assert sorted(r.row for r in records) == list(range(wl.num_rows))
    for r in records:
        assert not r.rejected
        assert r.arrival_s <= r.admitted_s <= r.first_token_s <= r.completed_s
    assert summary["requests"]["total"] == wl.num_rows


def test_the_running_cap_is_the_replica_s(tmp_path):
    """Eight requests at once, a cap of 4: vLLM's max_num_seqs counts every running request
    (all micro-batches), so the first micro-batch takes four; SGLang caps each micro-batch
    at max_running // pp = 2 (pp_max_micro_batch_size), so both lanes run two."""
    path = single_turns(tmp_path / "w.parquet", [0.0] * 8, prompt_len=4, output_len=20)
    seen: dict[str, tuple[int, int]] = {}
    for scheduler in ("vllm", "sglang"):
        cfg = EngineConfig(
            cluster=ClusterConfig(pp=2),
            scheduling=SchedulerConfig(max_running=4, scheduler=scheduler),
        )
        cluster = PipelineCluster(
            get_model("llama-3-8b"), _pipeline(), cfg, Workload.open(path), lambda rec: None
        )
        lanes = cluster.replicas[0].scheduler.lanes
        most = [0, 0]  # most running in one lane, in all lanes

        def watch(env=cluster.env, lanes=lanes, most=most):
            while True:
                running = [len(x.prefilling) + len(x.decoding) for x in lanes]
                most[0] = max(most[0], *running)
                most[1] = max(most[1], sum(running))
                yield env.timeout(0.25)

        cluster.env.process(watch())
        cluster.run()
        seen[scheduler] = (most[0], most[1])
    assert seen == {"vllm": (4, 4), "sglang": (2, 4)}


def _llama70(tmp_path, pp, prompt, out, arrivals, **fields):
    path = single_turns(tmp_path / f"w{pp}.parquet", arrivals, prompt_len=prompt, output_len=out)
    return build_run(
        path, model="llama-3.1-70b", gpu="h100", tp=4, pp=pp, cache_gb="auto", **fields
    )


@pytest.mark.parametrize("engine", [None, "vllm"])
def test_low_load_tpot_is_pp1_s_plus_the_sends(tmp_path, engine):
    """One request at a time: a pp 2 decode step runs the host and both stages in turn, so
    its TPOT is the pp 1 step at the same tp (the same layers, head and host time) plus one
    send of a token's activations (10 us NVLink latency + 2 x 8192 x 2 / 4 bytes): within
    0.5%, and above."""
    arrivals = [0.0, 10.0, 20.0]
    one = _llama70(tmp_path, 1, 512, 64, arrivals, engine=engine).simulate()
    two = _llama70(tmp_path, 2, 512, 64, arrivals, engine=engine).simulate()
    t1, t2 = one.latency.tpot_s.mean, two.latency.tpot_s.mean
    assert t1 < t2 < t1 * 1.005


def test_high_load_throughput_beats_pp1_on_half_the_gpus(tmp_path):
    """64 requests of 2,048 + 256 tokens at once, on llama-3-8b (H100): pp 2 (two GPUs)
    runs two micro-batches of 32 whose decode steps read half the KV each, where pp 1 on
    one GPU steps all 64 at once: at least 1.2x the output tokens a second."""
    path = single_turns(tmp_path / "w.parquet", [0.0] * 64, prompt_len=2048, output_len=256)
    got = {}
    for pp in (1, 2):
        r = build_run(path, model="llama-3-8b", gpu="h100", tp=1, pp=pp, cache_gb="auto")
        got[pp] = r.simulate().throughput.output_tokens_per_s
    assert got[2] > 1.2 * got[1]


def test_cli_refuses_a_layout_in_one_line(tmp_path, capsys):
    for argv, line in (
        (
            ["simulate", "-m", "tiny-transformer", "--pp", "5"],
            "error: --pp 5: model 'tiny-transformer' has 4 layer(s), fewer than the pipeline "
            "stages (each stage holds at least one layer)",
        ),
        (
            [
                "cost",
                "-m",
                "llama-3-8b",
                "-g",
                "h100",
                "--tp",
                "2",
                "--pp",
                "2",
                "--dp-attention",
                "2",
            ],
            "error: --pp 2: not modelled with --dp-attention yet",
        ),
    ):
        rc = twin([*argv, *(["--out", str(tmp_path / "sim")] if argv[0] == "simulate" else [])])
        _, err = capsys.readouterr()
        assert rc == 2 and err.strip() == line
    assert not (tmp_path / "sim").exists()


def test_cost_shows_each_stage_s_share(capsys):
    """llama-3-8b at pp 2 on H100: two stages of 16 layers, the LM head on the last; a
    decode micro-batch through the empty pipeline is both stages and one send, and with
    two in flight the slower stage paces them."""
    import json

    argv = ["cost", "-m", "llama-3-8b", "--gpu", "h100", "--pp", "2"]
    assert twin([*argv, "--lengths", "1024", "--batches", "1,64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["pp"], data["stage_layers"]) == (2, [16, 16])
    for row in data["prefill"] + data["decode"]:
        first, last = row["stages_s"]
        assert 0 < first < last  # the last stage runs the LM head
        assert row["total_s"] == pytest.approx(first + last + row["send_s"])
    for row in data["decode"]:
        assert row["tokens_per_s"] == pytest.approx(
            2 * row["batch"] / max(row["total_s"], 2 * row["stages_s"][1])
        )
