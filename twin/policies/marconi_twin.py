"""``marconi-twin``: Marconi with the twin's own score and tuning (before issue 21).

Kept as a named variant because it differs from the authors' code
(``marconi``) in four rules; docs/decisions.md compares the two:

- recency is the last access on the cache's clock (requests served), min-max
  normalised (the reference normalises ``1 / age`` on its logical clock);
- FLOP efficiency is the model's exact prefill FLOPs of the node's own tokens
  after its parent over the bytes the node itself holds
  (``policies.compiled.kernel.scores.twin_efficiency``);
- the bootstrap window starts at the first eviction, from a snapshot taken
  then, and lasts ``bootstrap_multiplier`` times the requests served before it;
- alpha is chosen by hit tokens (or the twin's FLOPs) over the whole window;
  ties go to the smallest alpha.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from twin.errors import TwinError
from twin.policies.alpha_tuning import AlphaTuner, Snapshots
from twin.policies.marconi import MarconiPolicy

ALPHA_METRICS = ("hit-rate", "flops")


class TwinBootstrap(AlphaTuner):
    """The twin's window: from a snapshot at the first eviction, ``bootstrap_multiplier``
    times the requests served before it; tuned when the request after it arrives."""

    _window_len = 0

    def on_request(self, cache: Snapshots, prompt: np.ndarray, full: np.ndarray) -> None:
        self.requests += 1
        if self.phase == "warmup" and cache.evictions:
            before = self.requests - 1  # requests served before this one, eviction included
            self._window_len = max(1, round(self.multiplier * before))
            self.snapshot = cache.snapshot()
            self.bootstrap = {
                "requests_before_first_eviction": before,
                "window_start": before,
                "window_requests": self._window_len,
                "completed": False,
            }
            self.phase = "window"
        if self.phase == "window":
            if len(self.window) < self._window_len:
                self.record(cache.model, self._window_len, full, prompt)
                return
            self.finish(self.grid(cache.model), metric=self.metric)


class MarconiTwinPolicy(MarconiPolicy):
    """FLOP-aware eviction with a bootstrapped alpha (or a fixed one when ``alpha`` is given):
    the compiled live cache under the twin's score, given the twin's bootstrap."""

    name = "marconi-twin"
    rules: ClassVar[str] = "twin"
    tuner_cls: ClassVar[type[AlphaTuner]] = TwinBootstrap
    OPTIONS: ClassVar[tuple[str, ...]] = ("alpha", "bootstrap_multiplier", "alpha_metric", "jobs")

    def __init__(
        self,
        alpha: float | None = None,
        bootstrap_multiplier: float = 5,
        alpha_metric: str = "hit-rate",
        jobs: int = 1,
    ) -> None:
        if alpha_metric not in ALPHA_METRICS:
            raise TwinError(
                f"alpha metric {alpha_metric!r} unknown; valid: {', '.join(ALPHA_METRICS)}"
            )
        super().__init__(alpha, bootstrap_multiplier, jobs, alpha_metric)
