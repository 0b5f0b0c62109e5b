"""``marconi``: judicious admission + FLOP-aware eviction (Marconi, arXiv 2411.19379, sec. 4).

Admission (sec. 4.1) is the judicious rule of ``policies.base``; eviction
(sec. 4.2) is ``policies.flop_aware``: recency + alpha x FLOP efficiency over
the nodes with at most one child, refreshing only the node a hit used.

Alpha (sec. 4.2). 0 until the first eviction. The requests seen until then,
times ``bootstrap_multiplier``, make the bootstrap window; a snapshot of the
cache is taken at its start. At its end every alpha of the grid 0.0..2.0 is
replayed over the window from the snapshot, and the one with the most hit
tokens (or FLOPs saved) is kept; ties go to the smallest alpha.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from policies.base import judicious_admission
from policies.flop_aware import FlopAwareEviction
from policies.grid import map_alphas
from twin.cache import CacheSnapshot, CacheStructure, PrefillFlops, PrefixCache, serve
from twin.errors import TwinError
from twin.model import ModelSpec

ALPHA_GRID = tuple(round(0.1 * i, 1) for i in range(21))
ALPHA_METRICS = ("hit-rate", "flops")


class MarconiPolicy(FlopAwareEviction):
    """FLOP-aware eviction with a bootstrapped alpha (or a fixed one when ``alpha`` is given)."""

    name = "marconi"
    description = "judicious admission, evicts by recency + alpha x FLOP efficiency (alpha tuned)"
    OPTIONS: ClassVar[tuple[str, ...]] = ("alpha", "bootstrap_multiplier", "alpha_metric", "jobs")

    def __init__(
        self,
        alpha: float | None = None,
        bootstrap_multiplier: float = 5,
        alpha_metric: str = "hit-rate",
        jobs: int = 1,
    ) -> None:
        super().__init__(0.0 if alpha is None else alpha)
        if alpha_metric not in ALPHA_METRICS:
            raise TwinError(
                f"alpha metric {alpha_metric!r} unknown; valid: {', '.join(ALPHA_METRICS)}"
            )
        if bootstrap_multiplier <= 0:
            raise TwinError(f"bootstrap multiplier must be > 0 (got {bootstrap_multiplier})")
        if alpha is not None and alpha < 0:
            raise TwinError(f"alpha must be >= 0 (got {alpha})")
        self.phase = "warmup" if alpha is None else "fixed"
        self.multiplier = bootstrap_multiplier
        self.metric = alpha_metric
        self.jobs = max(1, int(jobs))
        self.requests = 0
        self.bootstrap: dict[str, Any] = {}
        self._snapshot: CacheSnapshot | None = None
        self._window: list[tuple[np.ndarray, int]] = []
        self._window_len = 0

    # ----- admission and bootstrap -------------------------------------------
    def admit(self, cache: CacheStructure, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        return judicious_admission(cache, prompt, full)

    def on_request(self, cache: CacheStructure, prompt: np.ndarray, full: np.ndarray) -> None:
        self.requests += 1
        if self.phase == "warmup" and cache.evictions:
            before = self.requests - 1  # requests served before this one, eviction included
            self._window_len = max(1, round(self.multiplier * before))
            self._snapshot = self.cache.snapshot()
            self.bootstrap = {
                "requests_before_first_eviction": before,
                "window_start": before,
                "window_requests": self._window_len,
                "completed": False,
            }
            self.phase = "window"
        if self.phase == "window":
            if len(self._window) < self._window_len:
                self._window.append((full, len(prompt)))
                return
            self._tune(cache.model)

    def _tune(self, model: ModelSpec) -> None:
        assert self._snapshot is not None
        scores = grid_scores(
            self._snapshot, model, self._window, ALPHA_GRID, self.metric, self.jobs
        )
        best = max(ALPHA_GRID, key=lambda a: (scores[a], -a))
        self.alpha = best
        self.bootstrap.update(
            completed=True,
            window_prompt_tokens=sum(n for _, n in self._window),
            grid={str(a): scores[a] for a in ALPHA_GRID},
        )
        self.phase = "tuned"
        self._snapshot, self._window = None, []

    def stats(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "alpha_source": self.phase, "bootstrap": self.bootstrap}


# ----- the alpha grid search ---------------------------------------------------
def window_score(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: list[tuple[np.ndarray, int]],
    metric: str,
    alpha: float,
) -> float:
    """Hit tokens (or FLOPs saved) replaying ``window`` from ``snapshot`` at a fixed ``alpha``."""
    cache = PrefixCache.restore(snapshot, model, MarconiPolicy(alpha=alpha))
    flops = PrefillFlops(model)
    total = 0.0
    for full, n_prompt in window:
        hit = serve(cache, full[:n_prompt], full).length
        total += hit if metric == "hit-rate" else flops.total(hit, 0)
    return total


def grid_scores(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: list[tuple[np.ndarray, int]],
    grid: tuple[float, ...] = ALPHA_GRID,
    metric: str = "hit-rate",
    jobs: int = 1,
) -> dict[float, float]:
    """:func:`window_score` for every alpha of ``grid``, over ``jobs`` processes."""
    scores = map_alphas(window_score, (snapshot, model, window, metric), grid, jobs)
    return dict(zip(grid, scores, strict=True))
