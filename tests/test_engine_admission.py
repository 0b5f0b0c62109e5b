"""SGLang's new_token_ratio admission control (issue 14): room kept for running requests'
future tokens, so the sglang mode retracts less than admission by memory alone."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_helpers import LinearPricer, run, write_rows

from twin.engine.admission import DEFAULTS, NewTokenRatio
from twin.engine.modes import get_mode
from twin.errors import TwinError
from twin.presets import get_model
from twin.workloads.schema import WorkloadRow


def test_the_ratio_follows_sglangs_defaults_decay_and_retraction_estimate():
    r = NewTokenRatio.from_options({})
    # SGLang environ.py: 0.7 x conservativeness 1, floor 0.7 x 0.14, 600 steps between them.
    assert r.ratio == r.init == pytest.approx(0.7)
    assert r.min == pytest.approx(0.098)
    assert r.decay == pytest.approx((0.7 - 0.098) / 600)
    r.decayed(300)
    assert r.ratio == pytest.approx(0.7 - 300 * (0.7 - 0.098) / 600)
    r.decayed(10_000)
    assert r.ratio == pytest.approx(0.098)  # never below the floor
    # retract_decode: (decoded + 20 x kept) / (sum max_new + 1), at most 1.
    r.retracted([(10, 100), (30, 200)])
    assert r.ratio == pytest.approx((40 + 2 * 20) / 301)
    r.retracted([(90, 100)])
    assert r.ratio == 1.0
    # Reservations: the remaining outputs, clipped at 4096, times the ratio.
    r.ratio = 0.5
    assert r.reserved([10, 5000]) == pytest.approx(0.5 * (10 + 4096))
    assert r.candidate(extend=100, max_new=9000) == 100 + 4096 + 1
    # schedule_conservativeness scales the start; the start is at most 1.
    assert NewTokenRatio.from_options({"schedule_conservativeness": 2.0}).init == 1.0
    zero = NewTokenRatio.from_options({"schedule_conservativeness": 0.0})
    assert zero.init == zero.min == zero.decay == 0.0


def test_the_sglang_mode_sets_the_ratio_by_sglangs_names_and_the_others_do_not():
    model = get_model("tiny-hybrid")
    sg = get_mode("sglang").settings(
        model, {"schedule_conservativeness": "0.5", "sglang-new-token-ratio-decay-steps": "100"}
    )
    assert sg["new_token_ratio"] == {
        **DEFAULTS,
        "schedule_conservativeness": 0.5,
        "sglang_new_token_ratio_decay_steps": 100,
    }
    assert get_mode("sglang").settings(model, {})["new_token_ratio"] == DEFAULTS
    assert "new_token_ratio" not in get_mode("vllm").settings(model, {})
    assert get_mode("sglang").settings(model, {"schedule_conservativeness": "0"})[
        "new_token_ratio"
    ]["schedule_conservativeness"] == (0.0)
    for bad in ("-1", "x"):
        with pytest.raises(TwinError, match="schedule_conservativeness"):
            get_mode("sglang").settings(model, {"schedule_conservativeness": bad})


def _overload(tmp_path):
    """Long outputs arriving together: prompts fit, outputs outgrow the pool."""
    rng = np.random.default_rng(3)
    rows = [
        WorkloadRow(
            i,
            0,
            0.002 * i,
            None,
            rng.integers(0, 30000, int(rng.integers(100, 400)), dtype=np.int32),
            False,
            None,
            int(rng.integers(100, 500)),
        )
        for i in range(40)
    ]
    return write_rows(tmp_path / "w.parquet", rows), rows


def _retracting(path, model, ratio: dict) -> tuple[dict, list]:
    """The overload trace on a shared pool of 9,000 tokens with SGLang's retraction."""
    return run(
        path,
        LinearPricer(),
        model,
        policy="vanilla",
        shared_pool=True,
        preemption="retract",
        new_token_ratio=ratio,
        gpu_memory_bytes=(model.weight_bytes + 9000 * model.kv_bytes_per_token) / 0.9,
    )


@pytest.mark.parametrize("model_name", ["tiny-hybrid", "tiny-transformer"])
def test_the_ratio_retracts_less_than_admission_by_memory_and_each_request_completes_once(
    tmp_path, model_name
):
    model = get_model(model_name)
    path, rows = _overload(tmp_path)
    results = {}
    for ratio in (False, True):
        summary, recs = _retracting(path, model, dict(DEFAULTS) if ratio else {})
        # Each request exactly once, with its whole output.
        assert sorted(r.row for r in recs) == list(range(len(rows)))
        assert [r.output_tokens for r in sorted(recs, key=lambda r: r.row)] == [
            row.output_len for row in rows
        ]
        results[ratio] = summary["preemption"]["preemptions"]
    assert results[False] > 0  # the trace does overload memory-only admission
    assert results[True] < results[False]


def test_a_ratio_held_at_one_never_retracts_when_outputs_are_known(tmp_path):
    """With the ratio held at 1 (start clipped to 1, floor factor 1: no decay) every running
    request's whole remaining output is kept free: retraction is never needed."""
    path, _ = _overload(tmp_path)
    held = {**DEFAULTS, "schedule_conservativeness": 1e3, "sglang_min_new_token_ratio_factor": 1}
    assert NewTokenRatio.from_options(held).decay == 0.0
    summary, _ = _retracting(path, get_model("tiny-transformer"), held)
    assert summary["preemption"]["preemptions"] == 0
