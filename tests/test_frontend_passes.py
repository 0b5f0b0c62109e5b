"""The serving front end in passes (``HostTimeConfig.frontend_batch``,
``twin.engine.cluster.Cluster._through_front``) and vLLM's rows, whose API server
tokenises up to 32 queued prompts a call (``modes_vllm.VLLM_FRONTEND_BATCH``)."""

from __future__ import annotations

import pytest
from silicon_rows import planned, silicon_row
from test_engine_helpers import ConstantPricer, run, single_turns

from twin.costmodel.profile_store import load_profile
from twin.engine.config import EngineConfig
from twin.engine.config_build import build_config
from twin.engine.modes_vllm import VLLM_FRONTEND_BATCH
from twin.errors import TwinError


def _first_tokens(tmp_path, arrivals, pricer, **config):
    path = single_turns(tmp_path / "w.parquet", arrivals, prompt_len=8, output_len=2)
    _, recs = run(path, pricer, policy="vanilla", frontend_s=0.25, **config)
    return [r.first_token_s for r in sorted(recs, key=lambda r: r.row)]


def test_requests_sent_together_share_a_pass_up_to_the_batch(tmp_path):
    """Three requests sent at 0 through a 0.25 s front end, each engine step 1 s: one at a
    time they reach the engine at 0.25, 0.5 and 0.75 (A's step 0.25-1.25, B's and C's the
    next); in passes of 2, A and B at 0.25 (one step), C at 0.5; with no limit (0) all three
    at 0.25."""
    one = _first_tokens(tmp_path, [0.0, 0.0, 0.0], ConstantPricer())
    assert one == [1.25, 2.25, 2.25]
    assert _first_tokens(tmp_path, [0.0, 0.0, 0.0], ConstantPricer(), frontend_batch=1) == one
    assert _first_tokens(tmp_path, [0.0, 0.0, 0.0], ConstantPricer(), frontend_batch=2) == [
        1.25,
        1.25,
        2.25,
    ]
    assert _first_tokens(tmp_path, [0.0, 0.0, 0.0], ConstantPricer(), frontend_batch=0) == [
        1.25,
        1.25,
        1.25,
    ]


def test_a_request_sent_during_a_pass_waits_for_the_next_one(tmp_path):
    """A is sent at 0 (its pass 0-0.25), B and C at 0.1: in passes they wait for the pass
    that starts when A's ends (0.25-0.5) and reach the engine together; as a latency (0)
    each reaches it 0.25 s after it was sent. Steps of 10 ms."""
    fast = ConstantPricer(0.01)
    passes = _first_tokens(tmp_path, [0.0, 0.1, 0.1], fast, frontend_batch=32)
    assert passes == pytest.approx([0.26, 0.51, 0.51])
    latency = _first_tokens(tmp_path, [0.0, 0.1, 0.1], fast, frontend_batch=0)
    assert latency == pytest.approx([0.26, 0.36, 0.36])


def test_the_batch_is_a_config_field_left_out_of_summaries_at_its_default():
    assert "frontend_batch" not in EngineConfig().to_dict()
    assert EngineConfig.of(frontend_batch=32).to_dict()["frontend_batch"] == 32
    for bad in (-1, 1.5, True):
        with pytest.raises(TwinError, match="--frontend-batch: must be a whole number >= 0"):
            EngineConfig.of(frontend_batch=bad)


def test_vllm_runs_take_their_front_end_in_passes_of_32_whatever_the_release():
    """vLLM's engine mode gives its front end the tokeniser's batch (VLLM_FRONTEND_BATCH)
    on every release, unless given; the other modes keep one request at a time."""
    h100 = load_profile("h100", "vllm")
    for engine in ("vllm", "vllm==0.19.0"):
        name, _, release = engine.partition("==")
        extra = {"engine_release": release} if release else {}
        config = build_config(profile=h100, engine=name, **extra)
        assert config.host_time.frontend_batch == VLLM_FRONTEND_BATCH == 32
        assert config.host_time.frontend_s == 0.01  # H100's fitted front end, in passes
    given = build_config(profile=h100, engine="vllm", frontend_batch=1)
    assert given.host_time.frontend_batch == 1
    for other in ("sglang", "trtllm"):
        assert (
            build_config(profile=load_profile("h100", other), engine=other).host_time.frontend_batch
            == 1
        )


def test_vllm_silicon_rows_run_with_the_modes_front_end(tmp_path):
    """A vLLM row of any release is simulated with its front end in passes of 32 (the
    mode's default reaches the scorer's run; the plan itself names no batch)."""
    from twin.validate.silicon.predict import plan_run

    source = "source_file=2026-04-06.csv; model=GPT-OSS-120B; silicon_concurrency=4"
    shape = {"isl": 1024, "osl": 1024, "concurrency": 4, "tp": 8}
    for release in ("0.15.1", "0.19.0"):
        row = silicon_row(source=source, system="b200_sxm", backend_version=release, **shape)
        plan = planned(row)
        assert "frontend_batch" not in plan.deployment
        run = plan_run(plan, tmp_path)
        assert run.config.host_time.frontend_batch == 32
