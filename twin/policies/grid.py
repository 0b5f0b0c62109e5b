"""The alpha grid search's process pool, shared by Marconi's bootstrap and the oracle's replay.

Both score every alpha of a grid by replaying requests from the same state
(a snapshot and a bootstrap window; a whole trace). That state is large, so
it is sent once to each worker (the pool's initializer) rather than with
every alpha; the alphas come back in grid order, so the result does not
depend on ``jobs``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from twin.workers import guarded_executor

T = TypeVar("T")

_WORKER: dict[str, Any] = {}


def map_alphas(
    score: Callable[..., T], shared: tuple[Any, ...], grid: tuple[float, ...], jobs: int = 1
) -> Iterator[T]:
    """``score(*shared, alpha)`` for each alpha of ``grid``, in order, over ``jobs`` processes.

    ``score`` must be a module-level function (workers import it by name).
    A generator: each result is yielded as soon as it and those before it are done.
    """
    if jobs <= 1 or len(grid) <= 1:
        for alpha in grid:
            yield score(*shared, alpha)
        return
    # Guarded: a killed replay takes its workers with it (issue 32).
    with guarded_executor(min(jobs, len(grid)), _init_worker, (score, shared)) as pool:
        yield from pool.map(_worker_score, grid)


def _init_worker(score: Callable[..., Any], shared: tuple[Any, ...]) -> None:
    _WORKER.update(score=score, shared=shared)


def _worker_score(alpha: float) -> Any:
    return _WORKER["score"](*_WORKER["shared"], alpha)
