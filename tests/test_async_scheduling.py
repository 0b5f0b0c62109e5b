"""vLLM's asynchronous scheduling (issue 31): the step's host time overlaps its forward.

``twin.engine.host_time.HostTimePricer`` with ``overlap`` prices a step at
``max(kernels, host time)`` instead of their sum; ``--set async_scheduling`` of the vllm
mode turns it on; the silicon harness runs a vLLM row with it where its release (0.14.0
on) or InferenceMAX's script does (``twin.validate.silicon.inferencemax_vllm``).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from silicon_rows import silicon_row
from test_engine_helpers import ConstantPricer, FillingPricer, LinearPricer, run, single_turns

from twin.engine.host_time import HostTimePricer
from twin.engine.modes import get_mode
from twin.engine.modes_vllm import VLLM_ASYNC_FROM
from twin.engine.run import build_run
from twin.errors import TwinError
from twin.presets import get_model
from twin.validate import silicon as sil


def test_overlapped_host_time_shows_only_where_it_outlasts_the_forward(tmp_path):
    """1 s of kernels a step. Host 0.5 s + 0.1 s a sequence: hidden, a lone request's
    prefill and 2 decodes take 1 s each (done at 3 s; 4.8 s added). Host 1.5 s: every
    step lasts 1.5 s (done at 4.5 s)."""
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=8, output_len=3)
    for inner in (ConstantPricer(), LinearPricer(1.0, 0.0, 0.0, 0.0, affine=False)):
        _, hidden = run(path, HostTimePricer(inner, 0.5, 0.1, overlap=True), policy="vanilla")
        assert hidden[0].first_token_s == pytest.approx(1.0)
        assert hidden[0].completed_s == pytest.approx(3.0)
        _, longer = run(path, HostTimePricer(inner, 1.5, 0.0, overlap=True), policy="vanilla")
        assert longer[0].first_token_s == pytest.approx(1.5)
        assert longer[0].completed_s == pytest.approx(4.5)
    over = HostTimePricer(ConstantPricer(), 0.5, 0.1, overlap=True)
    assert over.step_time([(8, 0)], 3, 100) == 1.0
    assert over.step_time([(8, 0)], 30, 100) == pytest.approx(0.5 + 0.1 * 31)
    assert over.decode_affine(3) == (1.0, 0.0)  # the forward outlasts the host: affine
    assert over.decode_affine(6) is None  # 1.1 s of host: max() is not affine
    assert list(over.decode_run(6, 0, 2)) == [pytest.approx(1.1)] * 2


def test_overlapped_compiled_ends_are_the_inner_ones_only_while_the_forward_is_longer():
    class Filling(FillingPricer):
        def decode_run(self, batch, context, steps):
            return np.full(steps, self.step_s)

    inner = Filling()
    assert HostTimePricer(inner, 0.25, 0.0, overlap=True).decode_ends(2, 0) is not None
    assert HostTimePricer(inner, 1.25, 0.0, overlap=True).decode_ends(2, 0) is None


def test_the_vllm_flag_sets_the_schedulers_option_and_refuses_a_non_boolean():
    model, vllm = get_model("llama-3-8b"), get_mode("vllm")
    on = vllm.settings(model, {"async_scheduling": "true"})["scheduler_options"]
    assert on == {"cache_preempted": True, "async_scheduling": True}  # the mode's own stays
    assert "async_scheduling" not in vllm.settings(model, {})["scheduler_options"]
    assert (
        vllm.settings(model, {"async_scheduling": "off"})["scheduler_options"]["async_scheduling"]
        is False
    )
    with pytest.raises(TwinError, match="async_scheduling=maybe: expected true or false"):
        vllm.settings(model, {"async_scheduling": "maybe"})


def test_async_scheduling_lowers_an_h100_vllm_decode_by_the_host_time(tmp_path):
    """The H100 vLLM host time (engine_times.json: 1.175 ms + 0.05 ms a request) is added
    to every step without it; with it the step is the kernels' price (they are longer)."""
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=64, output_len=9)
    tpot = {}
    for flag in ("false", "true"):
        run_ = build_run(
            path,
            model="llama-3-8b",
            gpu="h100",
            engine="vllm",
            sets={"async_scheduling": flag},
            concurrency=1,
        )
        records = []
        run_.simulate(on_record=records.append)
        tpot[flag] = records[0].tpot_s
    assert tpot["false"] - tpot["true"] == pytest.approx(1.175e-3 + 0.05e-3, rel=1e-6)


def test_overlap_with_attention_dp_is_refused_in_one_line(tmp_path):
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=64, output_len=4)
    with pytest.raises(TwinError, match="not modelled with attention data parallelism"):
        build_run(
            path,
            model="gpt-oss-20b",
            gpu="h100",
            engine="vllm",
            tp=2,
            dp_attention=2,
            sets={"async_scheduling": "true"},
        )


def test_overlap_with_a_cpu_drafter_is_refused_as_vllm_does(tmp_path):
    """vLLM 0.14.0-0.18.0 raise on an explicit --async-scheduling with n-gram drafting
    (its drafter reads the sampled tokens on the CPU); a draft model runs asynchronously
    from 0.16.0 (the modelled releases are 0.19.0 and 0.33.0)."""

    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=64, output_len=4)
    spec = {"speculative_config": '{"method": "ngram", "num_speculative_tokens": 3}'}
    with pytest.raises(TwinError, match="n-gram drafting reads the sampled tokens on the host"):
        build_run(
            path,
            model="llama-3-8b",
            gpu="h100",
            engine="vllm",
            sets={"async_scheduling": "true", **spec, "speculative_acceptance": "0.7"},
        )
    draft = {"method": "draft_model", "model": "llama-3-8b", "num_speculative_tokens": 3}
    sets = {"speculative_config": json.dumps(draft), "speculative_acceptance": "0.7"}
    sets["async_scheduling"] = "true"
    build_run(path, model="llama-3-8b", gpu="h100", engine="vllm", sets=sets)


def test_a_measured_vllm_row_runs_asynchronously_from_its_release_or_script():
    base = silicon_row(
        id="x",
        source="/x/aic-auto-gap-analysis/y.csv; silicon_concurrency=4",
        backend_version="0.12.0",
        model_path="Qwen/Qwen3-32B",
        system="h100_sxm",
        precision="bf16",
    )
    assert VLLM_ASYNC_FROM == "0.14.0"
    assert not sil.vllm_async_scheduling(base)  # 0.12.0: off by default
    for version, on in (("0.13.0", False), ("0.14.0", True), ("0.18.0", True), ("", False)):
        assert sil.vllm_async_scheduling(dataclasses.replace(base, backend_version=version)) is on
    assert not sil.vllm_async_scheduling(dataclasses.replace(base, backend_version="nightly-1"))
    imax = "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=4"
    gptoss = dataclasses.replace(
        base, source=imax, model_path="openai/gpt-oss-120b", backend_version="0.11.2"
    )
    assert sil.vllm_async_scheduling(gptoss)  # its script's config.yaml
    assert not sil.vllm_async_scheduling(gptoss, "defaults")  # the release's default
    other = dataclasses.replace(gptoss, model_path="some/Other-Model")
    assert not sil.vllm_async_scheduling(other)
