"""``oracle``: Marconi's eviction with the best static alpha in hindsight (an upper bound).

Not realisable online: the replay runs the whole trace once per alpha of the
grid (0.0..2.0 by 0.1) under ``marconi``'s reference score and reports the
best run (most hit tokens, or FLOPs saved), ties to the smallest alpha. It is
the reference code's "V3" (``policy_exploration.py``: ``evict_policy_version=3``
at every alpha of the same grid, the best hit rate and the best FLOPs each
reported); it bounds what the online alpha tuning (sec. 4.2) can buy.
"""

from __future__ import annotations

from typing import ClassVar

from twin.errors import TwinError
from twin.policies.alpha_tuning import ALPHA_GRID
from twin.policies.marconi import MarconiPolicy
from twin.policies.marconi_twin import ALPHA_METRICS


class OraclePolicy(MarconiPolicy):
    """One fixed-alpha Marconi run; ``twin.replay`` sweeps ``alpha_grid`` and keeps the best."""

    name = "oracle"
    OPTIONS: ClassVar[tuple[str, ...]] = ("alpha", "alpha_metric", "jobs")
    hindsight: ClassVar[bool] = True
    alpha_grid: ClassVar[tuple[float, ...]] = ALPHA_GRID

    def __init__(self, alpha: float = 0.0, alpha_metric: str = "hit-rate", jobs: int = 1) -> None:
        super().__init__(alpha=alpha, jobs=jobs)
        if alpha_metric not in ALPHA_METRICS:
            raise TwinError(
                f"alpha metric {alpha_metric!r} unknown; valid: {', '.join(ALPHA_METRICS)}"
            )
        self.alpha_metric = alpha_metric
