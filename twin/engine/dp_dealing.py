"""Which attention-DP rank a request goes to (``twin.engine.dp_attention``).

**Requests are dealt to ranks** by the engine's rule (:data:`DEALERS`): SGLang's DP
controller round-robin (``load_balance_method`` default ``round_robin``,
``server_args.py`` 0.5.4); vLLM's ``DPLBAsyncMPClient.get_core_engine_for_request``
(``vllm/v1/engine/core_client.py``, 0.11.0): the lowest ``4 x waiting + running``,
scanning from rank 0 (vLLM reads the counts from the coordinator's 100 ms stats; the
twin reads them now); TensorRT-LLM's ``balance_requests_across_ranks``
(``tensorrt_llm/_torch/pyexecutor/request_utils.py``, main as indexed in 2026): among
the ranks below the expected active count, the fewest active tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from twin.engine.replica import Replica


class RankLoad:
    """What a dealer sees of a rank: requests waiting, running, and outstanding tokens."""

    __slots__ = ("running", "tokens", "waiting")

    def __init__(self, rank: Replica) -> None:
        s: Any = rank.scheduler
        self.waiting = len(s.waiting)
        self.running = len(s.prefilling) + len(s.decoding)
        self.tokens = rank.outstanding_tokens


class Dealer:
    """Which rank a new request goes to (one per engine's rule, :data:`DEALERS`)."""

    name: ClassVar[str] = ""

    def pick(self, loads: Sequence[RankLoad]) -> int:
        raise NotImplementedError


class RoundRobin(Dealer):
    """SGLang's ``DataParallelController.round_robin_scheduler`` (0.5.4): in turn."""

    name = "round-robin"

    def __init__(self) -> None:
        self.next = 0

    def pick(self, loads: Sequence[RankLoad]) -> int:
        i = self.next
        self.next = (i + 1) % len(loads)
        return i


class VLLMLeastLoaded(Dealer):
    """vLLM's ``DPLBAsyncMPClient.get_core_engine_for_request`` (0.11.0): the lowest
    ``waiting x 4 + running``, the first such from rank 0."""

    name = "vllm-least-loaded"

    def pick(self, loads: Sequence[RankLoad]) -> int:
        scores = [4 * x.waiting + x.running for x in loads]
        return scores.index(min(scores))


class TRTLLMBalanced(Dealer):
    """TensorRT-LLM's ``balance_requests_across_ranks``: of the ranks with fewer active
    requests than ``max(ceil((active + 1) / D), most active)``, the one with the fewest
    active tokens (then requests, then rank: its heap's order)."""

    name = "trtllm-balanced"

    def pick(self, loads: Sequence[RankLoad]) -> int:
        active = [x.waiting + x.running for x in loads]
        expected = max(-(-(sum(active) + 1) // len(loads)), max(active))
        keys = [
            (x.tokens, a, i)
            for i, (x, a) in enumerate(zip(loads, active, strict=True))
            if a < expected
        ]
        return min(keys)[2] if keys else 0


DEALERS: dict[str, type[Dealer]] = {
    cls.name: cls for cls in (RoundRobin, VLLMLeastLoaded, TRTLLMBalanced)
}


# The engine mode's rule; other modes deal round-robin (SGLang's default).
DEALER_OF_ENGINE = {
    "sglang": "round-robin",
    "vllm": "vllm-least-loaded",
    "trtllm": "trtllm-balanced",
}


def dealer_for(engine: str) -> Dealer:
    """The dealer of engine mode ``engine`` (round-robin for the twin's own modes)."""
    return DEALERS[DEALER_OF_ENGINE.get(engine, "round-robin")]()


__all__ = [
    "DEALERS",
]
