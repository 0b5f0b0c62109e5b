"""SGLang's new_token_ratio admission control (issue 14): room kept for running requests'
future tokens, so the sglang mode retracts less than admission by memory alone."""

from __future__ import annotations

import numpy as np
import pytest
from test_engine_helpers import LinearPricer, run, write_rows

from twin.engine.admission import DEFAULTS, NewTokenRatio
from twin.engine.batching import ContinuousBatching
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
        preemption="retract",
        new_token_ratio=ratio,
        pool_bytes=9000 * model.kv_bytes_per_token,
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


def _waves(tmp_path, pool_tokens: int, monkeypatch=None) -> tuple[dict, list, list[int]]:
    """8 closed-loop clients, 64 requests of 128 prompt + 64 output tokens, SGLang's mode
    on a shared pool of ``pool_tokens``; the cached bytes at each retraction."""
    model = get_model("tiny-transformer")
    rng = np.random.default_rng(0)
    rows = [
        WorkloadRow(i, 0, 0.0, None, rng.integers(0, 30000, 128, dtype=np.int32), False, None, 64)
        for i in range(64)
    ]
    path = write_rows(tmp_path / "waves.parquet", rows)
    cached_at_retraction: list[int] = []
    if monkeypatch is not None:
        preempt = ContinuousBatching._preempt_one

        def watched(self):
            cached_at_retraction.append(self.memory.pool.cache.used_bytes)
            preempt(self)

        monkeypatch.setattr(ContinuousBatching, "_preempt_one", watched)
    summary, recs = run(
        path,
        LinearPricer(),
        model,
        concurrency=8,
        max_batched_tokens=256,
        pool_bytes=pool_tokens * model.kv_bytes_per_token,
        **get_mode("sglang").settings(model, {}),
    )
    return summary, recs, cached_at_retraction


def test_a_decode_run_evicts_cached_pages_before_it_retracts(tmp_path, monkeypatch):
    """Issue 31's retraction storm, small: a pool 1% short of 8 whole requests, so each
    wave of 8 ends in one retraction. A decode run needing more than the free and cached
    pages together used to be cut to the free pages alone and then retract, every step,
    while completed requests' cached pages could have been evicted (SGLang's
    ``check_decode_mem`` evicts from the radix tree first): 31 retractions, 25 requests
    retracted, the victims readmitted and retracted again. Now a retraction happens only
    once nothing cached is left, at most once a wave."""
    summary, recs, cached = _waves(tmp_path, 1520, monkeypatch)
    assert sorted(r.row for r in recs) == list(range(64))
    assert all(r.output_tokens == 64 for r in recs)
    retractions = summary["preemption"]["preemptions"]
    assert 0 < retractions <= 64 // 8
    assert cached == [0] * retractions  # nothing cached was left to evict
    # The run ends within 10% of a pool that never retracts (it was 14% later).
    roomy, _, _ = _waves(tmp_path, 3000)
    assert roomy["preemption"]["preemptions"] == 0
    assert max(r.completed_s for r in recs) < 1.1 * roomy["sim_end_s"]


def test_a_retracted_request_waits_behind_the_queue_and_a_preempted_one_goes_first(
    tmp_path, monkeypatch
):
    """SGLang 0.5.10.post1 appends a retracted request to the waiting queue
    (``_add_request_to_queue``; ``fcfs`` does not re-sort it); vLLM prepends its victim
    (``prepend_request``). On the overload trace with a low ratio (so it retracts while
    requests wait), every request waiting at a retraction is admitted before the victim
    comes back under ``retract``; under ``recompute`` the victim is admitted first."""
    path, _ = _overload(tmp_path)
    model = get_model("tiny-transformer")
    preempt, admit = ContinuousBatching._preempt_one, ContinuousBatching._admit_head
    events: list[tuple[str, object, list]] = []

    def watched_preempt(self):
        before = set(map(id, self.waiting))
        preempt(self)
        victim = next(s for s in self.waiting if id(s) not in before)
        events.append(("retract", victim, [s for s in self.waiting if s is not victim]))

    def watched_admit(self):
        events.append(("admit", self.waiting[0], []))
        return admit(self)

    monkeypatch.setattr(ContinuousBatching, "_preempt_one", watched_preempt)
    monkeypatch.setattr(ContinuousBatching, "_admit_head", watched_admit)
    for preemption in ("retract", "recompute"):
        events.clear()
        run(
            path,
            LinearPricer(),
            model,
            policy="vanilla",
            preemption=preemption,
            new_token_ratio={**DEFAULTS, "schedule_conservativeness": 0.1},
            pool_bytes=9000 * model.kv_bytes_per_token,
        )
        checked = 0
        for i, (kind, victim, queued) in enumerate(events):
            if kind != "retract" or not queued:
                continue
            admitted = [s for k, s, _ in events[i + 1 :] if k == "admit"]
            back = admitted.index(victim)
            ahead = set(map(id, admitted[:back]))
            if preemption == "retract":
                assert all(id(s) in ahead for s in queued)
            else:
                assert not any(id(s) in ahead for s in queued)
            checked += 1
        assert checked > 0  # the trace does retract while requests wait
