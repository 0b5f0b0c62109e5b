"""A fresh server's one cold-start stall (``EngineConfig.cold_prefix_stall_s``;
``twin.engine.batching.ContinuousBatching._cold_stall``): off by default, paid once a
server at its first step that extends a prompt after tokens already in its KV, before the
outputs of the step before (docs/decisions.md, "Issue 31, step: the cold start of
InferenceMAX's servers", helper ``cold-start`` session 27)."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_helpers import ConstantPricer, run, single_turns, write_rows

from twin.engine.config import ClusterConfig, EngineConfig, HostTimeConfig
from twin.errors import TwinError
from twin.presets import get_model
from twin.workloads.schema import WorkloadRow

STALL = 10.0


def _firsts(tmp_path, n, budget, stall=STALL, scheduler="continuous"):
    """First-token and completion times of ``n`` requests sent at 0 (6-token prompts, 2
    output tokens) on 1 s steps with a ``budget``-token step."""
    path = single_turns(tmp_path / "w.parquet", [0.0] * n, 6, output_len=2)
    _, recs = run(
        path,
        ConstantPricer(),
        policy="vanilla",
        scheduler=scheduler,
        max_batched_tokens=budget,
        max_running=8,
        cold_prefix_stall_s=stall,
    )
    return sorted(r.first_token_s for r in recs), sorted(r.completed_s for r in recs)


@pytest.mark.parametrize("scheduler", ["continuous", "sglang"])
def test_the_first_split_prompt_stalls_the_server_once_before_the_outputs_of_the_step_before(
    tmp_path, scheduler
):
    """An 8-token step, two 6-token prompts: step 1 runs A and 2 tokens of B, so B goes on
    after tokens already in its KV. The server stalls 10 s once, before it hands out step
    1's first token (its overlap loop launches step 2 first): A's first token at 11 s, not
    1 s; B's at 12 s (step 2), not 2 s."""
    firsts, _ = _firsts(tmp_path, 2, 8, scheduler=scheduler)
    assert firsts == [pytest.approx(11.0), pytest.approx(12.0)]
    warm, _ = _firsts(tmp_path, 2, 8, stall=0.0, scheduler=scheduler)
    assert warm == [pytest.approx(1.0), pytest.approx(2.0)]


def test_no_split_no_stall(tmp_path):
    """A 16-token step takes both 6-token prompts whole: no prompt goes on after a prefix,
    so the cold server never stalls (first tokens at 1 s, completions at 2 s)."""
    firsts, done = _firsts(tmp_path, 2, 16)
    assert firsts == [pytest.approx(1.0)] * 2
    assert done == [pytest.approx(2.0)] * 2


def test_the_stall_is_paid_once_a_server(tmp_path):
    """Four 6-token prompts on an 8-token step split three times (steps 1-3); only the
    first split stalls: the last first token comes at 10 + 4 steps (+ the decode steps
    the continuous loop mixes in), not 30 s later."""
    firsts, _ = _firsts(tmp_path, 4, 8)
    warm, _ = _firsts(tmp_path, 4, 8, stall=0.0)
    assert [a - b for a, b in zip(firsts, warm, strict=True)] == [pytest.approx(STALL)] * 4


def test_the_stall_is_off_by_default_and_refuses_bad_values():
    assert EngineConfig().host_time.cold_prefix_stall_s == 0.0
    assert "cold_prefix_stall_s" not in EngineConfig().to_dict()  # summaries unchanged
    on = EngineConfig(host_time=HostTimeConfig(cold_prefix_stall_s=70.0))
    assert on.to_dict()["cold_prefix_stall_s"] == 70.0
    for bad in (-1.0, float("nan"), float("inf"), True, "70"):
        with pytest.raises(TwinError, match="--cold-prefix-stall-s: must be a number"):
            EngineConfig(host_time=HostTimeConfig(cold_prefix_stall_s=bad))
    with pytest.raises(TwinError, match="--cold-prefix-stall-s: is modelled on an aggregated"):
        EngineConfig(
            cluster=ClusterConfig(tp=2, dp_attention=2),
            host_time=HostTimeConfig(cold_prefix_stall_s=70.0),
        )


@pytest.mark.parametrize(
    "layout",
    [{"pp": 2}, {"prefill_workers": 1, "decode_workers": 1, "replicas": 2}],
    ids=["pp", "disagg"],
)
def test_the_stall_is_refused_where_the_replica_is_not_one_step_loop(layout):
    """Pipeline stages and a disaggregated cluster run loops of their own, which would
    ignore the stall: refused, not dropped."""
    EngineConfig.of(**layout)  # the layout alone is valid
    with pytest.raises(TwinError, match="--cold-prefix-stall-s: is modelled on an aggregated"):
        EngineConfig.of(**layout, cold_prefix_stall_s=70.0)


def test_a_prefix_hit_stalls_the_step_that_admits_it(tmp_path):
    """A 64-token prompt at 0 s, the same prompt again at 5 s on a model whose cache keeps
    it (llama-3-8b, SGLang's radix cache): the second request extends its prompt after 63
    cached tokens, the first such step, so that step pays the 10 s stall (its first token
    at 16 s, not 6 s); the first request, from an empty cache, paid nothing."""
    tokens = np.arange(1, 65, dtype=np.int32)
    rows = [WorkloadRow(i, 0, a, None, tokens, False, None, 1) for i, a in enumerate([0.0, 5.0])]
    path = write_rows(tmp_path / "same.parquet", rows)
    for stall, second in ((STALL, 16.0), (0.0, 6.0)):
        _, recs = run(
            path,
            ConstantPricer(),
            "llama-3-8b",
            policy="sglang",
            pool_bytes=1000 * get_model("llama-3-8b").kv_bytes_per_token,
            max_batched_tokens=256,
            cold_prefix_stall_s=stall,
        )
        firsts = sorted(r.first_token_s for r in recs)
        assert firsts == [pytest.approx(1.0), pytest.approx(second)]
