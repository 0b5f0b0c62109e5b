"""How a step's tokens spread over the routed experts: the load of the rank a fused-MoE
launch waits for.

A fused-MoE launch on one expert-parallel rank streams the weights of each of its experts
that at least one row reaches and computes its rows (``moe_features.moe_sums``); under expert
parallelism the layer ends when its slowest rank does. A routing rule says, for a step of
``tokens`` tokens each routed to ``top_k`` of ``n_experts`` experts spread over ``ep``
ranks, the rows and the distinct experts of that rank (``RankLoad``).

- ``uniform``: each token x top-k draw picks an expert uniformly and independently; the
  mean rank (its ``tokens x top_k / ep`` rows, the expected distinct experts of its
  ``n_experts / ep``).
- ``balanced``: NVIDIA's ``balanced`` ``moe_perf`` rows (aiconfigurator's collector,
  ``collector/helper.py`` ``balanced_logits``: token i's j-th expert
  ``(i + j x ceil(E / k)) mod E``): rows spread evenly, ``min(local experts, rows)``
  experts reached. What the fused-MoE fits are fitted on (``aic_moe.moe_row``).
- ``power_law_<alpha>``: the ``power_law_<alpha>`` rows (the collector's
  ``_generate_power_law_distribution``, ``collector/helper.py`` of the public
  ai-dynamo/aiconfigurator repository; the rows aiconfigurator 0.12.0's own estimate
  reads): each expert's load drawn from a power law of exponent ``alpha`` on
  [1, 0.8 x tokens] (on [0.01, 2] when the step has no more rows than experts), scaled to
  ``tokens x top_k`` rows and rounded (the surplus one row each to the most loaded
  experts, in index order among equal loads), the EP rank with the most rows timed. The
  rank's expected rows and distinct experts over ``DRAWS`` seeded draws. With 256 or more
  experts and a small step every share rounds to zero and the surplus puts all the rows on
  the first experts, one rank (docs/decisions.md, issue 34: the routing step).
- ``zipf_<s>``: a skewed popularity: each token x top-k draw picks the expert of
  popularity rank r with probability proportional to ``r^-s`` (``s`` 0 is ``uniform``),
  independently, the popularity ranks placed at random over the EP ranks. Why skewed:
  served expert loads are uneven, so deployments re-balance them: the DeepSeek-V3 report
  duplicates its high-load experts, detected from the online service's load statistics
  (redundant experts, arXiv:2412.19437 section 3.4 "Inference and Deployment", 3.4.1
  Prefilling and 3.4.2 Decoding), as DeepSeek's EPLB and SGLang's EPLB after it do ("the
  load on different experts may vary depending on the workload": NVIDIA Dynamo 0.8.0 docs,
  "Expert Parallelism Load Balancer (EPLB) in SGLang"); over 100,000 activation traces of
  Llama 4 Maverick, DeepSeek-V3-671B and Qwen3-235B-A22B find variable expert load
  imbalance on each of them (arXiv:2604.23150); "even well-trained MoE models exhibit
  significantly imbalanced routing" (Nguyen et al., Least-Loaded Expert Parallelism,
  arXiv:2601.17111). None of them gives the shape: the Zipf form and its exponent are
  the twin's, the exponent a fitted parameter (``SERVED``). Closed form: the rank's rows
  are its share of the ``tokens x top_k`` draws, its distinct experts
  ``sum(1 - (1 - p_e)^(tokens x top_k))`` over its experts; under EP the rank with the
  largest expected share, the mean over ``ZIPF_PLACEMENTS`` seeded placements. Two
  approximations (docs/decisions.md, issue 31, review44b): the draws are with
  replacement where a gate picks a token's top-k distinct experts (a step of 1 token
  reaches 0.5-5% fewer experts than top-k without replacement at 128-512 experts, top-k
  4-10, under 0.1% by 256-512 tokens; the busiest rank's rows 0-3.4% over); and the
  rank with the largest expected share stands for the step's busiest rank, as
  ``uniform``'s mean rank does (at EP 4-8 a step's realised busiest rank holds 1.6-2.1x
  the rows at 1 token, 8-18% more at 16, 1-4% more at 64).
- ``zipf_max_<s>``: the same draws and placements, but under EP the rank that is busiest
  IN THE STEP, which the layer waits for: the expected rows of the rank with the most
  rows, and that rank's expected distinct experts. The draws put a multinomial count on
  each EP rank (its share of the popularity); the rule draws those counts,
  ``ZIPF_STEPS`` seeded steps per placement (common draws at every token count, so the
  price is smooth in tokens), takes each step's busiest rank, and prices its reach in
  closed form from its own rows (given a rank's rows, its draws are independent picks of
  its own experts); tabulated per token count as the power law's grid, interpolated in
  log tokens. At EP 1 it is ``zipf_<s>`` to the bit (one rank, nothing to take the
  maximum of); at s 0 under EP it is the busiest of uniform ranks, not ``uniform``'s
  mean rank. Draws stay with replacement (docs/decisions.md, issue 31, helper busy45:
  against review44b's top-k-without-replacement Monte-Carlo, itself a few % noisy, it
  reaches up to 4.5% fewer experts at 1-16 tokens, within 1.2% from 64, its rows within
  -2.5..+4.0% at 1-16 tokens, -5.0..+4.8% to 512; busy45-s45/vs_review.out.txt).

Which rule prices a model: ``routing_for`` (``SERVED``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from twin.model import ModelSpec

# Draws of the power-law loads averaged per (tokens, experts, top-k, EP): the busiest
# rank's distinct experts varies by a few percent from one draw to the next at 256 experts.
DRAWS = 16


@dataclass(frozen=True)
class RankLoad:
    """The rows routed to the rank a launch waits for and how many of its experts they reach."""

    rows: float
    active: float


class Routing:
    """A routing rule, registered in ``ROUTINGS`` by its name."""

    name: ClassVar[str] = ""

    def rank_load(self, tokens: float, n_experts: int, top_k: int, ep: int) -> RankLoad:
        raise NotImplementedError


class Uniform(Routing):
    """Independent uniform draws; the mean rank."""

    name = "uniform"

    def rank_load(self, tokens: float, n_experts: int, top_k: int, ep: int) -> RankLoad:
        rows = tokens * top_k
        local = n_experts / ep
        if n_experts <= 1:
            return RankLoad(rows / ep, float(local))
        return RankLoad(rows / ep, float(local) * (1.0 - (1.0 - 1.0 / n_experts) ** rows))


class Balanced(Routing):
    """The tables' balanced rows: every rank the same rows, each expert's share even."""

    name = "balanced"

    def rank_load(self, tokens: float, n_experts: int, top_k: int, ep: int) -> RankLoad:
        rows = tokens * top_k / ep
        return RankLoad(rows, min(n_experts / ep, rows))


@dataclass(frozen=True)
class PowerLaw(Routing):
    """The tables' ``power_law_<alpha>`` rows: the most loaded rank of skewed expert loads."""

    alpha: float

    def rank_load(self, tokens: float, n_experts: int, top_k: int, ep: int) -> RankLoad:
        if tokens <= 0:
            return RankLoad(0.0, 0.0)
        return _power_law_load(float(tokens), n_experts, top_k, ep, self.alpha)


