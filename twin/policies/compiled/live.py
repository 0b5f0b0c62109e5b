"""``marconi`` in the engine as compiled code: a live prefix cache, request by request.

The engine's replicas each hold one cache for a whole run and go through the
request protocol (:class:`twin.cache.requests.RequestCache`) a step at a time:
a request's admission (lookup, pin, checkpoint positions), the insert at its
prefill's end, the insert at its completion and its release, interleaved with
other requests'. :class:`LiveCache` runs that protocol on the compiled tree of
:mod:`policies.compiled.kernel` (its section 4: tokens kept per edge, node ids
reused, so memory follows what is cached), with the same operations in the same
order as ``PrefixCache`` under :class:`policies.marconi.MarconiPolicy`, so every
hit, victim and counter is the Python path's (``tests/test_marconi_live.py``
interleaves the protocol at random on both and compares them).

The policy object stays the Python one, for what is not per-token work: the
bootstrap window's requests, its snapshot (an empty cache: the window starts
at the first request), the alpha grid's replays (themselves compiled:
:mod:`policies.compiled`) and its stats. The compiled side tells it of the
first victim choice (``kernel.S_CHOSE``), and takes the tuned alpha.

Where it applies (:func:`live_cache`): ``marconi`` itself, a model the compiled
replay supports, the engine's cache without a host tier, dedicated (``--cache-gb
G``) or in a shared pool (``--cache-gb auto``: the pool sets its capacity and
reclaims pages through :meth:`LiveCache.shrink_to`), a workload without declared
prompt modules whose longest sequence keeps every efficiency exact.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from twin.cache import PrefixCache
from twin.cache.base import Hit
from twin.cache.requests import Admission
from twin.model import ModelSpec

if TYPE_CHECKING:
    from twin.policies.marconi import MarconiPolicy

_MISS = Hit(0, None)


@dataclass(frozen=True, slots=True)
class ServedNode:
    """The node a served request hit, by creation id (``RequestCache.serve``'s
    ``hit.node.nid``, what a replay records): its own node is not pinned any more."""

    nid: int


def live_cache(
    policy: MarconiPolicy, model: ModelSpec, capacity: int, longest: Callable[[], int]
) -> LiveCache | None:
    """A :class:`LiveCache` running ``policy`` exactly, or ``None`` where it cannot."""
    from twin.policies.compiled import _supported_model, exact_up_to
    from twin.policies.marconi import MarconiPolicy

    if type(policy) is not MarconiPolicy:
        return None
    if not _supported_model(model, MarconiPolicy) or not exact_up_to(model, longest()):
        return None
    return LiveCache(model, capacity, policy)


def _scalar(slot: str) -> Any:
    """A read-only attribute: the kernel's scalar ``kernel.<slot>`` as a Python int."""
    return property(lambda self: int(self.sc[getattr(self.k, slot)]))


class LiveCache:
    """The compiled cache's state and what reports read of it (``cache_stats``, occupancy)."""

    has_ssm = True

    def __init__(self, model: ModelSpec, capacity: int, policy: MarconiPolicy) -> None:
        from twin.policies.compiled import constants
        from twin.policies.compiled import kernel as k

        self.k = k
        self.model = model
        self.policy = policy
        policy.bind(self)
        mc, mf = constants(model, int(capacity), k.REFERENCE)
        mc[k.M_LIVE] = 1
        mf[k.F_ALPHA] = policy.alpha
        self.mf = mf
        self.st = k.live_start(mc, mf, 64, 1024)
        self.sc = self.st[1]
        self._kvpt, self._ckb = int(mc[k.M_KVPT]), int(mc[k.M_CKB])

    # ----- capacity: a shared pool moves it and reclaims pages ------------------------
    @property
    def capacity(self) -> int:
        return int(self.st[2][self.k.M_CAP])

    @capacity.setter
    def capacity(self, nbytes: int) -> None:
        self.st[2][self.k.M_CAP] = nbytes

    def shrink_to(self, limit: int) -> int:
        """``PrefixCache.shrink_to``: evict victims until at most ``limit`` bytes are cached,
        set the capacity (never below what pinned nodes keep); the bytes still cached."""
        self.capacity = max(int(limit), 0)
        self.k.live_shrink(self.st)
        self.capacity = max(self.capacity, self.used_bytes)
        policy = self.policy
        if policy.phase == "warmup" and self.sc[self.k.S_CHOSE]:
            policy.end_warmup()  # ``MarconiPolicy.choose_victim``'s first call
        return self.used_bytes

    # ----- reads ----------------------------------------------------------------------
    @property
    def clock(self) -> int:
        return int(self.sc[self.k.S_CLOCK])

    @property
    def kv_bytes(self) -> int:
        return int(self.sc[self.k.S_KV]) * self._kvpt

    @property
    def ssm_bytes(self) -> int:
        return int(self.sc[self.k.S_CKPTS]) * self._ckb

    @property
    def used_bytes(self) -> int:
        return self.kv_bytes + self.ssm_bytes

    # The counters ``cache_stats`` reads (``twin.cache.base.COUNTERS``), from the kernel's.
    evictions = _scalar("S_EVICTIONS")
    checkpoints_admitted = _scalar("S_ADMITTED")
    checkpoints_hit = _scalar("S_CKHIT")
    peak_bytes = _scalar("S_PEAK")
    peak_kv_bytes = _scalar("S_PEAK_KV")
    peak_ssm_bytes = _scalar("S_PEAK_SSM")

    @property
    def num_nodes(self) -> int:
        return int(self.k.counters(self.st)[3]) + 1  # the root, as ``RadixTree.num_nodes``

    def peek(self, seq: np.ndarray) -> int:
        """Tokens a lookup of ``seq`` would hit now (``PrefixCache.peek``)."""
        q = np.asarray(seq, dtype=np.int32)
        st = self.st
        return int(self.k.live_peek(st[0], st[8], st[9], st[12], q, len(q)))

    def snapshot(self) -> Any:
        """``PrefixCache.snapshot``, taken by the policy at the first request: the cache is
        empty then (an engine's cache starts empty), so it is an empty cache's."""
        sc, k = self.sc, self.k
        if sc[k.S_NEXT] - 1 - sc[k.S_FREE] != 0:
            raise NotImplementedError("a live cache is snapshotted only while empty")
        empty = PrefixCache(self.model, self.capacity, type(self.policy)(alpha=self.policy.alpha))
        empty.set_clock(self.clock)
        return empty.snapshot()

    def request_cache(self) -> LiveRequests:
        """The request protocol on this cache (``twin.cache.requests.request_cache_for``)."""
        return LiveRequests(self)

    # ----- room, made between calls ---------------------------------------------------
    def grow_for(self, tokens: int) -> None:
        """Grow the arrays for an insert of up to ``tokens`` tokens (``kernel.live_room``):
        doubled, so growing costs O(1) an insert."""
        st, k = self.st, self.k
        nodes = st[0].shape[1]
        need_tokens = k.live_tokens_needed(int(self.sc[k.S_KV]), tokens)
        short_nodes = nodes - int(self.sc[k.S_NEXT]) + int(self.sc[k.S_FREE]) < k.LIVE_NODE_SLACK
        grown_nodes = 2 * nodes if short_nodes else nodes
        grown_tokens = max(need_tokens, 2 * len(st[9])) if len(st[9]) < need_tokens else 0
        self.st = k.live_grow(st, grown_nodes, grown_tokens)
        self.sc = self.st[1]


