"""``marconi``: Marconi (arXiv 2411.19379, sec. 4) as its authors' code runs it.

Admission (sec. 4.1) is the judicious rule (:mod:`policies.admissions`); eviction is
the reference code's score (:mod:`policies.reference_score`); both run compiled,
on the cache this policy runs on (:mod:`policies.compiled.live`). Alpha follows
the reference code's retrospective tuning (github.com/ruipeterpan/marconi),
:class:`ReferenceBootstrap`, the tuner this policy is given:

- alpha is 0 until tuned (``policy_exploration.py`` starts every run at
  ``eff_weight=0``);
- the cache is snapshotted at the first request, while still empty
  (``RadixCache.match_prefix``: ``tree_snapshot`` when ``request_history`` is
  empty), and every request from then on is recorded;
- the first eviction fixes the bootstrap window at ``bootstrap_multiplier``
  times the requests seen so far, the evicting one included (``RadixCache.evict``:
  ``num_reqs_before_eviction = len(request_history)``);
- when the request that completes the window is inserted, its input + output
  included, every alpha of the grid replays the whole window from the empty
  snapshot and the alpha saving the most FLOPs over the window's last 500
  requests wins (``RadixCache.insert`` calling ``ConfigTuner.tune_config``;
  metric and tie-break in :mod:`policies.alpha_tuning`); it applies from that
  insert on, and is never tuned again. A window that ends at the evicting
  request itself (multiplier 1) is never tuned, as in the reference.

``marconi-twin`` (:mod:`policies.marconi_twin`) keeps the twin's earlier rules.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from twin.model import ModelSpec
from twin.policies.alpha_tuning import AlphaTuner, Snapshots
from twin.policies.base import Policy
from twin.policies.compiled.live import LiveCache

BOOTSTRAP_MULTIPLIER = 5  # policy_exploration.py's --bootstrap_multiplier default (15 for LMSys)


class ReferenceBootstrap(AlphaTuner):
    """The reference code's window: from the first request's snapshot; its length fixed
    at the first victim choice (:meth:`end_warmup`); tuned at the insert completing it."""

    _window_len: int | None = None  # fixed at the first victim choice

    def on_request(self, cache: Snapshots, prompt: np.ndarray, full: np.ndarray) -> None:
        self.requests += 1
        if self.phase not in ("warmup", "window"):
            return
        if self.snapshot is None:
            self.snapshot = cache.snapshot()
        if self._window_len is None:
            self.window.append((full, len(prompt)))
        elif len(self.window) < self._window_len:
            self.record(cache.model, self._window_len, full, prompt)

    def tune_if_due(self, model: ModelSpec) -> bool:
        if (
            self.phase == "window"
            and self._window_len is not None
            and self.requests >= self._window_len
        ):
            self.finish(
                self.grid(model),
                tuned_at_request=self.requests,
                metric="reference FLOPs saved, last 500 requests",
            )
            return True
        return False

    def end_warmup(self) -> None:
        if self.phase == "warmup":
            before = self.requests
            self._window_len = max(1, round(self.multiplier * before))
            self.bootstrap = {
                "requests_before_first_eviction": before,
                "window_requests": self._window_len,
                "completed": False,
            }
            # The reference checks for the window's end before evicting: a window
            # ending at this very request is never reached.
            self.phase = "window" if self._window_len > before else "untuned"
            del self.window[self._window_len :]


class MarconiPolicy(Policy):
    """A Marconi policy: the compiled live cache (its structure, judicious admission and
    eviction score by :attr:`rules`) and the alpha :attr:`tuner` it is given (here the
    reference bootstrap, or a fixed ``alpha``). The live cache tells the tuner of its
    first victim choice (``end_warmup``) and of each admission (``tune_if_due``)."""

    name = "marconi"
    OPTIONS: ClassVar[tuple[str, ...]] = ("alpha", "bootstrap_multiplier", "jobs")
    rules: ClassVar[str] = "reference"  # the compiled score: the authors' (or ``twin``)
    tuner_cls: ClassVar[type[AlphaTuner]] = ReferenceBootstrap  # how alpha is tuned
    cache: LiveCache  # bound by the live cache it runs on (every memory mode, replays)
    structure = "compiled-radix"
    tuner: AlphaTuner

    def __init__(
        self,
        alpha: float | None = None,
        bootstrap_multiplier: float = BOOTSTRAP_MULTIPLIER,
        jobs: int = 1,
        metric: str = "reference",
    ) -> None:
        super().__init__()
        self.tuner = self.tuner_cls(type(self), alpha, bootstrap_multiplier, jobs, metric)

    @property
    def alpha(self) -> float:
        return self.tuner.alpha

    def on_request(self, prompt: np.ndarray, full: np.ndarray) -> None:
        super().on_request(prompt, full)
        self.tuner.on_request(self.cache, prompt, full)

    def stats(self) -> dict[str, Any]:
        t = self.tuner
        return {
            "alpha": t.alpha,
            "alpha_source": t.phase,
            "rules": self.rules,
            "bootstrap": t.bootstrap,
        }