# Token counts at which the power-law load is drawn: ``GRID_STEPS`` a doubling; a step
# between two takes the load interpolated in log tokens (a step's price stays smooth in
# its tokens and each model draws at most ~8 x log2(tokens) loads).
GRID_STEPS = 8


def _power_law_load(tokens: float, n_experts: int, top_k: int, ep: int, alpha: float) -> RankLoad:
    """The most loaded rank's expected load at ``tokens``, from the grid's draws."""
    return RankLoad(*_on_grid(tokens, lambda t: _power_law_rank(t, n_experts, top_k, ep, alpha)))


def _on_grid(tokens: float, at: Callable[[int], tuple[float, float]]) -> tuple[float, float]:
    """``at``'s (rows, distinct experts) at ``tokens``: ``at`` drawn at the grid's two token
    counts around it (``GRID_STEPS`` a doubling, from 1), interpolated in log tokens; below
    1 token, the 1-token draw."""
    x = math.log2(max(tokens, 1.0)) * GRID_STEPS
    j = math.floor(x)
    lo, hi = round(2.0 ** (j / GRID_STEPS)), round(2.0 ** ((j + 1) / GRID_STEPS))
    a = at(lo)
    if hi == lo or tokens <= lo:
        return a
    b = at(hi)
    w = (math.log(tokens) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1])


