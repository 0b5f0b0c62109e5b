"""Marconi's rules in Python over the radix tree: the oracle the compiled cache is held to.

The rules' hooks themselves are ``twin.reference.marconi_tree``'s (the reference
executor mirrors tensors per radix node and runs them); this module adds the Python
alpha grid and replay.

Production runs Marconi's rules once, compiled (``twin.policies.compiled``: the
kernel's tree, its ``reference_efficiency`` / ``twin_efficiency`` and the victim rows
``reference_victim_row`` / ``twin_victim_row``, for ``marconi``, ``marconi-twin`` and
``oracle`` in every memory mode and in replays). This module is the Python
transliteration the kernel was written from, on ``twin.cache.PrefixCache`` (the
radix tree the other policies run on): the rules as hooks of the tree
(:class:`ReferenceFlopAwareEviction`, the authors' score, module docstring of
``twin.policies.reference_score``; :class:`FlopAwareEviction`, the twin's), the
policies over them (:class:`MarconiOracle`, :class:`MarconiTwinOracle`; the
production policies' bootstrap, with the alpha grid replayed here in Python), the
grid shared up to its first eviction (:func:`replay_grid`), and a replay
(:func:`python_replay`) giving what ``twin.replay.replay`` gives. The victim rows
themselves are the kernel's (one rule), held to numpy passes in
``tests/test_replay_fast_paths.py``.

The one arithmetic choice: the reference efficiency is float64 counts in the kernel's
order, then one division (``kernel.reference_efficiency``'s definition), equal to the
authors' exact integers while every count stays below 2**53
(``tests/test_marconi_compiled.py`` checks both).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from twin.cache import CacheSnapshot, PrefixCache, RequestCache, serve
from twin.model import ModelSpec
from twin.policies import POLICIES, get_policy
from twin.policies.alpha_tuning import ALPHA_GRID, score_hits
from twin.reference.marconi_tree import (  # the rules' hooks, re-exported for the tests
    FlopAwareEviction,
    MarconiTree,
    MarconiTwinTree,
    OracleFlops,
    ReferenceFlopAwareEviction,
    preorder_key,
)

__all__ = ["FlopAwareEviction", "OracleFlops", "ReferenceFlopAwareEviction", "preorder_key"]
from twin.replay import Trace, _best_of_grid, _requests, _result

# (input + output, input length[, declared modules]) per request
Request = tuple[np.ndarray, int] | tuple[np.ndarray, int, np.ndarray | None]
# (hit tokens, the hit node's nid or -1, hit tokens recomputed) per request
Served = tuple[int, int, int]


class MarconiOracle(MarconiTree):
    """``marconi`` on the radix tree (``twin.reference.marconi_tree``), the grid replayed
    in Python."""

    def make_cache(self, model: ModelSpec, capacity_bytes: int) -> Any:
        return PrefixCache(model, capacity_bytes, self)

    def grid(self, model: ModelSpec, metric: str) -> dict[float, float]:
        return python_grid_scores(self._snapshot, model, self._window, type(self), metric)


class MarconiTwinOracle(MarconiTwinTree):
    """``marconi-twin`` on the radix tree (as :class:`MarconiOracle`)."""

    def make_cache(self, model: ModelSpec, capacity_bytes: int) -> Any:
        return PrefixCache(model, capacity_bytes, self)

    def grid(self, model: ModelSpec, metric: str) -> dict[float, float]:
        return python_grid_scores(self._snapshot, model, self._window, type(self), metric)


ORACLES: dict[str, type] = {"marconi": MarconiOracle, "marconi-twin": MarconiTwinOracle}


def window_score(
    snapshot: CacheSnapshot, model: ModelSpec, window: Any, alpha: float, cls: type, metric: str
) -> float:
    """``metric`` of replaying ``window`` from ``snapshot`` under ``cls(alpha=alpha)``,
    alone (no requests shared with another alpha)."""
    cache = PrefixCache.restore(snapshot, model, cls(alpha=alpha))
    return score_hits([serve(cache, full[:n], full).length for full, n in window], model, metric)


def python_grid_scores(
    snapshot: CacheSnapshot,
    model: ModelSpec,
    window: Any,
    cls: type,
    metric: str,
    grid: Sequence[float] = ALPHA_GRID,
) -> dict[float, float]:
    """``twin.policies.alpha_tuning.grid_scores`` in Python (``cls``: an oracle class)."""
    runs = replay_grid(grid, lambda a: cls(alpha=a), model, window, start=snapshot)
    return {a: score_hits([h for h, *_ in served], model, metric) for a, _, served in runs}


def python_replay(
    trace: Trace,
    model: ModelSpec,
    capacity: int,
    name: str,
    options: dict[str, Any] | None = None,
    per_request: bool = False,
) -> Any:
    """``twin.replay.replay`` of ``marconi``, ``marconi-twin`` or ``oracle`` on the radix tree."""
    options = dict(options or {})
    start = time.perf_counter()
    if name == "oracle":  # every alpha of the grid, the best kept
        metric = options.pop("alpha_metric", "hit-rate")
        options.pop("jobs", None)
        runs = [
            _result(trace, model, name, cache, served, per_request, start)
            for _, cache, served in replay_grid(
                ALPHA_GRID,
                lambda a: MarconiOracle(alpha=a, **options),
                model,
                _requests(trace),
                capacity=capacity,
            )
        ]
        scores = [r.flops_saved if metric == "flops" else r.hit_tokens for r in runs]
        best_i = max(range(len(ALPHA_GRID)), key=lambda i: (scores[i], -ALPHA_GRID[i]))
        return _best_of_grid(runs[best_i], ALPHA_GRID, best_i, scores, start)
    cache = ORACLES[name](**options).make_cache(model, capacity)
    protocol = RequestCache(cache)
    served = [_serve(protocol, *request) for request in _requests(trace)]
    return _result(trace, model, name, cache, served, per_request, start)


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


def python_policies(monkeypatch: Any) -> None:
    """``marconi`` and ``marconi-twin`` from the registry are the oracles from here on (the
    engine's and a replay's caches, the radix tree; their grids, Python)."""
    for name, cls in ORACLES.items():
        monkeypatch.setitem(POLICIES, name, cls)


def tree_policy(name: str, **options: Any) -> Any:
    """``get_policy(name, **options)``, ``marconi`` and ``marconi-twin`` as their oracles
    (whose ``make_cache`` is the radix tree)."""
    cls = ORACLES.get(name)
    return get_policy(name, **options) if cls is None else cls(**options)
