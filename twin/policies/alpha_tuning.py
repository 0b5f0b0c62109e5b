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

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from twin.cache import CacheSnapshot, PrefillFlops
from twin.errors import TwinError
from twin.limits import MAX_JOBS
from twin.model import ModelSpec
from twin.policies.grid import map_alphas

if TYPE_CHECKING:
    from twin.policies.compiled import GridRun, GridStream
from twin.policies.reference_score import ReferenceFlops

ALPHA_GRID = tuple(round(0.1 * i, 1) for i in range(21))
REFERENCE_LAST_N = 500  # radix_cache_hybrid.RadixCache.tuning_interval

Window = list[tuple[np.ndarray, int]]  # (input + output, input length) per request


def score_hits(hits: list[int], model: ModelSpec, metric: str) -> float:
    """``metric`` of a window replay whose requests hit ``hits`` tokens each."""
    if metric == "hit-rate":
        return float(sum(hits))
    if metric == "flops":
        flops = PrefillFlops(model)
        return float(sum(flops.total(h, 0) for h in hits))
    ref = ReferenceFlops(model)  # exact ints: no ties made by rounding
    return sum(ref.saved_by_hit(h) for h in hits[-REFERENCE_LAST_N:])


def _alpha_score(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: Window,
    policy_cls: type,
    metric: str,
    alpha: float,
) -> float:
    """One alpha's score (a worker's task under ``jobs > 1``): its compiled replay."""
    from twin.policies.compiled import compiled_grid_runs

    runs = compiled_grid_runs(model, snapshot.capacity, window, (alpha,), policy_cls, snapshot)
    return score_hits(runs[0].hits, model, metric)


def grid_scores(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: Window,
    policy_cls: type,
    metric: str,
    grid: tuple[float, ...] = ALPHA_GRID,
    jobs: int = 1,
) -> dict[float, float]:
    """The score of replaying ``window`` from ``snapshot`` under ``policy_cls(alpha=a)``,
    for every alpha ``a`` of ``grid``, as compiled code (:mod:`policies.compiled`): one
    process replays the whole grid, sharing the requests before the first eviction;
    ``jobs > 1`` processes replay each alpha on its own (:func:`_alpha_score`). The
    scores are the same either way.
    """
    from twin.policies.compiled import compiled_grid_runs

    if jobs > 1:
        shared = (snapshot, model, window, policy_cls, metric)
        return dict(zip(grid, map_alphas(_alpha_score, shared, grid, jobs), strict=True))
    compiled = compiled_grid_runs(model, snapshot.capacity, window, grid, policy_cls, snapshot)
    return run_scores(compiled, model, metric)


def run_scores(runs: list[GridRun], model: ModelSpec, metric: str) -> dict[float, float]:
    """Each alpha's score of its replay, in grid order."""
    return {run.alpha: score_hits(run.hits, model, metric) for run in runs}


class Snapshots(Protocol):
    """What a tuner reads of its policy's cache: its model, evictions and a snapshot."""

    model: ModelSpec

    @property
    def evictions(self) -> int: ...
    def snapshot(self) -> CacheSnapshot: ...


