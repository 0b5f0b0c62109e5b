"""Marconi's alpha grid search: replay a window of requests from a snapshot at each alpha.

Shared by ``marconi`` (the reference code's window and metric) and
``marconi-twin`` (the twin's own). The grid is the reference code's
(``config_tuner.ConfigTuner.tune_config``: 0.0 to 2.0 by 0.1).

Metrics, each the total over the scored requests of the replayed window:

- ``reference``: FLOPs saved by the hits of the window's last 500 requests,
  counted with the reference code's formulas (``config_tuner.tune_config``
  ranks alphas by ``get_cache_stats(last_n=tuning_interval)``'s FLOPs, and
  ``RadixCache.tuning_interval`` is 500);
- ``hit-rate``: hit tokens over the whole window (``marconi-twin``'s default);
- ``flops``: the twin's own prefill FLOPs saved over the whole window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, cast

import numpy as np

from twin.cache import CacheSnapshot, PrefillFlops, PrefixCache, serve
from twin.errors import TwinError
from twin.limits import MAX_JOBS
from twin.model import ModelSpec
from twin.policies.base import Policy
from twin.policies.grid import map_alphas
from twin.policies.reference_score import ReferenceFlops
from twin.policies.shared_prefix import replay_grid

ALPHA_GRID = tuple(round(0.1 * i, 1) for i in range(21))
REFERENCE_LAST_N = 500  # radix_cache_hybrid.RadixCache.tuning_interval

Window = list[tuple[np.ndarray, int]]  # (input + output, input length) per request


def window_score(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: Window,
    alpha: float,
    policy_cls: type,
    metric: str,
) -> float:
    """``metric`` of replaying ``window`` from ``snapshot`` under ``policy_cls(alpha=alpha)``."""
    cache = PrefixCache.restore(snapshot, model, policy_cls(alpha=alpha))
    return score_hits([serve(cache, full[:n], full).length for full, n in window], model, metric)


def score_hits(hits: list[int], model: ModelSpec, metric: str) -> float:
    """``metric`` of a window replay whose requests hit ``hits`` tokens each."""
    if metric == "hit-rate":
        return float(sum(hits))
    if metric == "flops":
        flops = PrefillFlops(model)
        return float(sum(flops.total(h, 0) for h in hits))
    ref = ReferenceFlops(model)  # exact ints: no ties made by rounding
    return sum(ref.saved_by_hit(h) for h in hits[-REFERENCE_LAST_N:])


def _score_at(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: Window,
    policy_cls: type,
    metric: str,
    alpha: float,
) -> float:
    """:func:`window_score` with alpha last (the shared grid pool's calling order)."""
    return window_score(snapshot, model, window, alpha, policy_cls, metric)


def _alpha_score(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: Window,
    policy_cls: type,
    metric: str,
    alpha: float,
) -> float:
    """One alpha's score (a worker's task under ``jobs > 1``): its compiled replay where
    that applies (:mod:`policies.compiled`), else :func:`window_score`."""
    from twin.policies.compiled import compiled_grid_runs

    runs = compiled_grid_runs(model, snapshot.capacity, window, (alpha,), policy_cls, snapshot)
    if runs is None:
        return window_score(snapshot, model, window, alpha, policy_cls, metric)
    return score_hits(runs[0].hits, model, metric)


def grid_scores(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: Window,
    policy_cls: type,
    metric: str,
    grid: tuple[float, ...] = ALPHA_GRID,
    jobs: int = 1,
    exhaustive: bool = False,
) -> dict[float, float]:
    """:func:`window_score` for every alpha of ``grid``.

    One process replays the grid of either Marconi as compiled code
    (:mod:`policies.compiled`), and any other grid sharing the requests before
    the first eviction (:func:`policies.shared_prefix.replay_grid`); ``jobs > 1``
    processes replay each alpha on its own, compiled where it applies
    (:func:`_alpha_score`); ``exhaustive`` replays each alpha on the radix tree
    (the tests' reference). The scores are the same every way.
    """
    from twin.policies.compiled import compiled_grid_runs

    shared = (snapshot, model, window, policy_cls, metric)
    if exhaustive:
        return dict(zip(grid, map_alphas(_score_at, shared, grid, jobs), strict=True))
    if jobs > 1:
        return dict(zip(grid, map_alphas(_alpha_score, shared, grid, jobs), strict=True))
    compiled = compiled_grid_runs(model, snapshot.capacity, window, grid, policy_cls, snapshot)
    if compiled is not None:
        return {run.alpha: score_hits(run.hits, model, metric) for run in compiled}
    runs = replay_grid(grid, lambda a: policy_cls(alpha=a), model, window, start=snapshot)
    return {a: score_hits([h for h, *_ in served], model, metric) for a, _, served in runs}


class TunedAlpha:
    """What both Marconi variants record about their alpha (mixed into the policy)."""

    alpha: float
    phase: str  # warmup, window, tuned, untuned (window never reached) or fixed
    rules: ClassVar[str]
    bootstrap: dict[str, Any]
    _snapshot: Any
    _window: Window

    def start_tuning(self, alpha: float | None, bootstrap_multiplier: float, jobs: int) -> None:
        """Check the options; a given ``alpha`` is fixed, none starts the bootstrap."""
        if bootstrap_multiplier <= 0:
            raise TwinError(f"bootstrap multiplier must be > 0 (got {bootstrap_multiplier})")
        if alpha is not None and alpha < 0:
            raise TwinError(f"alpha must be >= 0 (got {alpha})")
        self.phase = "warmup" if alpha is None else "fixed"
        self.multiplier = bootstrap_multiplier
        if not 1 <= jobs <= MAX_JOBS:  # 0 was silently 1 (issue 32)
            raise TwinError(f"jobs must be 1 to {MAX_JOBS:,} worker processes (got {jobs})")
        self.jobs = int(jobs)
        self.requests = 0
        self.bootstrap = {}
        self._snapshot = None
        self._window = []

    def finish_tuning(self, scores: dict[float, float], **record: Any) -> None:
        """Take the best alpha of ``scores`` and record the grid; the window is dropped."""
        self.alpha = best_alpha(scores)
        self.bootstrap.update(
            completed=True,
            window_prompt_tokens=sum(n for _, n in self._window),
            grid={str(a): s for a, s in scores.items()},
            **record,
        )
        self.phase = "tuned"
        self._snapshot, self._window = None, []

    def make_engine_cache(
        self,
        model: ModelSpec,
        capacity_bytes: int,
        longest: Callable[[], int],
        host_tier: bool = False,
    ) -> Any:
        """The compiled live cache where it runs this policy exactly
        (:mod:`policies.compiled.live`; a host tier's cache and one over it too), else
        the radix-tree cache."""
        from twin.policies.compiled.live import live_cache

        live = live_cache(self, model, capacity_bytes, longest)  # type: ignore[arg-type]
        return live if live is not None else cast(Policy, self).make_cache(model, capacity_bytes)

    def stats(self) -> dict[str, Any]:
        return {
            "alpha": self.alpha,
            "alpha_source": self.phase,
            "rules": self.rules,
            "bootstrap": self.bootstrap,
        }


def best_alpha(scores: dict[float, float]) -> float:
    """The highest score; ties to the first alpha of the grid (the smallest).

    The reference takes ``max`` over results in the order its worker pool
    finished them (``tune_config``'s ``as_completed``), which is not
    deterministic; grid order is the deterministic reading of it.
    """
    return max(scores, key=lambda a: scores[a])
