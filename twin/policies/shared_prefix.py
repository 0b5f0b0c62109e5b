"""One replay per alpha of a grid, sharing the requests served before any alpha mattered.

Marconi's bootstrap (``policies.alpha_tuning``) and the ``oracle`` bound
(``twin.replay``) replay the same requests from the same state once per alpha.
Alpha only enters the victim's choice, so every replay is the same replay
until its first eviction. This module replays the first alpha in full, notes
the request during which it first evicted (the same for every alpha), serves
the requests before it once more into a second cache, and resumes every other
alpha from a copy of that cache (the tree's snapshot plus the policy's own
state, :meth:`policies.base.Policy.export_state`). The results are exactly
those of the independent replays (tests compare them on random traces).

Why not share more (fork only where two alphas choose different victims): on
the chat benchmark trace, all 21 alphas of Marconi's grid choose different
victims within about 100 requests of the first eviction (docs/decisions.md,
"Speed and scale"), so forking after it saves next to nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from twin.cache import CacheSnapshot, PrefixCache, RequestCache
from twin.model import ModelSpec

# (input + output, input length[, declared modules]) per request
Request = tuple[np.ndarray, int] | tuple[np.ndarray, int, np.ndarray | None]
# (hit tokens, the hit node's nid or -1, hit tokens recomputed) per request
Served = tuple[int, int, int]


def replay_grid(
    grid: Sequence[float],
    make_policy: Callable[[float], Any],
    model: ModelSpec,
    requests: Sequence[Request],
    start: CacheSnapshot | None = None,
    capacity: int = 0,
    on_request: Callable[[], None] | None = None,
) -> Iterator[tuple[float, Any, list[Served]]]:
    """``(alpha, cache, served)`` for each alpha of ``grid``, in order.

    A grid that never evicts yields the first alpha's cache for every alpha
    (the same object: only its contents, not its policy's alpha, apply).

    Each cache is what serving ``requests`` (``twin.cache.serve``) under
    ``make_policy(alpha)`` leaves, starting from ``start`` (restored) or,
    without one, from an empty cache of ``capacity`` bytes. ``on_request``
    is called once per request per alpha, shared ones included.
    """
    tick = on_request or _nothing

    def fresh(alpha: float) -> Any:
        return _start(make_policy(alpha), model, start, capacity)

    first = fresh(grid[0])
    before = first.evictions
    served: list[Served] = []
    shared = None  # requests served before the first eviction
    protocol = RequestCache(first)
    for request in requests:
        served.append(_serve(protocol, *request))
        if shared is None and first.evictions != before:
            shared = len(served) - 1
        tick()
    yield grid[0], first, served
    if shared is None:  # never evicted: alpha never mattered
        for alpha in grid[1:]:
            for _ in requests:
                tick()
            yield alpha, first, list(served)
        return
    fork = None
    if shared > 0:
        common = fresh(grid[0])
        protocol = RequestCache(common)
        for request in requests[:shared]:
            _serve(protocol, *request)
        fork = (common.snapshot(), common.policy.export_state())
    for alpha in grid[1:]:
        if fork is None:
            cache = fresh(alpha)
        else:
            policy = make_policy(alpha)
            cache = PrefixCache.restore(fork[0], model, policy)
            policy.import_state(fork[1], {node.nid: node for node in cache.tree.nodes()})
        own = served[:shared]
        for _ in range(shared):
            tick()
        protocol = RequestCache(cache)
        for request in requests[shared:]:
            own.append(_serve(protocol, *request))
            tick()
        yield alpha, cache, own


def _start(policy: Any, model: ModelSpec, start: CacheSnapshot | None, capacity: int) -> Any:
    if start is None:
        return policy.make_cache(model, capacity)
    return PrefixCache.restore(start, model, policy)


def _serve(
    protocol: RequestCache, full: np.ndarray, n: int, modules: np.ndarray | None = None
) -> Served:
    hit = protocol.serve(full[:n], full, modules)
    return hit.length, getattr(hit.node, "nid", -1), hit.recompute


def _nothing() -> None:
    return None
