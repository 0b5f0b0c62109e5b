"""Inter-token latency (issue 30): the histogram's accuracy, and the engine's gaps against
every request's token times rebuilt step by step."""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_engine_helpers import LinearPricer, generated, run, single_turns, write_rows

from twin.engine import EngineConfig, PricerBase, batching, sim
from twin.engine.batching import ContinuousBatching
from twin.engine.cluster import Cluster
from twin.engine.config import CacheConfig, ClusterConfig, MemoryConfig
from twin.engine.cost import Chunk
from twin.engine.step_gaps import StepGaps
from twin.metrics import RequestRecord
from twin.presets import get_model
from twin.summary import PERCENTILES
from twin.token_gaps import NBINS, REL_ERROR, TokenGaps, bin_of
from twin.workloads.reader import Workload
from twin.workloads.schema import WorkloadRow

KEYS = [f"p{p}" for p in PERCENTILES]


def _close(got: dict[str, Any], gaps: np.ndarray) -> None:
    """``got`` (a summary's latency dict) reads ``gaps``: the mean exactly, each percentile
    within the histogram's bound of ``np.percentile``'s."""
    assert got["mean"] == pytest.approx(gaps.mean(), rel=1e-9)
    exact = np.percentile(gaps, PERCENTILES)
    for key, want in zip(KEYS, exact, strict=True):
        assert abs(got[key] - want) <= (REL_ERROR + 1e-9) * want, (key, got[key], want)