class AlphaTuner:
    """Marconi's online tuning of alpha, a component its policy is given: it records the
    bootstrap window from a snapshot, replays it at every alpha of the grid and keeps
    the best. A given ``alpha`` is fixed (no window). The policy's compiled live cache
    calls :meth:`end_warmup` and :meth:`tune_if_due`; the policy passes its requests to
    :meth:`on_request`. ``marconi``'s window is :class:`twin.policies.marconi.
    ReferenceBootstrap`, ``marconi-twin``'s :class:`twin.policies.marconi_twin.TwinBootstrap`.
    """

    def __init__(
        self,
        policy_cls: type,
        alpha: float | None,
        bootstrap_multiplier: float,
        jobs: int,
        metric: str,
    ) -> None:
        if bootstrap_multiplier <= 0:
            raise TwinError(f"bootstrap multiplier must be > 0 (got {bootstrap_multiplier})")
        if alpha is not None and alpha < 0:
            raise TwinError(f"alpha must be >= 0 (got {alpha})")
        if not 1 <= jobs <= MAX_JOBS:  # 0 was silently 1 (issue 32)
            raise TwinError(f"jobs must be 1 to {MAX_JOBS:,} worker processes (got {jobs})")
        self.policy_cls = policy_cls  # whose fixed-alpha runs the grid replays
        self.metric = metric
        self.alpha = 0.0 if alpha is None else float(alpha)
        # warmup, window, tuned, untuned (window never reached) or fixed
        self.phase = "warmup" if alpha is None else "fixed"
        self.multiplier = bootstrap_multiplier
        self.jobs = int(jobs)
        self.requests = 0
        self.bootstrap: dict[str, Any] = {}
        self.snapshot: CacheSnapshot | None = None
        self.window: Window = []
        # The window's replays, served as its requests arrive (:meth:`record`; one
        # process: ``jobs`` 1); ``None`` until the window's length is known.
        self.stream: GridStream | None = None

    def on_request(self, cache: Snapshots, prompt: np.ndarray, full: np.ndarray) -> None:
        """A request arrives at the policy's cache (before its lookup)."""
        self.requests += 1

    def end_warmup(self) -> None:
        """The first victim is being chosen (``marconi`` fixes its window then)."""

    def tune_if_due(self, model: ModelSpec) -> bool:
        """Tune now if the request just admitted completes the window; ``True`` if it did
        (``marconi``'s: the tuning at an insert)."""
        return False

    def record(self, model: ModelSpec, length: int, full: np.ndarray, prompt: np.ndarray) -> None:
        """Add a request to the window, which is ``length`` requests long (known from
        here on); with one process its replays start now (:class:`twin.policies.compiled.
        GridStream`: on a thread where another core is free) and go on as requests come."""
        from twin.policies.compiled import CompiledTrace, GridStream, cores

        self.window.append((full, len(prompt)))
        if self.jobs > 1:
            return  # the grid's processes replay the whole window at the tuning
        if self.stream is None:
            assert self.snapshot is not None, "a grid replays the window from its snapshot"
            trace = CompiledTrace(length, self.snapshot)
            self.stream = GridStream(
                model, self.snapshot.capacity, trace, ALPHA_GRID, self.policy_cls, cores() > 1
            )
            for req in self.window:
                self.stream.add(*req)
        else:
            self.stream.add(full, len(prompt))

    def grid(self, model: ModelSpec) -> dict[float, float]:
        """Every alpha's score of the window replayed from its snapshot (:func:`grid_scores`;
        the stream's, the same replays, where :meth:`record` started one)."""
        assert self.snapshot is not None, "a grid replays the window from its snapshot"
        if self.stream is not None:
            return run_scores(self.stream.runs(), model, self.metric)
        return grid_scores(
            self.snapshot, model, self.window, self.policy_cls, self.metric, jobs=self.jobs
        )

    def finish(self, scores: dict[float, float], **record: Any) -> None:
        """Take the best alpha of ``scores`` and record the grid; the window is dropped."""
        self.alpha = best_alpha(scores)
        self.bootstrap.update(
            completed=True,
            window_prompt_tokens=sum(n for _, n in self.window),
            grid={str(a): s for a, s in scores.items()},
            **record,
        )
        self.phase = "tuned"
        self.snapshot, self.window, self.stream = None, [], None


def best_alpha(scores: dict[float, float]) -> float:
    """The highest score; ties to the first alpha of the grid (the smallest).

    The reference takes ``max`` over results in the order its worker pool
    finished them (``tune_config``'s ``as_completed``), which is not
    deterministic; grid order is the deterministic reading of it.
    """
    return max(scores, key=lambda a: scores[a])
