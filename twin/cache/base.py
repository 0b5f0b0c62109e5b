"""What every prefix cache shares: the hit record, the policy hooks, one request's service.

Two structures implement the same cache API (``lookup``, ``speculative_insert``,
``insert``, ``pin``/``unpin``, ``touch``, ``evict``): the token-exact radix tree
(:class:`~twin.cache.prefix_cache.PrefixCache`) and the block pool of the
``vllm+`` baseline (:class:`~twin.cache.block_cache.BlockCache`). A policy
(``policies/``) decides what is admitted and what is evicted; the cache only
keeps the structure and the bytes right and calls the policy's hooks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass(slots=True)
class Hit:
    """A lookup's answer: ``length`` prompt tokens served from cache, via ``node``.

    ``node`` is what the request must pin while it runs (the node whose state
    the hit resumes from); ``None`` on a miss.
    """

    length: int
    node: Any | None


class CachePolicy(Protocol):
    """The hooks a cache calls; :class:`policies.base.Policy` implements them."""

    def bind(self, cache: Any) -> None: ...
    def on_request(self, cache: Any, prompt: np.ndarray, full: np.ndarray) -> None: ...
    def admit(self, cache: Any, prompt: np.ndarray, full: np.ndarray) -> list[int]: ...
    def on_hit(self, cache: Any, node: Any) -> None: ...
    def choose_victim(self, cache: Any) -> Any | None: ...
    def on_node_added(self, node: Any) -> None: ...
    def on_node_changed(self, node: Any) -> None: ...
    def on_node_removed(self, node: Any, into: Any | None = None) -> None: ...


def serve(cache: Any, prompt: np.ndarray, full: np.ndarray) -> Hit:
    """One request, back to back: look up, pin, decide admission, insert, unpin.

    This is the Marconi artifact's replay step (a request is looked up, then
    its input + output inserted) expressed through the two-phase API the
    engine uses with time in between: the lookup and pin happen when the
    request starts, admission is decided before its prefill (speculative
    insertion), and the insert happens when it completes. The cache clock
    (the last-access timestamps) advances by one per request.
    """
    policy = cache.policy
    policy.on_request(cache, prompt, full)
    hit = cache.lookup(prompt)
    if hit.node is not None:
        cache.pin(hit.node)
    positions = policy.admit(cache, prompt, full)
    if positions:
        cache.insert(full, positions)
    if hit.node is not None:
        cache.unpin(hit.node)
    cache.clock += 1
    return hit
