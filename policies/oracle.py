"""``oracle``: Marconi's eviction with the best static alpha in hindsight (an upper bound).

Not realisable online: the replay runs the whole trace once per alpha of the
grid (0.0..2.0 by 0.1) and reports the best run (most hit tokens, or FLOPs
saved), ties to the smallest alpha. It bounds what Marconi's online alpha
tuning (sec. 4.2) can buy; it is not one of the paper's systems.
"""

from __future__ import annotations

from typing import ClassVar

from policies.marconi import ALPHA_GRID, MarconiPolicy


class OraclePolicy(MarconiPolicy):
    """One fixed-alpha Marconi run; ``twin.replay`` sweeps ``alpha_grid`` and keeps the best."""

    name = "oracle"
    description = "marconi eviction with the best static alpha for the whole trace (hindsight)"
    OPTIONS = ("alpha", "alpha_metric", "jobs")
    hindsight: ClassVar[bool] = True
    alpha_grid: ClassVar[tuple[float, ...]] = ALPHA_GRID

    def __init__(self, alpha: float = 0.0, alpha_metric: str = "hit-rate", jobs: int = 1) -> None:
        super().__init__(alpha=alpha, alpha_metric=alpha_metric, jobs=jobs)