class LiveRequests:
    """:class:`twin.cache.requests.RequestCache`'s four steps on a :class:`LiveCache`."""

    # Host-tier write-backs (none: a live cache has no host tier).
    written_back_tokens = 0
    written_back_states = 0

    def __init__(self, cache: LiveCache) -> None:
        self.cache = cache
        self.policy = cache.policy
        self.admissions = cache.clock
        self._pos = np.zeros(2, np.int64)
        self._ins = np.zeros(2, np.int64)  # an insert's positions (two at most)

    def admit(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
    ) -> Admission:
        """``RequestCache.admit``: clock, the policy hears it, lookup and pin, positions."""
        assert modules is None, "a live cache serves workloads without prompt modules"
        cache, policy, k = self.cache, self.policy, self.cache.k
        order = self.admissions
        self.admissions += 1
        cache.sc[k.S_CLOCK] = order
        policy.on_request(cache, prompt, full)  # the window's record (and its snapshot)
        pos = self._pos
        node, npos = k.live_admit(cache.st, full, len(prompt), len(full), order, pos)
        if policy.tune_if_due(cache):
            cache.mf[k.F_ALPHA] = policy.alpha
        n = len(prompt)
        positions = pos[:npos].tolist()
        at_prefill = [p for p in positions if p <= n]
        at_completion = [p for p in positions if p > n]
        hit = Hit(int(cache.st[0][k.DEP, node]), int(node)) if node else _MISS
        return Admission(order, prompt, full, hit, at_prefill, at_completion)

    def serve(self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None) -> Hit:
        """``RequestCache.serve`` (a replay's request): admission, one insert of every
        checkpoint, release; the clock then points to the next request."""
        adm = self.admit(prompt, full, modules)
        node = adm.node
        if node is not None:
            adm.hit = Hit(adm.hit.length, ServedNode(int(self.cache.st[0][self.cache.k.NID, node])))
        positions = adm.at_prefill + adm.at_completion
        if positions:
            self._insert(full, positions)
        self.release(adm)
        self.cache.sc[self.cache.k.S_CLOCK] = self.admissions
        return adm.hit

    def insert_at_prefill_end(self, adm: Admission) -> int:
        """``RequestCache.insert_at_prefill_end``: the checkpoints inside the prompt."""
        if not adm.at_prefill:
            return 0
        assert adm.full is not None, "insert after release"
        added, made = self._insert(adm.full, adm.at_prefill)
        adm.prefill_tokens = added
        return made

    def insert_at_completion(self, adm: Admission) -> int:
        """``RequestCache.insert_at_completion``: input + output up to the last checkpoint."""
        if not adm.at_completion:
            return 0
        assert adm.full is not None, "insert after release"
        return self._insert(adm.full, adm.at_completion)[1]

    def release(self, adm: Admission) -> None:
        """``RequestCache.release``: unpin the hit (idempotent), drop the tokens."""
        if adm.node is not None:
            self.cache.k.live_release(self.cache.st, adm.node)
            adm.node = None
        adm.full = None

    def _insert(self, full: np.ndarray, positions: list[int]) -> tuple[int, int]:
        cache, k = self.cache, self.cache.k
        pos = self._ins
        pos[: len(positions)] = positions
        added, made = k.live_insert(cache.st, full, pos, len(positions))
        if added < 0:  # no room: grow, then the same insert
            cache.grow_for(positions[-1])
            added, made = k.live_insert(cache.st, full, pos, len(positions))
        policy = self.policy
        if policy.phase == "warmup" and cache.sc[k.S_CHOSE]:
            policy.end_warmup()  # ``MarconiPolicy.choose_victim``'s first call
        return int(added), int(made)
