"""``marconi-twin``: Marconi with the twin's own score and tuning (before issue 21).

Kept as a named variant because it differs from the authors' code
(``marconi``) in four rules; docs/decisions.md compares the two:

- recency is the last access on the cache's clock (requests served), min-max
  normalised (the reference normalises ``1 / age`` on its logical clock);
- FLOP efficiency is the model's exact prefill FLOPs of the node's own tokens
  after its parent over the bytes the node itself holds
  (``policies.compiled.kernel.twin_efficiency``);
- the bootstrap window starts at the first eviction, from a snapshot taken
  then, and lasts ``bootstrap_multiplier`` times the requests served before it;
- alpha is chosen by hit tokens (or the twin's FLOPs) over the whole window;
  ties go to the smallest alpha.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from twin.errors import TwinError
from twin.model import ModelSpec
from twin.policies.alpha_tuning import TunedAlpha
from twin.policies.base import Policy
from twin.policies.compiled.live import LiveCache

ALPHA_METRICS = ("hit-rate", "flops")


class MarconiTwinPolicy(TunedAlpha, Policy):
    """FLOP-aware eviction with a bootstrapped alpha (or a fixed one when ``alpha`` is given):
    the bootstrap window and its record; the score runs in the compiled cache
    (:mod:`policies.compiled.live`)."""

    name = "marconi-twin"
    description = "marconi with the twin's earlier score and tuning (linear recency, own bytes)"
    rules: ClassVar[str] = "twin"
    cache: LiveCache  # bound by the live cache it makes (``TunedAlpha.make_cache``)
    OPTIONS: ClassVar[tuple[str, ...]] = ("alpha", "bootstrap_multiplier", "alpha_metric", "jobs")

    def __init__(
        self,
        alpha: float | None = None,
        bootstrap_multiplier: float = 5,
        alpha_metric: str = "hit-rate",
        jobs: int = 1,
    ) -> None:
        super().__init__()
        self.alpha = 0.0 if alpha is None else float(alpha)
        if alpha_metric not in ALPHA_METRICS:
            raise TwinError(
                f"alpha metric {alpha_metric!r} unknown; valid: {', '.join(ALPHA_METRICS)}"
            )
        self.metric = alpha_metric
        self.start_tuning(alpha, bootstrap_multiplier, jobs)
        self._window_len = 0

    # ----- the bootstrap -------------------------------------------------------
    def on_request(self, prompt: np.ndarray, full: np.ndarray) -> None:
        cache = self.cache
        self.requests += 1
        if self.phase == "warmup" and cache.evictions:
            before = self.requests - 1  # requests served before this one, eviction included
            self._window_len = max(1, round(self.multiplier * before))
            self._snapshot = cache.snapshot()
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
        self.finish_tuning(self.grid(model, self.metric), metric=self.metric)
