"""The policy interface: a structure, an admission rule, an eviction order, a tuner.

A policy is bound to one cache (:meth:`Policy.bind`), the structure it runs on: it
declares which as data (``structure``, ``recurrent_structure``, ``fast_structure``), and
:func:`twin.policies.structures.choose_structure` chooses one by the model's layer kinds
and the cache's holder and builds it; it admits by a rule of
:mod:`twin.policies.admissions`, evicts in an order of
:mod:`twin.policies.eviction_orders` (or by Marconi's compiled score) and keeps its
own state (candidate heaps, hit counts, stamps) beside the structure, current through
the cache's hooks, so that choosing a victim never scans the tree.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from twin.cache import HeldCache, Node, PrefixCache
from twin.policies.admissions import Admits, Rule


class Policy:
    """Base class: what every policy is to its callers (the registry's, the engine's, a
    replay's): a name and options, the structures it runs on, admission, its stats.
    Subclasses fill in the rules; a radix tree's policy is a :class:`RadixPolicy`."""

    name: ClassVar[str] = ""
    # Keyword options this policy accepts from ``get_policy(name, **options)``.
    OPTIONS: ClassVar[tuple[str, ...]] = ()
    # What callers ask of a policy, declared rather than probed:
    # ``hindsight``: a bound computed from the whole trace (one replay per
    # alpha of ``alpha_grid``, the best kept); it cannot serve requests online.
    hindsight: ClassVar[bool] = False
    alpha_grid: ClassVar[tuple[float, ...]] = ()
    # The structures it runs on, names of ``twin.policies.structures.STRUCTURES``
    # (``choose_structure`` picks one): on a model of attention layers alone; on one
    # with recurrent layers (``None``: the same); and one with the same answers and
    # less work where the holder calls nothing of the structure itself (``None``: none).
    structure: str
    recurrent_structure: str | None = None
    fast_structure: str | None = None

    # The cache this policy serves, set once by :meth:`bind` (a subclass names its kind).
    cache: HeldCache

    def __init__(self) -> None:
        pass

    # ----- lifecycle ----------------------------------------------------------
    def bind(self, cache: HeldCache) -> None:
        """Called once by the cache that this policy serves."""
        self.cache = cache

    def on_request(self, prompt: np.ndarray, full: np.ndarray) -> None:
        """A request arrives (before its lookup)."""

    def stats(self) -> dict[str, Any]:
        """Policy-specific numbers for reports (e.g. the tuned alpha)."""
        return {}


class RulePolicy(Policy):
    """A policy on a Python structure (the radix tree, the block pool, the module store):
    it admits by its rule (:mod:`twin.policies.admissions`), set by its constructor."""

    cache: Admits
    admission: Rule

    def admit(self, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        """Token positions of ``full`` (input + output) after which to keep the SSM state."""
        return self.admission(self.cache, prompt, full)


class RadixPolicy(RulePolicy):
    """A policy of the radix tree (:class:`twin.cache.PrefixCache`): the tree's hooks
    (:class:`twin.cache.TreePolicy`), which keep the policy's candidates current so that
    choosing a victim never scans the tree. Caches nothing special, evicts nothing."""

    cache: PrefixCache
    structure = "radix"

    def on_hit(self, node: Node) -> None:
        """A lookup hit ``node``: refresh it (what else is refreshed is the policy's rule)."""
        self.cache.touch(node)

    def choose_victim(self) -> Node | None:
        """The node to evict next, or ``None`` if no candidate is left."""
        return None

    # ----- hooks keeping the candidate structure current ----------------------
    def on_node_added(self, node: Node) -> None:
        self.on_node_changed(node)

    def on_node_changed(self, node: Node) -> None:
        """Anything about ``node`` changed: children, pins, checkpoint, tokens, last access."""

    def on_node_removed(self, node: Node, into: Node | None = None) -> None:
        """``node`` left the cache; ``into`` is the child that took its KV, if any."""