def _bounded_power_law(
    rng: np.random.Generator, shape: tuple[int, int], alpha: float, lo: float, hi: float
) -> np.ndarray:
    """Inverse-CDF draws of a power law of exponent ``alpha`` on [lo, hi]."""
    u = rng.random(shape)
    a = 1.0 - alpha
    return ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)


@functools.lru_cache(maxsize=65536)
def _power_law_rank(
    tokens: int, n_experts: int, top_k: int, ep: int, alpha: float
) -> tuple[float, float]:
    """(rows, distinct experts) of the most loaded EP rank, the mean of ``DRAWS`` draws of
    the collector's rule (seeded by the arguments: the same inputs give the same load)."""
    total = tokens * top_k
    seed = (tokens * 1_000_003 + n_experts * 10_007 + top_k * 101 + ep) % (2**32)
    rng = np.random.default_rng(seed)
    lo, hi = (1.0, 0.8 * tokens) if total > n_experts else (0.01, 2.0)
    if hi <= lo:  # one token over few experts: every draw the same
        hi = lo * (1.0 + 1e-9)
    x = _bounded_power_law(rng, (DRAWS, n_experts), alpha, lo, hi)
    counts = np.rint(x / x.sum(axis=1, keepdims=True) * total).astype(np.int64)
    # The rounding's surplus or shortfall, one row at a time from the most (surplus: added)
    # or least (shortfall: taken) loaded experts, as the collector settles it.
    order = np.argsort(-counts, axis=1, kind="stable")
    for d in range(DRAWS):
        delta = total - int(counts[d].sum())
        if delta > 0:
            counts[d] += delta // n_experts
            counts[d, order[d, : delta % n_experts]] += 1
        while delta < 0:
            j = order[d, ::-1]
            j = j[counts[d, j] > 0][:-delta]
            counts[d, j] -= 1
            delta += len(j)
    per_rank = counts.reshape(DRAWS, ep, n_experts // ep)
    top = np.argmax(per_rank.sum(axis=2), axis=1)
    rank = per_rank[np.arange(DRAWS), top]
    return float(rank.sum(axis=1).mean()), float((rank > 0).sum(axis=1).mean())


# Seeded placements of the Zipf popularity ranks over the EP ranks averaged per (experts,
# EP, s): which ranks hold the hot experts moves the busiest rank's share by a few percent.
ZIPF_PLACEMENTS = 64


@dataclass(frozen=True)
class Zipf(Routing):
    """Independent draws of a Zipf popularity of exponent ``s``; under EP the rank with the
    largest expected share of it (``zipf_<s>`` in the module's docstring) or, ``realised``,
    the step's busiest rank (``zipf_max_<s>``)."""

    s: float
    realised: bool = False

    def rank_load(self, tokens: float, n_experts: int, top_k: int, ep: int) -> RankLoad:
        if self.realised and ep > 1 and n_experts > 1:
            if tokens <= 0:
                return RankLoad(0.0, 0.0)
            return RankLoad(*_zipf_realised_load(float(tokens), n_experts, top_k, ep, self.s))
        # one rank (every expert on it) or the expected-share rank
        if self.s == 0.0 or n_experts <= 1:
            return UNIFORM.rank_load(tokens, n_experts, top_k, ep)
        return RankLoad(*_zipf_load(tokens, n_experts, top_k, ep, self.s))


@functools.lru_cache(maxsize=65536)
def _zipf_load(tokens: float, n_experts: int, top_k: int, ep: int, s: float) -> tuple[float, float]:
    """(rows, distinct experts) of the rank with the largest expected share (cached per
    every input: a run prices the same step sizes again and again)."""
    rows = tokens * top_k
    p = _zipf_busiest(n_experts, ep, s)  # (placements, n_experts / ep)
    share = 1.0 if ep <= 1 else float(p.sum(axis=1).mean())
    # 1 - (1 - p)^rows, in log space (the hot experts' p near 1/top_k at large s)
    reach = -np.expm1(rows * np.log1p(-p))
    return rows * share, float(reach.sum(axis=1).mean())


@functools.lru_cache(maxsize=256)
def _zipf_busiest(n_experts: int, ep: int, s: float) -> np.ndarray:
    """The popularity of each expert of the rank with the largest share, per placement of
    the popularity ranks over the EP ranks (seeded by the arguments; one placement at EP 1)."""
    if ep <= 1:
        return _zipf_popularity(n_experts, s)[None, :]
    per_rank = _zipf_placed(n_experts, ep, s)
    top = np.argmax(per_rank.sum(axis=2), axis=1)
    busiest = per_rank[np.arange(ZIPF_PLACEMENTS), top]
    busiest.setflags(write=False)
    return busiest


# Steps drawn per placement for the realised busiest rank (``zipf_max_<s>``): with
# ``ZIPF_PLACEMENTS`` placements, 4,096 steps a grid point; over 9 other seeds of the steps
# the mean busiest rank's rows and experts span 0.8-1.8% at 1 token, 0.5-1.1% at 4, under
# 0.4% at 64 (s 0.6, five shapes: benchmarks/results/review45-s45/seeds.out.txt;
# docs/decisions.md, issue 31, helpers busy45 and review45).
ZIPF_STEPS = 64


@functools.lru_cache(maxsize=65536)
def _zipf_realised_load(
    tokens: float, n_experts: int, top_k: int, ep: int, s: float
) -> tuple[float, float]:
    """The realised busiest rank's expected (rows, distinct experts) at ``tokens``: the
    grid's draws (``GRID_STEPS`` a doubling, as the power law's), interpolated in log
    tokens; below 1 token the 1-token load scaled down (cached per every input)."""
    if tokens < 1.0:
        one = _zipf_realised_rank(1, n_experts, top_k, ep, s)
        return one[0] * tokens, one[1] * tokens
    return _on_grid(tokens, lambda t: _zipf_realised_rank(t, n_experts, top_k, ep, s))


@functools.lru_cache(maxsize=65536)
def _zipf_realised_rank(
    tokens: int, n_experts: int, top_k: int, ep: int, s: float
) -> tuple[float, float]:
    """(rows, distinct experts) of the rank with the most rows in the step, the mean over
    ``ZIPF_PLACEMENTS`` seeded placements x ``ZIPF_STEPS`` seeded steps. A step's
    ``tokens x top_k`` independent draws put a multinomial count on each EP rank (its
    share of the popularity); the busiest rank is the one with the most (ties: the first;
    the placements are random, so which rank comes first is); given its ``m`` rows, its
    draws are ``m`` independent picks of its own experts (the multinomial split by rank),
    so its expected distinct experts are ``sum(1 - (1 - q_e)^m)`` over its experts, ``q``
    its popularity renormalised: exact for the sampled rows. The seed is the same at every
    token count (common draws), so the grid is smooth in tokens."""
    per_rank = _zipf_placed(n_experts, ep, s)  # (placements, ep, n / ep)
    seed = (n_experts * 10_007 + ep * 101 + top_k * 7 + round(s * 1000) + 1) % (2**32)
    rng = np.random.default_rng(seed)
    share = per_rank.sum(axis=2)  # (placements, ep)
    share /= share.sum(axis=1, keepdims=True)
    counts = rng.multinomial(tokens * top_k, share, size=(ZIPF_STEPS, ZIPF_PLACEMENTS))
    top = np.argmax(counts, axis=2)  # (steps, placements)
    rows = np.take_along_axis(counts, top[..., None], axis=2)[..., 0].astype(np.float64)
    q = per_rank / per_rank.sum(axis=2, keepdims=True)
    # log(1 - q) (placements, ep, local): -inf where a rank holds one expert (q 1), which
    # the busiest rank's rows (at least 1: the draws are at least 1 token) then reach for
    # certain, exp(-inf) 0
    with np.errstate(divide="ignore"):
        log_miss = np.log1p(-np.minimum(q, 1.0))
    own = log_miss[np.arange(ZIPF_PLACEMENTS)[None, :], top]  # (steps, placements, local)
    active = -np.expm1(rows[..., None] * own).sum(axis=2)
    return float(rows.mean()), float(active.mean())


def _zipf_popularity(n_experts: int, s: float) -> np.ndarray:
    """Each expert's share of the draws, by popularity rank: ``r^-s`` normalised."""
    p = np.arange(1, n_experts + 1, dtype=np.float64) ** -s
    p /= p.sum()
    return p


@functools.lru_cache(maxsize=256)
def _zipf_placed(n_experts: int, ep: int, s: float) -> np.ndarray:
    """The popularity of each expert of each EP rank, ``(ZIPF_PLACEMENTS, ep, n / ep)``, per
    seeded placement of the popularity ranks over the EP ranks (seeded by the arguments:
    the expected-share and the realised rules read the same placements)."""
    p = _zipf_popularity(n_experts, s)
    seed = (n_experts * 10_007 + ep * 101 + round(s * 1000)) % (2**32)
    rng = np.random.default_rng(seed)
    placed = np.stack([p[rng.permutation(n_experts)] for _ in range(ZIPF_PLACEMENTS)])
    per_rank = placed.reshape(ZIPF_PLACEMENTS, ep, n_experts // ep)
    per_rank.setflags(write=False)
    return per_rank


UNIFORM = Uniform()

ROUTINGS: dict[str, Routing] = {
    "uniform": UNIFORM,
    "balanced": Balanced(),
    "power_law_1.01": PowerLaw(1.01),
    "power_law_1.2": PowerLaw(1.2),
    "zipf_0.5": Zipf(0.5),
    "zipf_max_0.5": Zipf(0.5, realised=True),
    "zipf_max_0.6": Zipf(0.6, realised=True),
}

# The rule that prices every model's experts: a Zipf popularity of exponent 0.6, under EP
# the step's realised busiest rank. The exponent is a fitted parameter, not a source's:
# the least TPOT MAPE of s in 0 / 0.3 / 0.4 / 0.5 / 0.6 / 0.7 on the direct decode price of
# the 1,659 measured MoE fit rows of silicon-all-s43 (7.61%; zipf_0.5, the expected-share
# rank, 7.81; benchmarks/results/busy45-s45/grid-fit.out.txt), confirmed by the scorer on
# every 3rd of them (docs/decisions.md, issue 31: the realised busiest EP rank, helper
# busy45, session 45; before it ``zipf_0.5``, helper route44, session 44).
SERVED = "zipf_max_0.6"


def routing_for(model: ModelSpec) -> Routing:
    """The routing rule that prices ``model``'s experts: ``SERVED``, one rule for every
    model (no source gives one model's gate another skew; docs/decisions.md, issue 34: the
    routing step, and issue 31: a skewed expert popularity)."""
    return ROUTINGS[SERVED]
