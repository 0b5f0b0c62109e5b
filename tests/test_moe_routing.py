"""The routing rules of the fused-MoE price (``twin.costmodel.routing``)."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from twin.costmodel import routing as rt
from twin.costmodel.routing import ROUTINGS, PowerLaw, Zipf


def test_uniform_is_the_expected_distinct_experts_of_independent_draws() -> None:
    # 32 tokens x top 8 = 256 draws over 256 experts: 256 (1 - (255/256)^256) = 162.0
    load = ROUTINGS["uniform"].rank_load(32, 256, 8, 1)
    assert load.rows == 256
    assert load.active == pytest.approx(162.007, abs=0.001)
    ep8 = ROUTINGS["uniform"].rank_load(32, 256, 8, 8)
    assert ep8.rows == 32 and ep8.active == pytest.approx(162.007 / 8, abs=0.001)


def test_balanced_reaches_every_expert_its_rows_can() -> None:
    b = ROUTINGS["balanced"]
    assert b.rank_load(2, 256, 8, 1).active == 16  # fewer rows than experts: one each
    assert b.rank_load(32, 256, 8, 1).active == 256
    assert b.rank_load(32, 256, 8, 8).active == 32 and b.rank_load(32, 256, 8, 8).rows == 32


@pytest.mark.parametrize("alpha", [1.01, 1.2])
def test_power_law_loads_the_busiest_rank_and_reaches_fewer_experts(alpha: float) -> None:
    pl = PowerLaw(alpha)
    for t in (16, 64, 1024):
        mean_rows = t * 8 / 8
        load = pl.rank_load(t, 256, 8, 8)
        # the rank the launch waits for holds more than the mean rank's rows ...
        assert load.rows > 1.1 * mean_rows
        # ... over fewer of its 32 experts than the same rows spread evenly would reach
        assert 0 < load.active < min(32, load.rows)
    # one rank: every row on it, the skew only concentrates them on fewer experts
    whole = pl.rank_load(64, 256, 8, 1)
    assert whole.rows == pytest.approx(512)
    assert whole.active < ROUTINGS["uniform"].rank_load(64, 256, 8, 1).active


def test_power_law_is_the_same_for_the_same_inputs() -> None:
    pl = PowerLaw(1.2)
    a = pl.rank_load(200, 128, 8, 4)
    rt._power_law_rank.cache_clear()
    assert pl.rank_load(200, 128, 8, 4) == a
    # between two grid points the load is interpolated, so a step's price is smooth
    lo, mid, hi = (pl.rank_load(t, 128, 8, 1).active for t in (181, 190, 197))
    assert min(lo, hi) <= mid <= max(lo, hi)


@pytest.mark.parametrize(
    "shape", [(32, 256, 8, 1), (32, 256, 8, 8), (7, 128, 4, 2), (3, 384, 8, 4)]
)
def test_zipf_at_exponent_zero_is_uniform_to_the_bit(shape: tuple[int, int, int, int]) -> None:
    assert Zipf(0.0).rank_load(*shape) == ROUTINGS["uniform"].rank_load(*shape)


def test_zipf_one_rank_reaches_fewer_experts_the_more_skewed() -> None:
    # one rank: all 256 rows on it; 1 - (1 - p_r)^256 summed over ranks r of p_r ~ r^-s
    reached = [Zipf(s).rank_load(32, 256, 8, 1) for s in (0.0, 0.3, 0.6, 1.0)]
    assert all(r.rows == 256 for r in reached)
    assert reached[0].active > reached[1].active > reached[2].active > reached[3].active
    p = [r**-1.0 for r in range(1, 257)]
    expect = sum(1 - (1 - x / sum(p)) ** 256 for x in p)
    assert reached[3].active == pytest.approx(expect, rel=1e-12)
    # a prefill-sized step reaches every expert under either rule
    assert Zipf(1.0).rank_load(16384, 256, 8, 1).active == pytest.approx(256, abs=0.01)


def test_zipf_under_ep_times_the_rank_with_the_largest_share() -> None:
    z, uni = Zipf(0.6), ROUTINGS["uniform"]
    for t in (8, 64, 4096):
        load, mean = z.rank_load(t, 256, 8, 8), uni.rank_load(t, 256, 8, 8)
        assert load.rows > 1.05 * mean.rows  # more than the mean rank's share
        assert load.active <= 32
    # the same inputs, the same load (the placements are seeded)
    a = z.rank_load(64, 256, 8, 8)
    rt._zipf_busiest.cache_clear()
    rt._zipf_load.cache_clear()
    assert z.rank_load(64, 256, 8, 8) == a


def test_every_model_is_priced_at_the_served_zipf_popularity() -> None:
    from twin.presets import get_model

    m = get_model("gpt-oss-120b")
    rule = rt.routing_for(m)
    assert rule is ROUTINGS[rt.SERVED] and rule == Zipf(0.6, realised=True)
    # a decode-sized step reaches fewer experts than independent uniform draws
    load = rule.rank_load(32, m.moe_n_experts, m.moe_top_k, 1)
    assert load.active < ROUTINGS["uniform"].rank_load(32, m.moe_n_experts, m.moe_top_k, 1).active
    # under EP the step's busiest rank: more rows than uniform's mean rank at small steps
    ep4 = rule.rank_load(4, m.moe_n_experts, m.moe_top_k, 4)
    assert ep4.rows > 1.2 * ROUTINGS["uniform"].rank_load(4, m.moe_n_experts, m.moe_top_k, 4).rows


def test_zipf_under_ep_tends_to_uniform_as_the_skew_vanishes() -> None:
    # every draw of the step (not the rank's rows alone) can reach the rank's experts, and
    # a flat popularity gives every rank the mean share: uniform's mean rank (review44b)
    for t, e, k, ep in ((1, 128, 4, 4), (32, 256, 8, 8), (300, 384, 8, 4)):
        near, uni = Zipf(1e-9).rank_load(t, e, k, ep), ROUTINGS["uniform"].rank_load(t, e, k, ep)
        assert near.rows == pytest.approx(uni.rows, rel=1e-6)
        assert near.active == pytest.approx(uni.active, rel=1e-6)
    # and the busiest rank's distinct experts are its own experts' reach by all draws
    z = Zipf(0.5)
    p = rt._zipf_busiest(256, 8, 0.5)
    want = sum(sum(1 - (1 - x) ** (32 * 8) for x in row) for row in p) / len(p)
    assert z.rank_load(32, 256, 8, 8).active == pytest.approx(want, rel=1e-9)
    assert z.rank_load(32, 256, 8, 8).rows == pytest.approx(32 * 8 * p.sum(axis=1).mean())


# The realised busiest rank (``zipf_max_<s>``, docs/decisions.md, issue 31, helper busy45).

SHAPES = [(128, 4, 4), (256, 8, 8), (384, 8, 8), (512, 10, 8), (256, 8, 4)]


@pytest.mark.parametrize("shape", SHAPES)
def test_realised_busiest_rank_holds_more_than_the_expected_share_at_small_steps(
    shape: tuple[int, int, int],
) -> None:
    e, k, ep = shape
    for t, more in ((1, 1.4), (4, 1.15), (16, 1.05)):
        real, expect = Zipf(0.5, True).rank_load(t, e, k, ep), Zipf(0.5).rank_load(t, e, k, ep)
        assert real.rows > more * expect.rows  # the layer waits for this step's busiest rank
        assert real.active > expect.active  # whose more rows reach more of its experts
        assert real.active <= min(real.rows, e // ep)
    # a large step: the busiest rank is the one with the largest share, as the expected rule
    for t in (4096, 16384):
        real, expect = Zipf(0.5, True).rank_load(t, e, k, ep), Zipf(0.5).rank_load(t, e, k, ep)
        assert real.rows == pytest.approx(expect.rows, rel=0.01)
        assert real.rows >= expect.rows  # the same placements: E[max] >= max E
        assert real.active == pytest.approx(expect.active, rel=0.001)


def _brute_force(t: int, e: int, k: int, ep: int, s: float, steps: int) -> tuple[float, float]:
    """Every expert's count drawn, the step's busiest rank's rows and reached experts."""
    rng = np.random.default_rng(12345)
    placed = rt._zipf_placed(e, ep, s)
    rows, active = [], []
    for pl in placed:
        counts = rng.multinomial(t * k, pl.ravel(), size=steps).reshape(steps, ep, e // ep)
        top = counts.sum(axis=2).argmax(axis=1)
        busiest = counts[np.arange(steps), top]
        rows.append(busiest.sum(axis=1).mean())
        active.append((busiest > 0).sum(axis=1).mean())
    return float(np.mean(rows)), float(np.mean(active))


@pytest.mark.parametrize("t", [1, 4, 16, 64])
def test_realised_busiest_rank_matches_drawing_every_expert(t: int) -> None:
    # the rule draws rank totals and prices the busiest rank's reach in closed form;
    # drawing every expert's count and counting the busiest rank's reached experts agrees
    rows, active = _brute_force(t, 256, 8, 8, 0.5, 200)
    load = Zipf(0.5, True).rank_load(t, 256, 8, 8)
    assert load.rows == pytest.approx(rows, rel=0.03)
    assert load.active == pytest.approx(active, rel=0.03)


@pytest.mark.parametrize("s", [0.0, 0.3, 0.5, 0.7])
def test_realised_rule_at_one_rank_is_the_expected_rule(s: float) -> None:
    # EP 1: every expert on the one rank, nothing to take the max over
    for t, e, k in ((1, 128, 4), (32, 256, 8), (300, 384, 8), (8192, 512, 10)):
        assert Zipf(s, True).rank_load(t, e, k, 1) == Zipf(s).rank_load(t, e, k, 1)
    if s == 0.0:  # and at s 0, uniform to the bit
        uni = ROUTINGS["uniform"].rank_load(32, 256, 8, 1)
        assert Zipf(s, True).rank_load(32, 256, 8, 1) == uni


def test_realised_rule_at_zero_skew_is_the_busiest_of_uniform_ranks() -> None:
    # s 0 under EP: no longer uniform's mean rank (the decision: the max is priced at every s)
    real = Zipf(0.0, True).rank_load(1, 256, 8, 8)
    mean = ROUTINGS["uniform"].rank_load(1, 256, 8, 8)
    assert mean.rows == 1.0 and real.rows > 2.0  # 8 draws over 8 ranks: the busiest holds ~2.6


def test_realised_rule_is_the_same_for_the_same_inputs_and_smooth_in_tokens() -> None:
    z = Zipf(0.5, True)
    a = [z.rank_load(t, 384, 8, 8) for t in (3, 50, 700)]
    rt._zipf_realised_load.cache_clear()
    rt._zipf_realised_rank.cache_clear()
    rt._zipf_placed.cache_clear()
    assert [z.rank_load(t, 384, 8, 8) for t in (700, 50, 3)] == a[::-1]
    loads = [z.rank_load(t / 2, 256, 8, 8) for t in range(2, 600)]
    assert all(b.rows >= a.rows and b.active >= a.active for a, b in itertools.pairwise(loads))
    assert z.rank_load(0, 256, 8, 8) == rt.RankLoad(0.0, 0.0)


def test_realised_rule_with_one_expert_a_rank_reaches_it_without_a_warning() -> None:
    # EP = experts (Mixtral's 8 at EP 8): a rank's one expert has q 1, log(1 - q) -inf, and
    # the busiest rank's rows (at least 1) reach it for certain; numpy must not warn
    rt._zipf_realised_load.cache_clear()
    rt._zipf_realised_rank.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for t in (1, 4, 64):
            load = Zipf(0.6, True).rank_load(t, 8, 2, 8)
            assert load.active == 1.0 and load.rows >= t * 2 / 8
