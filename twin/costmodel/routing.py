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

Which rule prices a model: ``routing_for`` (``SERVED``).
"""

from __future__ import annotations

import functools
import math
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
    x = math.log2(max(tokens, 1.0)) * GRID_STEPS
    j = math.floor(x)
    lo, hi = round(2.0 ** (j / GRID_STEPS)), round(2.0 ** ((j + 1) / GRID_STEPS))
    a = _power_law_rank(lo, n_experts, top_k, ep, alpha)
    if hi == lo or tokens <= lo:
        return RankLoad(*a)
    b = _power_law_rank(hi, n_experts, top_k, ep, alpha)
    w = (math.log(tokens) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return RankLoad(a[0] + w * (b[0] - a[0]), a[1] + w * (b[1] - a[1]))


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
    largest share of it (``zipf_<s>`` in the module's docstring)."""

    s: float

    def rank_load(self, tokens: float, n_experts: int, top_k: int, ep: int) -> RankLoad:
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
    p = np.arange(1, n_experts + 1, dtype=np.float64) ** -s
    p /= p.sum()
    if ep <= 1:
        return p[None, :]
    seed = (n_experts * 10_007 + ep * 101 + round(s * 1000)) % (2**32)
    rng = np.random.default_rng(seed)
    placed = np.stack([p[rng.permutation(n_experts)] for _ in range(ZIPF_PLACEMENTS)])
    per_rank = placed.reshape(ZIPF_PLACEMENTS, ep, n_experts // ep)
    top = np.argmax(per_rank.sum(axis=2), axis=1)
    busiest = per_rank[np.arange(ZIPF_PLACEMENTS), top]
    busiest.setflags(write=False)
    return busiest


UNIFORM = Uniform()

ROUTINGS: dict[str, Routing] = {
    "uniform": UNIFORM,
    "balanced": Balanced(),
    "power_law_1.01": PowerLaw(1.01),
    "power_law_1.2": PowerLaw(1.2),
    "zipf_0.5": Zipf(0.5),
}

# The rule that prices every model's experts: a Zipf popularity of exponent 0.5. The
# exponent is a fitted parameter, not a source's: the least TPOT MAPE of s in 0-1 on the
# direct decode price of the 1,659 measured MoE fit rows of silicon-all-s43 (0.5 and 0.6
# tie at 7.81%, 0.5 the smaller skew; benchmarks/results/route44-s44/grid-fit.out.txt),
# confirmed by the scorer on every 3rd of them (docs/decisions.md, issue 31: a skewed
# expert popularity, helper route44, session 44).
SERVED = "zipf_0.5"


def routing_for(model: ModelSpec) -> Routing:
    """The routing rule that prices ``model``'s experts: ``SERVED``, one rule for every
    model (no source gives one model's gate another skew; docs/decisions.md, issue 34: the
    routing step, and issue 31: a skewed expert popularity)."""
    return ROUTINGS[SERVED]
