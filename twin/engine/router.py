"""Routers: which replica serves a request, chosen by name from a registry.

A router sees the request (session id, prompt) and the replicas' public load
(``outstanding_tokens``: prompt + output tokens of requests routed there and
not yet completed) and caches. Routing happens at arrival, before the request
queues; the cache lookup that decides the hit happens later, at admission.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from twin.errors import lookup

if TYPE_CHECKING:  # annotations only: listing the routers (a help) imports neither
    import numpy as np

    from twin.cache import HeldCache


class Routable(Protocol):
    """What a router may read of a replica."""

    index: int
    outstanding_tokens: int
    cache: HeldCache


class Router:
    """Base class; subclasses set ``name`` and implement :meth:`route`."""

    name: ClassVar[str] = ""
    # True when :meth:`route` depends on the session id alone (then a session's
    # turns all go where its first went, and the cluster asks once a session).
    by_session: ClassVar[bool] = False
    # True when it places requests where their prefixes may be cached (a session's turns
    # together, or the replica holding the longest prefix): ``twin plan --routers auto``
    # searches such a router only for a workload that reuses prefixes.
    reuse: ClassVar[bool] = False

    def route(self, session_id: int, prompt: np.ndarray, replicas: Sequence[Routable]) -> int:
        """Index of the replica that gets this request."""
        raise NotImplementedError


class RoundRobin(Router):
    name = "round-robin"

    def __init__(self) -> None:
        self._next = 0

    def route(self, session_id: int, prompt: np.ndarray, replicas: Sequence[Routable]) -> int:
        i = self._next
        self._next = (i + 1) % len(replicas)
        return i


def _least_loaded(replicas: Sequence[Routable], start: int = 0) -> int:
    """Fewest outstanding tokens; ties go to the first found scanning from ``start``."""
    n = len(replicas)
    best, best_load = -1, 0
    for k in range(n):
        i = (start + k) % n
        load = replicas[i].outstanding_tokens
        if best < 0 or load < best_load:
            best, best_load = i, load
    return best


class LeastLoaded(Router):
    name = "least-loaded"

    def __init__(self) -> None:
        self._start = 0

    def route(self, session_id: int, prompt: np.ndarray, replicas: Sequence[Routable]) -> int:
        # Ties rotate (an idle cluster is served round-robin, not all by replica 0).
        self._start = (self._start + 1) % len(replicas)
        return _least_loaded(replicas, self._start)


def _mix(x: int) -> int:
    """splitmix64 finaliser: spreads consecutive session ids evenly (Python's hash does not)."""
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


class SessionAffinity(Router):
    name = "session-affinity"
    by_session = True
    reuse = True

    def route(self, session_id: int, prompt: np.ndarray, replicas: Sequence[Routable]) -> int:
        # A stateless hash is sticky by construction and keeps no per-session
        # table, so memory stays flat over millions of sessions.
        return _mix(session_id) % len(replicas)


class PrefixAware(Router):
    """Longest cached prefix across replicas, ties by load, skipping overloaded replicas.

    A replica is eligible when its outstanding tokens are at most
    ``load_cap`` x the cluster mean + ``slack_tokens`` (the slack keeps a
    nearly idle cluster from counting as imbalanced), which the least loaded
    always is. SGLang's cache-aware router balances in the same spirit.
    """

    name = "prefix-aware"
    reuse = True

    def __init__(self, load_cap: float = 2.0, slack_tokens: int = 16384) -> None:
        self.load_cap = load_cap
        self.slack = slack_tokens
        self._start = 0

    def route(self, session_id: int, prompt: np.ndarray, replicas: Sequence[Routable]) -> int:
        n = len(replicas)
        loads = [r.outstanding_tokens for r in replicas]
        # The least loaded replica is always under the limit (min <= mean).
        limit = self.load_cap * sum(loads) / n + self.slack
        self._start = (self._start + 1) % n  # ties rotate, as in least-loaded
        best, best_hit, best_load = -1, -1, 0
        for k in range(n):
            i = (self._start + k) % n
            if loads[i] > limit:
                continue
            hit = replicas[i].cache.peek(prompt)  # lookup would refresh recency
            if hit > best_hit or (hit == best_hit and loads[i] < best_load):
                best, best_hit, best_load = i, hit, loads[i]
        return best


ROUTERS: dict[str, type[Router]] = {
    cls.name: cls for cls in (RoundRobin, LeastLoaded, SessionAffinity, PrefixAware)
}
# The router of a run that names none (twin simulate, report capacity, plan).
DEFAULT_ROUTER = RoundRobin.name


def get_router(name: str, **options: Any) -> Router:
    """A fresh router called ``name``; a ``TwinError`` listing the valid names otherwise."""
    return lookup(ROUTERS, name, "router", "valid routers")(**options)
