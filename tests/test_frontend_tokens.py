"""The serving front end's time per prompt token (``HostTimeConfig.frontend_token_s``,
``twin.engine.cluster.Cluster._through_front``): TensorRT-LLM's API server tokenises each
text prompt on its own, so a request's front-end time grows with its prompt."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_helpers import ConstantPricer, run, write_rows

from twin.costmodel.profile_store import resolve_profile
from twin.engine import engine_times
from twin.engine.config import EngineConfig
from twin.engine.config_build import build_config
from twin.engine.engine_times import engine_time_defaults
from twin.errors import TwinError
from twin.workloads.schema import WorkloadRow


def _first_tokens(tmp_path, arrivals, prompt_lens, **config):
    """First-token times (row order) of one single-turn request per arrival, each with its
    own prompt length, output 2, engine steps of 10 ms."""
    rng = np.random.default_rng(0)
    rows = [
        WorkloadRow(i, 0, a, None, rng.integers(0, 30000, n, dtype=np.int32), False, None, 2)
        for i, (a, n) in enumerate(zip(arrivals, prompt_lens, strict=True))
    ]
    path = write_rows(tmp_path / "w.parquet", rows)
    _, recs = run(path, ConstantPricer(0.01), policy="vanilla", **config)
    return [r.first_token_s for r in sorted(recs, key=lambda r: r.row)]


def test_a_requests_front_end_time_is_its_prompt_tokens_times_the_rate(tmp_path):
    """Requests sent at 0, 1 and 2 s (the front end idle each time) with 100, 400 and 1,600
    prompt tokens at 1 ms a token: each reaches the engine 0.1 / 0.4 / 1.6 s after it was
    sent, then its 10 ms step; with a per-request part of 50 ms both add."""
    firsts = _first_tokens(tmp_path, [0.0, 1.0, 2.0], [100, 400, 1600], frontend_token_s=1e-3)
    assert firsts == pytest.approx([0.11, 1.41, 3.61])
    both = _first_tokens(
        tmp_path, [0.0, 1.0, 2.0], [100, 400, 1600], frontend_s=0.05, frontend_token_s=1e-3
    )
    assert both == pytest.approx([0.16, 1.46, 3.66])
    none = _first_tokens(tmp_path, [0.0, 1.0, 2.0], [100, 400, 1600])
    assert none == pytest.approx([0.01, 1.01, 2.01])


def test_one_at_a_time_the_next_request_waits_for_the_last_ones_tokens(tmp_path):
    """Three requests sent at 0 with 400, 100 and 200 tokens at 1 ms a token: one at a time
    (frontend_batch 1, the default) they leave the front end at 0.4, 0.5 and 0.7 s; as a
    latency (0) each after its own tokens, 0.4, 0.1 and 0.2 s."""
    serial = _first_tokens(tmp_path, [0.0, 0.0, 0.0], [400, 100, 200], frontend_token_s=1e-3)
    assert serial == pytest.approx([0.41, 0.51, 0.71])
    latency = _first_tokens(
        tmp_path, [0.0, 0.0, 0.0], [400, 100, 200], frontend_token_s=1e-3, frontend_batch=0
    )
    assert latency == pytest.approx([0.41, 0.11, 0.21])


def test_the_rate_is_a_config_field_left_out_of_summaries_at_its_default():
    assert "frontend_token_s" not in EngineConfig().to_dict()
    assert EngineConfig.of(frontend_token_s=2e-6).to_dict()["frontend_token_s"] == 2e-6
    with pytest.raises(TwinError, match="--frontend-token-s: must be >= 0"):
        EngineConfig.of(frontend_token_s=-1e-6)
    with pytest.raises(TwinError, match=r"--frontend-token-s: needs --frontend-batch 1 .* not 32"):
        EngineConfig.of(frontend_token_s=1e-6, frontend_batch=32)
    assert EngineConfig.of(frontend_token_s=1e-6, frontend_batch=1).host_time.frontend_batch == 1
    assert EngineConfig.of(frontend_s=0.03, frontend_batch=32).host_time.frontend_token_s == 0


B200_TRTLLM_RATE = 4e-6  # engine_times.json trtllm/b200 (docs/decisions.md, trtfe45)


def test_b200_tensorrt_llm_gets_its_fitted_rate_as_a_latency_and_no_other_pair_does():
    """engine_times.json ships B200 TensorRT-LLM's time per prompt token as a latency
    (``frontend_batch`` 0, read as a whole number); every other (engine, GPU) keeps none."""
    b200 = engine_time_defaults("trtllm", "b200")
    assert b200 == {"frontend_token_s": B200_TRTLLM_RATE, "frontend_batch": 0}
    assert type(b200["frontend_batch"]) is int
    for engine, gpu in [
        ("trtllm", "h100"),
        ("trtllm", "h200"),
        ("trtllm", "b300"),
        ("vllm", "b200"),
        ("sglang", "b200"),
        ("trtllm", "gb200"),
    ]:
        other = engine_time_defaults(engine, gpu)
        assert "frontend_token_s" not in other and "frontend_batch" not in other
    host = build_config(resolve_profile("b200", None, "trtllm"), engine="trtllm").host_time
    assert (host.frontend_token_s, host.frontend_batch, host.frontend_s) == (
        B200_TRTLLM_RATE,
        0,
        0.0,
    )
    given = build_config(
        resolve_profile("b200", None, "trtllm"),
        engine="trtllm",
        frontend_token_s=0.0,
        frontend_batch=1,
    ).host_time
    assert (given.frontend_token_s, given.frontend_batch) == (0.0, 1)  # what is given wins
    h100 = build_config(resolve_profile("h100", None, "trtllm"), engine="trtllm").host_time
    assert (h100.frontend_token_s, h100.frontend_batch, h100.frontend_s) == (0.0, 1, 0.02)


def test_a_front_end_batch_in_the_data_file_is_read_as_a_whole_number(monkeypatch):
    def table(entry):
        monkeypatch.setattr(engine_times, "_table", lambda: {"trtllm": {"b200": entry}})
        return engine_time_defaults("trtllm", "b200")

    read = table({"frontend_batch": 0.0, "frontend_token_s": 3})
    assert read == {"frontend_batch": 0, "frontend_token_s": 3.0}
    assert type(read["frontend_batch"]) is int and type(read["frontend_token_s"]) is float
    assert type(table({"frontend_batch": 1})["frontend_batch"]) is int
    for bad in (0.5, True, "0", float("inf"), float("nan")):
        with pytest.raises(ValueError, match=r"frontend_batch .* is not a whole number"):
            table({"frontend_batch": bad})