# ---------------------------------------------------------------------- the histogram
@pytest.mark.parametrize("seed", range(6))
def test_percentiles_are_within_the_bound_of_the_exact_ones(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    x = rng.lognormal(math.log(5e-3), float(rng.uniform(0.01, 3.0)), n)
    if seed % 2:  # steps repeat: few distinct durations, many gaps each
        x = rng.choice(x[:7], n)
    w = rng.integers(1, 64, n)
    h = TokenGaps()
    h.add_many(x[: n // 2], w[: n // 2])
    for v, c in zip(x[n // 2 :], w[n // 2 :], strict=True):
        h.add(float(v), int(c))
    gaps = np.repeat(x, w)
    _close(h.stats(), gaps)
    assert h.n == len(gaps)
    # The bound is tight to within a bin: the worst error seen stays under it.
    assert REL_ERROR < 0.005


def test_every_value_reads_back_within_the_bound():
    x = np.geomspace(2.0**-24, 2.0**16, 200_001)[:-1]
    h = TokenGaps()
    for lo in range(0, len(x), 20_000):
        part = x[lo : lo + 20_000]
        mids = []
        for v in part[::997]:
            one = TokenGaps()
            one.add(float(v))
            mids.append(one.percentile(50))
        assert np.all(np.abs(np.array(mids) / part[::997] - 1) <= REL_ERROR)
        h.add_many(part)
    assert h.n == len(x)


def test_bins_agree_between_one_value_and_many():
    rng = np.random.default_rng(3)
    special = [0.0, -1.0, -math.inf, 1e-30, 1e30, 2.0**-24, 2.0**16, math.inf, math.nan]
    x = np.concatenate([rng.lognormal(-5, 6, 20_000), special])
    h = TokenGaps()
    h.add_many(x)
    want = np.bincount([bin_of(float(v)) for v in x], minlength=NBINS)
    assert np.array_equal(h.counts, want)


def test_empty_merge_and_weights():
    empty = TokenGaps().stats()
    assert empty == {"mean": None, **dict.fromkeys(KEYS)}
    a, b = TokenGaps(), TokenGaps()
    a.add_many(np.array([0.01, 0.02]), 3)
    a.add(0.5, 0)  # no gap
    b.add_many(np.array([0.03]), np.array([2]))
    whole = TokenGaps.merged([a, b])
    assert (whole.n, a.n, b.n) == (8, 6, 2)
    assert whole.stats()["mean"] == pytest.approx((0.03 * 3 + 0.06) / 8)
    _close(whole.stats(), np.array([0.01] * 3 + [0.02] * 3 + [0.03] * 2))


def test_step_gaps_bin_runs_steps_and_closed_forms_alike():
    """Runs and steps recorded as a scheduler does, against their durations one by one."""
    rng = np.random.default_rng(5)
    log = StepGaps(run_steps=48, slots=3)  # binned every few records
    gaps: list[np.ndarray] = []
    for _ in range(300):
        kind, batch, extra = int(rng.integers(3)), int(rng.integers(1, 9)), 0.0
        if rng.random() < 0.3:
            extra = float(rng.uniform(0, 1e-3))
        m = int(rng.integers(1, 49))
        if kind == 0:
            d = rng.uniform(1e-3, 2e-2, 1)
            log.step(float(d[0]) + extra, batch)
        elif kind == 1:
            d = rng.uniform(1e-3, 2e-2, m)
            log.buffer()[:m] = np.cumsum(d)
            log.run(m, batch, extra)
        else:
            alpha, beta = float(rng.uniform(1e-3, 1e-2)), float(rng.uniform(0, 1e-4))
            d = alpha + beta * np.arange(m)
            log.affine(alpha, beta, m, batch, extra)
        d = d.copy()
        d[-1] += extra
        gaps.append(np.repeat(d, batch))
    all_gaps = np.concatenate(gaps)
    h = log.histogram()  # pending steps included, nothing flushed
    assert h.n == len(all_gaps)
    _close(h.stats(), all_gaps)
    log.flush()
    assert np.array_equal(log.hist.counts, h.counts) and log.hist.n == h.n
    assert log.histogram().stats() == h.stats()


# ---------------------------------------------------------------------- the engine
class _TwoPhase(PricerBase):
    """A step with a prefill chunk takes 0.5 s, a pure decode step 0.1 s."""

    def __init__(self, affine: bool) -> None:
        self.affine = affine

    def step_time(self, prefills: Sequence[Chunk], decode_batch: int, decode_context: int) -> float:
        return 0.5 if prefills else 0.1

    def decode_affine(self, batch: int) -> tuple[float, float] | None:
        return (0.1, 0.0) if self.affine else None


@pytest.fixture(scope="module")
def two_requests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prompt = np.arange(100, 108, dtype=np.int32)
    rows = [
        WorkloadRow(0, 0, 0.0, None, prompt, False, None, 5),
        WorkloadRow(1, 0, 0.65, None, prompt + 50, False, None, 3),
    ]
    return write_rows(tmp_path_factory.mktemp("w") / "two.parquet", rows)


# By hand. A: prefill 0-0.5 (first token), decodes 0.6, 0.7, cut there by B's arrival at
# 0.65; the step 0.7-1.2 prefills B while A decodes (its token at 1.2, B's first); then
# 1.2-1.3 both (A's last), 1.3-1.4 B's last. A's gaps 0.1, 0.1, 0.5, 0.1; B's 0.1, 0.1.
@pytest.mark.parametrize(
    ("warmup", "gaps"),
    [
        (0.0, [0.1, 0.1, 0.5, 0.1, 0.1, 0.1]),
        (0.55, [0.1, 0.5, 0.1, 0.1, 0.1]),  # the decode run 0.5-0.7 straddles the warm-up
        (0.7, [0.5, 0.1, 0.1, 0.1]),  # a step starting at the warm-up's end counts
        (1.25, [0.1]),
        (2.0, []),
    ],
)
@pytest.mark.parametrize("affine", [True, False])
def test_a_hand_computed_schedule(two_requests, warmup, gaps, affine):
    summary, records = run(two_requests, _TwoPhase(affine), policy="vanilla", warmup_s=warmup)
    by_row = {r.row: r for r in records}
    assert by_row[0].first_token_s == pytest.approx(0.5)
    assert by_row[0].completed_s == pytest.approx(1.3)
    assert by_row[1].first_token_s == pytest.approx(1.2)
    assert by_row[1].completed_s == pytest.approx(1.4)
    if not gaps:
        assert summary["itl_s"] == {"mean": None, **dict.fromkeys(KEYS)}
        return
    _close(summary["itl_s"], np.array(gaps))


def _replica_stamps(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[float]]:
    """Fast-forwarding off (every decode run one step), and each replica's scheduler's
    resumption times recorded: with no checkpoint copies, the ends of its steps (and the
    starts of idle periods, when nothing decodes)."""
    monkeypatch.setattr(batching, "MIN_RUN_STEPS", 1)
    monkeypatch.setattr(batching, "MAX_RUN_STEPS", 1)
    stamps: dict[int, list[float]] = {}
    loop = ContinuousBatching.run

    def watched(self: ContinuousBatching) -> Generator[Any, Any, None]:
        times = stamps.setdefault(self.replica.index, [])  # type: ignore[attr-defined]
        inner = loop(self)
        event, stamp = next(inner), True
        while True:
            if stamp:
                times.append(self.env.now)
            try:
                value = yield event
            except sim.Interrupt as cut:
                # An arrival cut a decode run: the loop moves its wait, no step ended.
                event, stamp = inner.throw(cut), False
            else:
                event, stamp = inner.send(value), True

    monkeypatch.setattr(ContinuousBatching, "run", watched)
    return stamps


def _oracle(records: list[RequestRecord], stamps: dict[int, list[float]], warmup: float):
    """Every gap between consecutive tokens of every request, of steps starting at or after
    ``warmup``: a request decoding gets a token at every step its replica ends between its
    first token and its completion (no preemption in a dedicated cache)."""
    gaps = []
    ends = {k: np.unique(v) for k, v in stamps.items()}
    for r in records:
        t = ends[r.replica]
        inside = t[(t > r.first_token_s) & (t <= r.completed_s)]
        tokens = np.concatenate(([r.first_token_s], inside))
        assert len(tokens) == r.output_tokens  # the oracle finds every token
        d = np.diff(tokens)
        gaps.append(d[tokens[:-1] >= warmup])  # a gap's step starts at the previous token
    return np.concatenate(gaps)


@pytest.fixture(scope="module")
def busy_chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Chat sessions close together: batches of several, arrivals cutting decode runs."""
    return generated(tmp_path_factory.mktemp("w") / "chat.parquet", "chat", 30, 40.0)


def _merged_gaps(path: Path, pricer: PricerBase, **config: Any) -> TokenGaps:
    cluster = Cluster(
        get_model("tiny-hybrid"), pricer, EngineConfig.of(**config), Workload.open(path)
    )
    return TokenGaps.merged(cluster.run().token_gaps)


def _slow_steps(affine: bool = False) -> LinearPricer:
    """20 ms steps and more a sequence: decode batches of up to 15 on ``busy_chat``."""
    return LinearPricer(base=0.02, per_seq=1e-3, affine=affine)


@pytest.mark.parametrize("warmup", [0.0, 50.0])
def test_the_engine_reads_every_token_gap(busy_chat, monkeypatch, warmup):
    """Fast-forwarded runs (closed form and priced) against the same schedule run step by
    step, every request's token times rebuilt from its replica's step ends."""
    config: dict[str, Any] = {"policy": "vanilla", "replicas": 2, "warmup_s": warmup}
    fast = {}
    for affine in (True, False):
        summary, records = run(busy_chat, _slow_steps(affine), **config)
        fast[affine] = (summary, records, _merged_gaps(busy_chat, _slow_steps(affine), **config))
    with monkeypatch.context() as patch:
        stamps = _replica_stamps(patch)
        slow_summary, slow = run(busy_chat, _slow_steps(), **config)
    gaps = _oracle(slow, stamps, warmup)
    assert len(gaps) > 500 and len(np.unique(np.round(gaps, 9))) > 20
    _close(slow_summary["itl_s"], gaps)
    for summary, records, counted in fast.values():
        # The same schedule, up to rounding.
        done = {r.row: r.completed_s for r in records}
        assert [done[r.row] for r in slow] == pytest.approx([r.completed_s for r in slow])
        assert counted.n == len(gaps)
        _close(summary["itl_s"], gaps)
    if warmup:
        assert _merged_gaps(busy_chat, _slow_steps(), policy="vanilla", replicas=2).n > len(gaps)


@pytest.mark.parametrize("affine", [True, False])
def test_a_lone_requests_tpot_is_its_mean_gap(tmp_path, affine):
    """Checkpoint copies after its last step lengthen its last gap, as its TPOT counts."""
    path = single_turns(tmp_path / "w.parquet", [0.0], prompt_len=64, output_len=300)
    pricer = LinearPricer(copy_s=0.01, affine=affine)
    summary, (rec,) = run(path, pricer, policy="marconi", cache_bytes=10**9)
    assert rec.checkpoints >= 1
    assert summary["itl_s"]["mean"] == pytest.approx(rec.tpot_s, rel=1e-12)
    assert summary["itl_s"]["mean"] == pytest.approx(summary["tpot_s"]["mean"], rel=1e-6)


@pytest.mark.parametrize("affine", [True, False])
def test_the_gaps_add_up_to_every_requests_decode_time(busy_chat, affine):
    """Without preemption each request's gaps span its first token to its completion, so
    the mean gap is their total over the gaps' count, checkpoint copies included (the
    state after a request's last token, copied after a mixed step or a decode run)."""
    pricer = LinearPricer(base=0.02, per_seq=1e-3, copy_s=0.005, affine=affine)
    summary, records = run(busy_chat, pricer, policy="marconi", replicas=2, cache_bytes=10**9)
    assert all(r.checkpoints for r in records)  # the state after the last token, at least
    decode_s = sum(r.completed_s - r.first_token_s for r in records)
    count = sum(r.output_tokens - 1 for r in records)
    assert summary["itl_s"]["mean"] == pytest.approx(decode_s / count, rel=1e-9)


def test_a_preempted_sequences_wait_is_no_gap(busy_chat):
    """With preemptions (a small shared pool) each one costs its victim the gap from its
    last token to the one its recompute emits (not modelled); the other gaps all count."""
    spec = get_model("tiny-hybrid")
    config = EngineConfig(
        cluster=ClusterConfig(replicas=2),
        memory=MemoryConfig(shared_pool=True, gpu_memory_bytes=(spec.weight_bytes + 400_000) / 0.9),
        cache=CacheConfig(policy="vanilla"),
    )
    records: list[RequestRecord] = []
    cluster = Cluster(spec, _slow_steps(), config, Workload.open(busy_chat), records.append)
    counted = TokenGaps.merged(cluster.run().token_gaps)
    served = [r for r in records if not r.rejected]
    preemptions = sum(r.preemptions for r in served)
    assert preemptions > 10
    lost = sum(r.output_tokens - 1 for r in served) - counted.n
    assert 0 < lost <= preemptions
    assert counted.total_s < sum(r.completed_s - r.first_token_s for r in served)
