"""What a replica made of parts shows as one scheduler: its warm-up and its token gaps.

Attention-DP ranks (``twin.engine.dp_attention.DPReplica``) and pipeline lanes
(``twin.engine.pipeline.PipelineScheduler``) each run their own scheduler; the cluster sets
one warm-up on the whole (``replica.scheduler.warmup_s``) and reads one set of gaps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twin.token_gaps import TokenGaps


class PartsClock:
    """The warm-up handed to every part's scheduler, and the parts' token gaps merged."""

    _warmup_s: float = 0.0

    def _part_schedulers(self) -> Sequence[Any]:
        """The schedulers of the parts (each with ``warmup_s`` and ``token_gaps()``)."""
        raise NotImplementedError

    @property
    def warmup_s(self) -> float:
        return self._warmup_s

    @warmup_s.setter
    def warmup_s(self, value: float) -> None:
        self._warmup_s = value
        for part in self._part_schedulers():
            part.warmup_s = value

    def token_gaps(self) -> TokenGaps:
        return TokenGaps.merged([part.token_gaps() for part in self._part_schedulers()])


__all__ = ["PartsClock"]
