"""Speculative decoding (issue 35): methods, engine spellings, pricing, memory, refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from test_bad_input import assert_clean_error

from twin.cache.pool import SplitPool
from twin.engine import build_run
from twin.engine.budget import memory_budget
from twin.engine.cluster import Cluster
from twin.engine.cost import PricerBase
from twin.engine.modes import get_mode
from twin.engine.speculative import Speculation, build, sglang_verify_reserve
from twin.engine.speculative_acceptance import iid_length, iid_rate, parse_acceptance
from twin.engine.speculative_methods import METHODS
from twin.engine.speculative_pricing import SpeculativePricer
from twin.errors import TwinError
from twin.presets import get_model
from twin.workloads.examples import example_path

LLAMA = get_model("llama-3.1-8b")
HYBRID = get_model("qwen3.5-9b")
CHAT = example_path("chat")


def eagle3(k: int, **extra: object) -> dict[str, str]:
    return {
        "speculative_config": json.dumps({"method": "eagle3", "num_speculative_tokens": k, **extra})
    }


def tpot(path: Path, engine: str, sets: dict[str, str], model: str = "llama-3.1-8b") -> float:
    run = build_run(
        path, model=model, gpu="h100", engine=engine, cache_gb="auto", sets=sets, concurrency=1
    )
    return float(run.simulate().to_dict()["tpot_s"]["mean"])


# ----- acceptance ----------------------------------------------------------------------


def test_acceptance_forms_give_the_expected_length():
    assert iid_length(0.5, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)  # Leviathan eq. 1
    assert iid_length(1.0, 4) == 5.0 and iid_length(0.0, 4) == 1.0
    assert iid_length(iid_rate(3.08, 4), 4) == pytest.approx(3.08, abs=1e-12)
    assert parse_acceptance("f", "0.8,0.6,0.4", 3) == pytest.approx(2.8)  # 1 + sum
    assert parse_acceptance("f", "0.8", 3) == pytest.approx(iid_length(0.8, 3))
    assert parse_acceptance("f", "0.9", 1) == pytest.approx(1.9)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0.4,0.6,0.5", "cannot rise with the position"),
        ("0.8,0.6", "give one rate, or 3"),
        ("1.2", "must be in \\[0, 1\\]"),
        ("often", "expected rates in"),
    ],
)
def test_bad_acceptance_is_one_line(value, message):
    with pytest.raises(TwinError, match=message):
        parse_acceptance("--set speculative_acceptance", value, 3)


def test_published_defaults_and_the_methods_that_must_be_told():
    assert set(METHODS) == {"draft_model", "eagle", "eagle3", "mtp", "ngram"}
    spec = build(LLAMA, "eagle3", 4)
    assert spec.acceptance_length == pytest.approx(3.08)  # vLLM #20780 at K=4
    assert "vLLM #20780" in spec.acceptance
    for method, extra in (("ngram", {}), ("draft_model", {"draft_model": "llama-3-8b"})):
        with pytest.raises(TwinError, match="depends on the draft and the workload"):
            build(LLAMA, method, 3, **extra)


# ----- pricing -------------------------------------------------------------------------


class Linear(PricerBase):
    """a + b x tokens + c x keys: each chunk's tokens and context, each decode's keys."""

    def __init__(self, a: float, b: float, c: float) -> None:
        self.a, self.b, self.c = a, b, c

    def step_time(self, prefills, decode_batch, decode_context):
        tokens = sum(n for n, _ in prefills) + decode_batch
        keys = sum(ctx + n for n, ctx in prefills) + decode_context
        return self.a + self.b * tokens + self.c * keys

    def decode_affine(self, batch):
        return self.a + self.b * batch, self.c


def test_a_token_step_is_an_iteration_over_the_acceptance_and_mixed_steps_keep_busy_time():
    spec = Speculation("eagle3", 3, 4, 2.5, "test")
    target, draft = Linear(1e-3, 1e-6, 1e-9), Linear(1e-4, 1e-6, 1e-9)
    p = SpeculativePricer(target, draft, spec)
    batch, context = 4, 4000
    verify = target.step_time([(4, 1000)] * 4, 0, 0)
    drafting = draft.step_time([(4, 1000)] * 4, 0, 0) + 2 * draft.step_time((), 4, 4000)
    assert p.step_time((), batch, context) == pytest.approx((verify + drafting) / 2.5)
    chunk = [(512, 0)]
    mixed = (
        target.step_time(chunk + [(4, 1000)] * 4, 0, 0)
        + draft.step_time(chunk + [(4, 1000)] * 4, 0, 0)
        + 2 * draft.step_time((), 4, 4000)
    )
    assert p.step_time(chunk, batch, context) == pytest.approx(
        mixed - (1 - 1 / 2.5) * (verify + drafting)
    )
    # A prefill alone: the target and the draft over the chunk.
    assert p.step_time(chunk, 0, 0) == pytest.approx(
        target.step_time(chunk, 0, 0) + draft.step_time(chunk, 0, 0)
    )
    # A decode run's steps are the steps one by one.
    run = np.asarray(p.decode_run(batch, context, 5))
    one = [p.step_time((), batch, context + i * batch) for i in range(5)]
    assert run == pytest.approx(one, rel=1e-9)


def test_tpot_falls_as_acceptance_rises(batch1):
    tpots = [
        tpot(batch1, "vllm", {**eagle3(3), "speculative_acceptance": r})
        for r in ("0.3", "0.6", "0.9")
    ]
    assert tpots[0] > tpots[1] > tpots[2]
    assert tpots[2] < tpot(batch1, "vllm", {})  # and speculation beats none at 0.9


def test_eagle3_on_llama_reproduces_vllm_20780_within_15_percent(batch1):
    # vllm-project/vllm issue #20780: Llama-3.1-8B-Instruct + EAGLE-3, MT-bench, batch 1,
    # K=4: acceptance length 3.08, TPOT 7.07 -> 4.05 ms (1.746x); the V1 runner of the
    # time, vLLM 0.19.0's rule here (benchmarks/bench_specdec.py has every K).
    base = tpot(batch1, "vllm==0.19", {})
    spec = tpot(
        batch1, "vllm==0.19", {**eagle3(4), "speculative_acceptance": "0.52,0.52,0.52,0.52"}
    )
    assert base / spec == pytest.approx(7.07 / 4.05, rel=0.15)


def test_the_033_drafter_costs_no_host_time_a_pass(batch1):
    # 0.33.0's Model Runner V2 replays the draft loop as CUDA graphs; 0.19.0's V1 runner
    # launches each pass apart: the same setup drafts cheaper under 0.33.0.
    sets = {**eagle3(4), "speculative_acceptance": "0.7"}
    assert get_mode("vllm==0.19").settings(LLAMA, sets)["speculative"]["draft_host"] is True
    assert get_mode("vllm").settings(LLAMA, sets)["speculative"]["draft_host"] is False
    new = tpot(batch1, "vllm", {}) / tpot(batch1, "vllm", sets)
    old = tpot(batch1, "vllm==0.19", {}) / tpot(batch1, "vllm==0.19", sets)
    assert new > old


def test_same_seed_same_outputs(tmp_path, batch1):
    sets = {**eagle3(3), "speculative_acceptance": "0.7"}
    for name in ("a", "b"):
        run = build_run(
            batch1, model="llama-3.1-8b", engine="vllm", cache_gb="auto", sets=sets, session_rate=4
        )
        run.simulate(tmp_path / name)
    for f in ("requests.parquet", "summary.json"):
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()


# ----- engine spellings ----------------------------------------------------------------


def test_vllm_spelling_records_the_speculation_in_the_summary_config():
    run = build_run(CHAT, model="llama-3.1-8b", engine="vllm", cache_gb="auto", sets=eagle3(3))
    spec = run.config.to_dict()["speculative"]
    assert spec["method"] == "eagle3" and spec["num_speculative_tokens"] == 3
    assert spec["verify_tokens"] == 4 and spec["topk"] == 1
    assert "speculative" not in build_run(CHAT, engine="vllm", cache_gb="auto").config.to_dict()


def test_vllm_synthetic_keys_follow_the_release():
    rates = {"rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.8, 0.5]}
    new = get_mode("vllm").settings(LLAMA, eagle3(2, **rates))["speculative"]
    assert new["acceptance_length"] == pytest.approx(2.3)
    length = {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.2}
    assert get_mode("vllm").settings(LLAMA, eagle3(2, **length))["speculative"][
        "acceptance_length"
    ] == pytest.approx(2.2)
    # 0.19.0's one mean rate of the unconditional per-position rates: 1 + k x rate.
    old = {"rejection_sample_method": "synthetic", "synthetic_acceptance_rate": 0.4}
    assert get_mode("vllm==0.19").settings(LLAMA, eagle3(3, **old))["speculative"][
        "acceptance_length"
    ] == pytest.approx(2.2)
    with pytest.raises(
        TwinError, match=re.escape("is not vLLM 0.33.0's (--engine vllm==0.19.0 has it")
    ):
        get_mode("vllm").settings(LLAMA, eagle3(3, **old))


def test_sglang_spelling_and_its_defaults():
    settings = get_mode("sglang").settings
    auto = settings(LLAMA, {"speculative_algorithm": "EAGLE3"})
    spec = auto["speculative"]
    # speculative_hook.py _auto_choose_speculative_params: Llama (5, 4, 8).
    assert (spec["num_speculative_tokens"], spec["topk"], spec["verify_tokens"]) == (5, 4, 8)
    assert auto["max_running"] == 48  # reset to 48 for speculative decoding
    chain = settings(
        LLAMA,
        {
            "speculative_algorithm": "eagle",
            "speculative_num_steps": "3",
            "speculative_eagle_topk": "1",
            "speculative_num_draft_tokens": "9",
            "max_running_requests": "96",
            "sglang_simulate_acc_len": "2.5",
        },
    )
    spec = chain["speculative"]
    assert spec["verify_tokens"] == 4  # adjusted to num_steps + 1 at topk 1
    assert spec["acceptance_length"] == 2.5 and spec["acceptance"] == "SGLANG_SIMULATE_ACC_LEN"
    assert chain["max_running"] == 96
    ngram = settings(LLAMA, {"speculative_algorithm": "NGRAM", "speculative_acceptance": "0.5"})
    assert ngram["speculative"]["verify_tokens"] == 12  # _handle_ngram's default


def test_an_explicit_max_running_beats_sglang_speculation_default():
    run = build_run(
        CHAT,
        model="llama-3.1-8b",
        engine="sglang",
        cache_gb="auto",
        max_running=64,
        sets={"speculative_algorithm": "EAGLE3"},
    )
    assert run.config.scheduling.max_running == 64


@pytest.mark.parametrize(
    ("engine", "sets", "message"),
    [
        ("vllm", {"speculative_config": "{eagle"}, "not JSON"),
        ("vllm", {"speculative_config": "[1]"}, "expected a JSON object"),
        (
            "vllm",
            {"speculative_config": '{"method": "medusa", "num_speculative_tokens": 2}'},
            "not modelled",
        ),
        (
            "vllm",
            {"speculative_config": '{"method": "eagle3", "num_speculative_tokens": 2, "foo": 1}'},
            "key 'foo'",
        ),
        (
            "vllm",
            {"speculative_config": '{"method": "eagle3"}'},
            "give the number of speculative tokens",
        ),
        (
            "vllm",
            {"speculative_config": '{"method": "eagle3", "num_speculative_tokens": 0}'},
            "positive integer",
        ),
        (
            "vllm",
            eagle3(2, synthetic_acceptance_length=2.0),
            'needs "rejection_sample_method": "synthetic"',
        ),
        (
            "vllm",
            {
                **eagle3(2),
                "speculative_acceptance": "0.6",
                "speculative_config": json.dumps(
                    {
                        "method": "eagle3",
                        "num_speculative_tokens": 2,
                        "rejection_sample_method": "synthetic",
                        "synthetic_acceptance_length": 2.0,
                    }
                ),
            },
            "give one of them",
        ),
        (
            "vllm",
            {"speculative_config": '{"method": "draft_model", "num_speculative_tokens": 3}'},
            "name the draft model",
        ),
        (
            "vllm",
            {"speculative_config": '{"method": "mtp", "num_speculative_tokens": 1}'},
            "carries no MTP layers",
        ),
        (
            "vllm",
            {"speculative_config": '{"method": "ngram", "num_speculative_tokens": 3}'},
            "depends on the draft and the workload",
        ),
        ("vllm", {"speculative_acceptance": "0.5"}, "give a speculative_config too"),
        (
            "vllm",
            eagle3(2, synthetic_acceptance_length=4.0, rejection_sample_method="synthetic"),
            "must be in \\[1, 3\\]",
        ),
        ("sglang", {"speculative_algorithm": "DFLASH"}, "not modelled"),
        ("sglang", {"speculative_num_steps": "3"}, "give --set speculative_algorithm too"),
        (
            "sglang",
            {"speculative_algorithm": "EAGLE3", "speculative_eagle_topk": "4"},
            "give speculative_num_steps too",
        ),
        (
            "sglang",
            {
                "speculative_algorithm": "EAGLE3",
                "speculative_num_steps": "3",
                "speculative_eagle_topk": "4",
            },
            "needs --set speculative_num_draft_tokens",
        ),
    ],
)
def test_bad_combinations_are_one_line(engine, sets, message):
    with pytest.raises(TwinError, match=message) as err:
        build_run(CHAT, model="llama-3.1-8b", engine=engine, cache_gb="auto", sets=sets)
    assert "\n" not in str(err.value)


def test_a_bad_speculative_setting_exits_2(capsys, tmp_path):
    argv = ["simulate", "-m", "llama-3.1-8b", "--engine", "vllm", "--out", str(tmp_path / "o")]
    argv += [
        "--set",
        "speculative_config="
        + json.dumps(
            {"method": "eagle3", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2}
        ),
    ]
    assert_clean_error(capsys, argv, tmp_path, "must be 1 or the target's --tp 1")


def test_mtp_uses_the_models_own_layer_and_defaults_to_its_count():
    model = get_model("deepseek-v3")
    spec = build(model, "mtp", None)
    assert spec.num_speculative_tokens == model.mtp_layers == 1
    assert spec.acceptance_length == pytest.approx(1.85)  # DeepSeek-V3 report, 85%
    draft = spec.draft_spec(model)
    assert draft is not None and draft.layers == (model.layers[-1],)
    assert draft.vocab_size == model.vocab_size


# ----- memory --------------------------------------------------------------------------


def test_the_draft_takes_its_weights_and_a_share_of_every_tokens_kv():
    plain = build_run(CHAT, model="llama-3.1-8b", engine="vllm", cache_gb="auto")
    spec = build_run(CHAT, model="llama-3.1-8b", engine="vllm", cache_gb="auto", sets=eagle3(3))
    head = Speculation.from_dict(spec.config.mode.speculative).draft_spec(LLAMA)
    assert head is not None and head.vocab_size == 32000 and head.n_attention_layers == 1
    weights = METHODS["eagle3"].weight_bytes(head)
    kv = LLAMA.kv_bytes_per_token
    expected = (memory_budget(LLAMA, plain.config) - weights) * kv / (kv + head.kv_bytes_per_token)
    assert memory_budget(LLAMA, spec.config) == pytest.approx(expected)
    # One more attention layer of the target's shape: 1/33 of the pool is the head's KV.
    assert head.kv_bytes_per_token * 32 == kv
    ngram = build_run(
        CHAT,
        model="llama-3.1-8b",
        engine="vllm",
        cache_gb="auto",
        sets={
            "speculative_config": '{"method": "ngram", "num_speculative_tokens": 3}',
            "speculative_acceptance": "0.5",
        },
    )
    assert memory_budget(LLAMA, ngram.config) == memory_budget(LLAMA, plain.config)


def test_vllm_hybrids_hold_a_state_per_drafted_token():
    run = build_run(CHAT, model="qwen3.5-9b", engine="vllm", cache_gb="auto", sets=eagle3(3))
    assert run.config.mode.speculative["state_slots"] == 3
    cluster = Cluster(run.model, run.pricer, run.config, run.workload)
    replica = cluster.replicas[0]
    assert replica.memory.held_states == 4 and replica.state_slots == 1  # copies still priced
    plain = Cluster(
        run.model,
        run.pricer,
        build_run(CHAT, model="qwen3.5-9b", engine="vllm", cache_gb="auto").config,
        run.workload,
    )
    assert (
        replica.memory.kv.most(1000) - plain.replicas[0].memory.kv.most(1000)
        >= 3 * HYBRID.ssm_checkpoint_bytes
    )
    assert (
        build_run(
            CHAT, model="llama-3.1-8b", engine="vllm", sets=eagle3(3)
        ).config.mode.speculative["state_slots"]
        == 0
    )


def test_sglang_verify_buffer_shares_the_mamba_budget():
    # kv_cache_configurator.py's joint solve: K = (S - P (1 + D)) // (P (1 + D / R)).
    slot, s = 10, 10_000
    reserve = sglang_verify_reserve(s, slot, 4, 3, 48)  # extra_buffer: R = 5
    k = int((s - slot * 5) // (slot * (1 + 4 / 5)))
    assert reserve == s - k * slot
    with pytest.raises(TwinError, match="leaves no room for recurrent states"):
        sglang_verify_reserve(40, slot, 4, 1, 48)
    sets = {
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": "3",
        "speculative_eagle_topk": "1",
    }
    run = build_run(CHAT, model="qwen3.5-9b", engine="sglang", cache_gb="auto", sets=sets)
    assert run.config.mode.speculative["verify_states"] == 4
    pool = Cluster(run.model, run.pricer, run.config, run.workload).replicas[0].memory.pool
    plain = build_run(CHAT, model="qwen3.5-9b", engine="sglang", cache_gb="auto")
    base = Cluster(plain.model, plain.pricer, plain.config, plain.workload).replicas[0].memory.pool
    assert isinstance(pool, SplitPool) and isinstance(base, SplitPool)
    assert pool.state_size < base.state_size


def test_shared_prefix_checkpoint_needs_eagle_or_mtp():
    sets = {**eagle3(3), "enable_mamba_shared_prefix_checkpoint": "true"}
    assert build_run(
        CHAT, model="qwen3.5-9b", engine="vllm", cache_gb="auto", sets=sets
    ).config.mode.speculative
    ngram = {
        "speculative_config": '{"method": "ngram", "num_speculative_tokens": 3}',
        "speculative_acceptance": "0.5",
        "enable_mamba_shared_prefix_checkpoint": "true",
    }
    with pytest.raises(TwinError, match="only with EAGLE/MTP, not ngram"):
        build_run(CHAT, model="qwen3.5-9b", engine="vllm", cache_gb="auto", sets=ngram)


def test_extra_buffer_lazy_runs_with_its_two_states(tmp_path):
    run = build_run(
        CHAT,
        model="qwen3.5-9b",
        engine="sglang==0.5.23",
        cache_gb="auto",
        sets={"mamba_radix_cache_strategy": "extra_buffer_lazy"},
    )
    summary = run.simulate().to_dict()
    assert summary["config"]["state_slots"] == 2
    assert summary["requests"]["measured"] > 0


def test_an_mla_models_verification_is_priced_in_the_absorbed_form():
    model = get_model("deepseek-v3")
    spec = build(model, "mtp", 3)
    assert spec.absorbed_extend == 4  # the verification: 1 + 3 drafts
    run = build_run(
        CHAT,
        model=model,
        gpu="h200",
        engine="trtllm",
        tp=8,
        ep=8,
        cache_gb="auto",
        concurrency=1,
        speculative=spec.to_dict(),
    )
    pricer = run.pricer
    assert isinstance(pricer, SpeculativePricer)
    inner = pricer.inner
    while not hasattr(inner, "cost_model"):
        inner = inner.inner
    assert inner.cost_model.absorbed_extend == 4
    assert pricer.draft.cost_model.absorbed_extend == 4  # the MTP layer's draft extend too
    # the verification of 3 drafts costs a few decode steps' attention, not a prefill's
    decode = pricer.inner.step_time((), 32, 32 * 8000)
    verify = pricer.inner.step_time(pricer._verify(32, 32 * 8000), 0, 0)
    assert decode < verify < 2 * decode
