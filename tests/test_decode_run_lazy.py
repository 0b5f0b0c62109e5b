"""A decode run priced a chunk at a time times its steps as one priced whole (issue 16).

The engine prices a run's steps lazily (an arrival cuts many runs short); the
step ends must equal ``np.cumsum`` of every step's price to the bit, whatever
the chunks, and a timeout set mid-run must fire at the time one set at the
run's start would have.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_engine_helpers import generated

from twin.calibration import load_profile
from twin.engine import EngineConfig, decode_run, make_pricer, sim, simulate
from twin.engine.config import ClusterConfig, MemoryConfig
from twin.engine.decode_run import FIRST_CHUNK_STEPS, DecodeRun
from twin.presets import get_model
from twin.workloads.reader import Workload

RNG = np.random.default_rng(16)


def test_lazy_ends_equal_the_cumulative_sum_of_every_step() -> None:
    for _ in range(50):
        k = int(RNG.integers(1, 700))
        prices = RNG.uniform(1e-4, 5e-2, k)
        asked: list[tuple[int, int]] = []

        def price(
            first: int, n: int, prices: np.ndarray = prices, asked: list = asked
        ) -> list[float]:
            asked.append((first, n))
            return prices[first : first + n].tolist()

        run = DecodeRun(k, price=price)
        whole = np.cumsum(prices)
        end = run.price_next()
        assert run.priced == min(k, FIRST_CHUNK_STEPS) and end == whole[run.priced - 1]
        while run.priced < k:
            run.price_next()
        assert run.ends is not None and run.ends.tolist() == whole.tolist()
        assert sum(n for _, n in asked) == k  # each step priced once
        for elapsed in [*RNG.uniform(0, whole[-1], 20).tolist(), 0.0, float(whole[3 % k])]:
            want = min(max(int(np.searchsorted(whole, elapsed, side="left")) + 1, 1), k)
            assert run.steps_to_reach(elapsed) == want


def test_a_cut_short_run_prices_only_its_first_chunks() -> None:
    run = DecodeRun(4096, price=lambda first, n: [1.0] * n)
    run.price_next()
    assert run.priced == FIRST_CHUNK_STEPS
    assert run.steps_to_reach(10.5) == 11  # the step in flight at 10.5 s ends at 11 s


def test_a_timeout_set_mid_run_fires_exactly_at_its_target() -> None:
    for _ in range(300):
        t0 = float(RNG.uniform(0, 10.0 ** RNG.integers(-3, 6)))
        ends = np.cumsum(RNG.uniform(1e-5, 1e-1, 8)).tolist()
        env = sim.Environment(initial_time=t0)
        env.run(until=env.timeout(ends[2]))  # a chunk's end: the time its timer fired
        at = t0 + ends[-1]  # where a timeout set at t0 for the whole run would fire
        env.run(until=env.process(sim.wait_until(env, at)))
        assert env.now == at


def test_a_simulation_with_lazy_pricing_equals_one_priced_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plain path (every run priced whole at its start) as the oracle, to the byte; and
    the Python path (no compiled decode runs or steps, ``twin.costmodel.compiled``)."""
    path = generated(tmp_path / "chat.parquet", "chat", 40, 4.0)
    model, profile = get_model("marconi-hybrid-7b"), load_profile("h100")
    config = EngineConfig(
        cluster=ClusterConfig(replicas=2, router="session-affinity"),
        memory=MemoryConfig(gpu_memory_bytes=profile.peaks["mem_bytes"], cache_bytes=int(30e9)),
    )
    out = {}
    for label, first in (("lazy", FIRST_CHUNK_STEPS), ("whole", 1 << 30), ("python", 64)):
        monkeypatch.setattr(decode_run, "FIRST_CHUNK_STEPS", first)
        pricer = make_pricer(model, profile, config.cluster.tp)  # fresh: nothing remembered
        if label == "python":
            monkeypatch.setattr(pricer, "decode_ends", lambda batch, context: None)
            monkeypatch.setattr(pricer.cost_model, "_step_kernel", None)
        simulate(Workload.open(path), model, pricer, config, tmp_path / label)
        out[label] = (tmp_path / label / "requests.parquet").read_bytes()
    assert out["lazy"] == out["whole"] == out["python"]
