"""The serving front end's time per prompt token (``HostTimeConfig.frontend_token_s``,
``twin.engine.cluster.Cluster._through_front``): TensorRT-LLM's API server tokenises each
text prompt on its own, so a request's front-end time grows with its prompt."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_helpers import ConstantPricer, run, write_rows

from twin.engine.config import EngineConfig
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
