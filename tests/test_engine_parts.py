"""Engine parts that had no test of their own (issue 17): the step pricer's affine fit and
its fallback, the prefix-aware router's load cap, occupancy thinning, Marconi's bootstrap
inside the engine, and tensor parallelism end to end."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from test_engine_helpers import LinearPricer, generated, run

from twin.costmodel.profile_store import load_profile
from twin.engine import SCHEDULERS, get_scheduler, make_pricer
from twin.engine.cost import CostModelPricer
from twin.engine.router import PrefixAware
from twin.errors import TwinError
from twin.metrics import Occupancy
from twin.presets import get_model
from twin.workloads.examples import example_path


# ----------------------------------------------------------------- the step pricer
def test_affine_decode_fit_agrees_with_the_exact_price_off_the_probe_points():
    # The datasheet roofline's decode price is affine in the context (memory-bound max);
    # measured profiles with soft-max forms take the exact fallback tested below.
    pricer = make_pricer(get_model("marconi-hybrid-7b"), load_profile("h100-datasheet"), 1)
    for batch in (1, 7, 64):
        fit = pricer.decode_affine(batch)
        assert fit is not None
        a, b = fit
        assert a > 0 and b > 0
        for per_seq in (3, 500, 5000, 60000):  # contexts between and beyond the probes
            context = per_seq * batch
            exact = pricer._exact((), batch, context)
            assert pricer.step_time((), batch, context) == pytest.approx(exact, rel=1e-6)
        run_s = pricer.decode_run(batch, 1000 * batch, 5)
        steps = [pricer._exact((), batch, 1000 * batch + i * batch) for i in range(5)]
        assert run_s == pytest.approx(steps, rel=1e-6)
    # A step with a prefill chunk is always priced exactly.
    exact = pricer._exact([(128, 0)], 4, 4000)
    assert pricer.step_time([(128, 0)], 4, 4000) == exact


class _SqrtDecodeModel:
    """A cost model whose decode price is not affine in the context (sqrt of each context)."""

    provenance = "test"

    def checkpoint_copy_s(self, n: int) -> float:
        return 0.0

    def step(self, prefills: list[tuple[int, int]], decodes: list[int]) -> float:
        return 1e-3 + sum(1e-4 * n for n, _ in prefills) + sum(1e-5 * math.sqrt(d) for d in decodes)

    def decode_steps_s(self, batch: int, contexts: list[int]) -> list[float]:
        """Each pure-decode step by ``step``, the context sum spread evenly (the contract)."""
        return [
            self.step([], [c // batch + 1] * (c % batch) + [c // batch] * (batch - c % batch))
            for c in contexts
        ]


def test_a_non_affine_decode_price_falls_back_to_exact_step_prices():
    pricer = CostModelPricer(_SqrtDecodeModel())
    assert pricer.decode_affine(4) is None
    steps = pricer.decode_run(4, 4000, 6)
    exact = [_SqrtDecodeModel().step([], [1000 + i] * 4) for i in range(6)]
    assert steps == pytest.approx(exact, rel=1e-12)
    assert pricer.step_time((), 4, 4002) == pytest.approx(
        _SqrtDecodeModel().step([], [1001, 1001, 1000, 1000]), rel=1e-12
    )


# ----------------------------------------------------------------- the prefix-aware router
def _replica(index: int, load: int, hit: int) -> SimpleNamespace:
    return SimpleNamespace(
        index=index, outstanding_tokens=load, cache=SimpleNamespace(peek=lambda prompt: hit)
    )


def test_prefix_aware_skips_a_replica_over_the_load_cap_however_long_its_hit():
    prompt = np.arange(10, dtype=np.int32)
    router = PrefixAware(load_cap=2.0, slack_tokens=100)
    # Mean load 10,000: the limit is 2 x 10,000 + 100 = 20,100.
    over = [_replica(0, 28_000, 10), _replica(1, 1_000, 3), _replica(2, 1_000, 0)]
    assert router.route(0, prompt, over) == 1  # the best hit among those under the cap
    under = [_replica(0, 20_000, 10), _replica(1, 5_000, 3), _replica(2, 5_000, 0)]
    assert router.route(0, prompt, under) == 0  # at the cap is still eligible
    # Equal hits go to the less loaded replica.
    tie = [_replica(0, 900, 5), _replica(1, 300, 5), _replica(2, 600, 5)]
    assert router.route(0, prompt, tie) == 1


# ----------------------------------------------------------------- occupancy thinning
def test_occupancy_halves_its_samples_and_doubles_the_interval_past_the_cap():
    occ = Occupancy(replicas=2, interval_s=1.0, max_samples=4)
    for i in range(5):
        occ.add(float(i), [10 * i, 20 * i], [i, 2 * i])
    d = occ.to_dict()
    assert d["interval_s"] == 2.0
    assert d["t_s"] == [0.0, 2.0, 4.0]
    assert d["kv_bytes"] == [[0, 20, 40], [0, 40, 80]]
    assert d["ssm_bytes"] == [[0, 2, 4], [0, 4, 8]]
    for i in range(5, 7):
        occ.add(float(i), [10 * i, 20 * i], [i, 2 * i])
    assert len(occ.t) <= 4 and occ.t[0] == 0.0


def test_an_engine_run_keeps_at_most_twice_its_sample_target():
    summary, _ = run(example_path("chat"), LinearPricer(), cache_bytes=300_000, samples=10)
    occ = summary["cache_occupancy"]
    assert 2 <= len(occ["t_s"]) <= 20
    assert all(len(x) == len(occ["t_s"]) for x in occ["kv_bytes"])


# ----------------------------------------------------------------- Marconi inside the engine
def test_marconi_bootstraps_its_alpha_inside_the_engine(tmp_path):
    path = generated(tmp_path / "w.parquet", "chat", sessions=60, rate=4.0)
    summary, _ = run(
        path, LinearPricer(), "tiny-hybrid", policy="marconi", cache_bytes=150_000, max_running=8
    )
    stats = summary["replicas"][0]["policy"]
    assert summary["replicas"][0]["cache"]["evictions"] > 0
    boot = stats["bootstrap"]
    assert boot["completed"] and stats["alpha_source"] == "tuned"
    assert stats["alpha"] in [float(a) for a in boot["grid"]]
    assert boot["window_requests"] >= 1 and len(boot["grid"]) == 21


# ----------------------------------------------------------------- tensor parallelism
def test_tp_2_end_to_end_prices_faster_prefills_and_reports_its_degree(tmp_path):
    path = generated(tmp_path / "w.parquet", "chat", sessions=6, rate=0.05)
    model = get_model("marconi-hybrid-7b")
    prof = load_profile("h100")
    common = {"cache_bytes": int(20e9), "gpu_memory_bytes": 80e9, "policy": "vanilla"}
    one, _ = run(path, make_pricer(model, prof, 1), model, tp=1, **common)
    two, _ = run(path, make_pricer(model, prof, 2), model, tp=2, **common)
    assert one["config"]["tp"] == 1 and two["config"]["tp"] == 2
    assert one["requests"]["measured"] == two["requests"]["measured"] > 0
    # Quiet traffic: no queueing, so each prefill is its own step, faster on two GPUs.
    assert two["prefill_s"]["p50"] < one["prefill_s"]["p50"]
    assert two["memory_budget_bytes"] > one["memory_budget_bytes"]


def test_schedulers_are_found_by_name():
    assert "continuous" in SCHEDULERS and get_scheduler("continuous") is SCHEDULERS["continuous"]
    with pytest.raises(TwinError, match="valid schedulers: continuous"):
        get_scheduler("fifo")
