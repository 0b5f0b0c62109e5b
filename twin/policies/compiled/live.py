"""``marconi`` in the engine as compiled code: a live prefix cache, request by request.

The engine's replicas each hold one cache for a whole run and go through the
request protocol (:class:`twin.cache.requests.RequestCache`) a step at a time:
a request's admission (lookup, pin, checkpoint positions), the insert at its
prefill's end, the insert at its completion and its release, interleaved with
other requests'. :class:`LiveCache` runs that protocol on the compiled tree of
:mod:`policies.compiled.kernel` (its ``live`` entries: tokens kept per edge, node
ids reused, so memory follows what is cached), with the same operations in the same
order as ``PrefixCache`` under the Python transliteration of Marconi's rules (the
tests' oracle, ``tests/marconi_oracle.py``), so every hit, victim and counter is
the same (``tests/test_marconi_live.py`` interleaves the protocol at random on
both and compares them).

The policy object stays the Python one, for what is not per-token work: the
bootstrap window's requests, its snapshot (an empty cache: the window starts
at the first request), the alpha grid's replays (themselves compiled:
:mod:`policies.compiled`) and its stats. The compiled side tells it of the
first victim choice (``kernel.state.S_CHOSE``), and takes the tuned alpha.

It runs ``marconi`` and ``marconi-twin`` (their one implementation) whatever the
model, the engine's cache dedicated (``--cache-gb G``) or in a shared pool
(``--cache-gb auto``: the pool sets its capacity and reclaims pages through
:meth:`LiveCache.shrink_to`); declared prompt modules are ignored, as ``PrefixCache``
ignores them. With a host tier (SGLang's HiCache, vLLM's CPU offload; or the KV store
disaggregated prefill workers share, ``--shared-kv-tier``) the host's cache is a
live cache too, of its own policy instance (a policy decides per tier):
:class:`LiveRequests` runs ``RequestCache``'s host calls on it
(:class:`twin.cache.requests.HostWrites`: write-through before an insert, a longer
host hit loaded back), and under write-back the GPU cache hands each victim's path
and whether its state goes to the hook (``on_evict``) after the kernel call that
evicted it, in order, as ``PrefixCache._tell_evict`` does during the call (the two
tiers share no state, so the host sees the same inserts in the same order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from twin.cache import CacheSnapshot
from twin.cache.base import COUNTERS, EvictHook, HeldCache, Hit, HostCache
from twin.cache.requests import Admission, HostWrites, release
from twin.model import ModelSpec


class Tuner(Protocol):
    """What the live cache tells its policy's alpha tuner
    (``twin.policies.alpha_tuning.AlphaTuner``)."""

    @property
    def phase(self) -> str: ...
    def end_warmup(self) -> None: ...
    def tune_if_due(self, model: ModelSpec) -> bool: ...


class TunedPolicy(Protocol):
    """What the live cache asks of its policy (``marconi``, ``marconi-twin``, ``oracle``:
    ``twin.policies.marconi.MarconiPolicy``): the alpha and the tuner it is given."""

    @property
    def alpha(self) -> float: ...
    @property
    def tuner(self) -> Tuner: ...

    def bind(self, cache: HeldCache) -> None: ...
    def on_request(self, prompt: np.ndarray, full: np.ndarray) -> None: ...
    def stats(self) -> dict[str, Any]: ...


_MISS: Hit[int] = Hit(0, None)


@dataclass(frozen=True, slots=True)
class ServedNode:
    """The node a served request hit, by creation id (``RequestCache.serve``'s
    ``hit.node.nid``, what a replay records): its own node is not pinned any more."""

    nid: int


def _scalar(slot: str) -> Any:
    """A read-only attribute: the kernel's scalar ``kernel.state.<slot>`` as a Python int."""
    return property(lambda self: int(self.sc[getattr(self.k, slot)]))


class LiveCache:
    """The compiled cache's state and what reports read of it (``cache_stats``, occupancy)."""

    def __init__(self, model: ModelSpec, capacity: int, policy: TunedPolicy) -> None:
        from twin.policies.compiled import constants, rules_of
        from twin.policies.compiled.kernel import live
        from twin.policies.compiled.kernel import state as k

        self.k = k  # the state's layout and counters
        self.calls = live  # the live cache's entries
        self.model = model
        # States to place (``PrefixCache.has_ssm``): a Transformer's hit is any matched prefix.
        self.has_ssm = model.n_ssm_layers > 0
        self.policy = policy
        rules = rules_of(type(policy))
        self.reference = rules == k.REFERENCE  # ``marconi``'s (else ``marconi-twin``'s)
        mc, mf = constants(model, int(capacity), rules)
        mc[k.M_LIVE] = 1
        mf[k.F_ALPHA] = policy.alpha
        self.mf = mf
        self.st = live.live_start(mc, mf, 64, 1024)
        policy.bind(self)
        self.sc = self.st[1]
        self._swa = int(mc[k.M_SWAKV])  # sliding-window KV per token, a node's tail's
        self._kvpt, self._ckb = int(mc[k.M_KVPT]) - self._swa, int(mc[k.M_CKB])
        self._window = int(mc[k.M_WINDOW])
        self._on_evict: EvictHook | None = None
        self._ins = np.zeros(2, np.int64)  # an insert's positions (grown for more)

    # ----- a host tier's write-back: the victims handed to a hook ---------------------
    @property
    def on_evict(self) -> EvictHook | None:
        """``PrefixCache.on_evict``: told each victim's path and whether its state goes
        (:meth:`_hand_victims`, after the call that evicted them)."""
        return self._on_evict

    @on_evict.setter
    def on_evict(self, hook: EvictHook | None) -> None:
        self._on_evict = hook
        self.st[2][self.k.M_HOOK] = hook is not None

    def _log_room(self) -> None:
        """Before a call that may evict, with a hook: room in the log for the paths of every
        node there (``kernel.cache._hand``), doubled when it grows."""
        if self._on_evict is None:
            return
        st, k = self.st, self.k
        need = int(self.sc[k.S_DEPTHS])
        if len(st[14]) < need:
            grown = np.zeros(max(need, 2 * len(st[14])), np.int32)
            self.st = (*st[:14], grown, st[15])

    def _hand_victims(self) -> None:
        """Tell the hook of the victims of the last call, in order (``kernel.cache._hand``;
        none is logged without a hook)."""
        if self._on_evict is None:
            return
        sc, k = self.sc, self.k
        n = int(sc[k.S_HANDED])
        if not n:
            return
        handed, ends = self.st[14], self.st[15]
        starts = [0, *ends[0, : n - 1].tolist()]
        victims = [
            (handed[a:b].copy(), bool(state))
            for a, b, state in zip(starts, ends[0, :n].tolist(), ends[1, :n].tolist(), strict=True)
        ]
        sc[k.S_HANDED] = sc[k.S_HANDED_TOKENS] = 0
        hook = self._on_evict
        assert hook is not None
        for path, has_state in victims:
            hook(path, has_state)

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
        self._log_room()
        self.calls.live_shrink(self.st)
        self._hand_victims()
        self.capacity = max(self.capacity, self.used_bytes)
        self.chosen()
        return self.used_bytes

    def chosen(self) -> None:
        """After evictions: ``marconi``'s first victim choice fixes its window's length
        (the reference's ``choose_victim``'s first call: the tuner's ``end_warmup``)."""
        tuner = self.policy.tuner
        if self.reference and tuner.phase == "warmup" and self.sc[self.k.S_CHOSE]:
            tuner.end_warmup()

    def live_nodes(self) -> list[int]:
        """The ids of the nodes in the tree (the root and reused ids aside)."""
        k = self.k
        parents = self.st[0][k.PAR, 1 : int(self.sc[k.S_NEXT])]
        ids: list[int] = (np.flatnonzero(parents >= 0) + 1).tolist()
        return ids

    def edges(self) -> list[tuple[int, int, int | None, int, np.ndarray, bool]]:
        """Every node but the root, parents first: (its id, creation id, its parent's id
        (None: the root), end depth, its edge's tokens (a view), holds a state); what the
        reference executor's tensor store follows (``twin.reference.store.cache_edges``)."""
        k, nd, buf = self.k, self.st[0], self.st[9]
        live = sorted(self.live_nodes(), key=lambda v: int(nd[k.DEP, v]))
        out = []
        for v in live:
            n, dep, p = int(nd[k.LEN, v]), int(nd[k.DEP, v]), int(nd[k.PAR, v])
            end = int(nd[k.BASE, v]) + dep
            edge = buf[end - n : end]
            out.append((v, int(nd[k.NID, v]), p or None, dep, edge, bool(nd[k.CKPT, v])))
        return out

    def verify(self) -> None:
        """``PrefixCache.verify``'s invariants (tests and debugging; O(nodes)): the counters
        match the nodes, an unpinned node holds a state or branches (with SSM layers; a
        Transformer's nodes hold none), the capacity holds."""
        k, nd = self.k, self.st[0]
        live = self.live_nodes()
        assert int(nd[k.LEN, live].sum()) == int(self.sc[k.S_KV]), "KV tokens drifted"
        assert int(nd[k.CKPT, live].sum()) == int(self.sc[k.S_CKPTS]), "states drifted"
        lengths = nd[k.LEN, live]
        tails = np.minimum(lengths, self._window) if self._window else lengths
        assert int(tails.sum()) == int(self.sc[k.S_SWA]), "window tails drifted"
        for v in live:
            assert nd[k.LEN, v] > 0 and nd[k.DEP, v] == nd[k.DEP, nd[k.PAR, v]] + nd[k.LEN, v]
            if self.has_ssm:
                assert nd[k.LOCK, v] or nd[k.CKPT, v] or nd[k.NCH, v] >= 2, f"untidy node {v}"
            else:
                assert not nd[k.CKPT, v], f"a state on a Transformer's node {v}"
        assert self.used_bytes <= self.capacity, "capacity exceeded"

    # ----- reads ----------------------------------------------------------------------
    @property
    def clock(self) -> int:
        return int(self.sc[self.k.S_CLOCK])

    @property
    def kv_bytes(self) -> int:
        return int(self.sc[self.k.S_KV]) * self._kvpt + int(self.sc[self.k.S_SWA]) * self._swa

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
        peek = self.calls.live_peek
        return int(peek(st[0], st[8], st[9], st[12], q, len(q), self.has_ssm, self._window))

    def snapshot(self) -> CacheSnapshot:
        """Every node in pre-order, children in insertion order (the order a restore
        rebuilds and ``marconi``'s tie-break reads), pins dropped (the tests' radix-tree
        oracle takes the same, ``OracleTree.snapshot``).
        ``marconi`` takes it at the first request, ``marconi-twin`` at the first after an
        eviction."""
        k, nd, buf = self.k, self.st[0], self.st[9]
        first, nxt = nd[k.FIRST].tolist(), nd[k.NXT].tolist()
        order: list[int] = []
        stack = _children(first, nxt, 0)
        while stack:
            v = stack.pop()
            order.append(v)
            stack.extend(_children(first, nxt, v))
        index = {v: i for i, v in enumerate(order)}
        ends = (nd[k.BASE] + nd[k.DEP])[order] if order else np.zeros(0, np.int64)
        lengths = nd[k.LEN][order] if order else np.zeros(0, np.int64)
        offsets = np.zeros(len(order) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        tokens = np.zeros(int(offsets[-1]), np.int32)
        for i, (end, n) in enumerate(zip(ends.tolist(), lengths.tolist(), strict=True)):
            tokens[offsets[i] : offsets[i + 1]] = buf[end - n : end]
        parent = nd[k.PAR].tolist()
        return CacheSnapshot(
            capacity=self.capacity,
            clock=self.clock,
            next_nid=int(self.sc[k.S_NID]),
            parents=[index.get(parent[v], -1) for v in order],
            offsets=offsets,
            tokens=tokens,
            ckpt=[bool(nd[k.CKPT, v]) for v in order],
            t=[int(nd[k.T, v]) for v in order],
            nid=[int(nd[k.NID, v]) for v in order],
            ckpt_hit=[bool(nd[k.CKHIT, v]) for v in order],
            counters={name: getattr(self, name) for name in COUNTERS},
        )

    def request_cache(
        self, host: HostCache | None = None, write_policy: str = "write_through"
    ) -> LiveRequests:
        """The request protocol on this cache, with a host tier's cache under it or not
        (``twin.cache.HeldCache.request_cache``)."""
        return LiveRequests(self, host, write_policy)

    # ----- a host tier's calls (``RequestCache``'s on its host: ``HostWrites``) --------
    def set_clock(self, t: int) -> None:
        """``PrefixCache.set_clock``: the host's recency runs on the GPU's clock."""
        self.sc[self.k.S_CLOCK] = t

    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit[int]:
        """``PrefixCache.lookup`` (no pin; a host tier's policy hears no request)."""
        q = np.asarray(seq, dtype=np.int32)
        node, hit = self.calls.live_lookup(self.st, q, len(q))
        return Hit(int(hit), int(node)) if node else _MISS

    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int:
        """``PrefixCache.insert``: ``seq`` up to its last checkpoint; the tokens newly cached."""
        q = np.asarray(seq, dtype=np.int32)
        positions = sorted({int(p) for p in checkpoints if 0 < p <= len(q)})
        return self.insert_at(q, positions)[0] if positions else 0

    def insert_at(self, full: np.ndarray, positions: list[int], unpin: int = 0) -> tuple[int, int]:
        """The insert of ``full`` up to ``positions[-1]`` with states at ``positions``
        (sorted, unique, positive; three at most, with a prefix loaded back from a host
        tier; none: no insert), then the unpin of node ``unpin`` (0: none; a request's
        release, :meth:`LiveRequests.complete`): (tokens newly cached, states admitted)."""
        live, pos, npos = self.calls, self._ins, len(positions)
        if npos > len(pos):
            pos = self._ins = np.zeros(npos, np.int64)
        for i, p in enumerate(positions):  # item by item: two at most (three: a host tier)
            pos[i] = p
        self._log_room()
        added, made = live.live_insert(self.st, full, pos, npos, unpin)
        if added < 0:  # no room: grow, then the same insert
            self.grow_for(positions[-1])
            added, made = live.live_insert(self.st, full, pos, npos, unpin)
        self._hand_victims()
        self.chosen()
        return added, made

    def unpin(self, node: int) -> None:
        """Release a request's pin of ``node`` (``PrefixCache.unpin``)."""
        self.calls.live_release(self.st, node)

    # ----- room, made between calls ---------------------------------------------------
    def grow_for(self, tokens: int) -> None:
        """Grow the arrays for an insert of up to ``tokens`` tokens
        (``kernel.live.live_room``): doubled, so growing costs O(1) an insert."""
        st, k = self.st, self.k
        nodes = st[0].shape[1]
        need_tokens = self.calls.live_tokens_needed(int(self.sc[k.S_KV]), tokens)
        short_nodes = nodes - int(self.sc[k.S_NEXT]) + int(self.sc[k.S_FREE]) < k.LIVE_NODE_SLACK
        grown_nodes = 2 * nodes if short_nodes else nodes
        grown_tokens = max(need_tokens, 2 * len(st[9])) if len(st[9]) < need_tokens else 0
        self.st = self.calls.live_grow(st, grown_nodes, grown_tokens)
        self.sc = self.st[1]


class LiveRequests(HostWrites[LiveCache]):
    """:class:`twin.cache.requests.RequestCache`'s four steps on a :class:`LiveCache`,
    with a host tier's cache under it or not (its calls: :class:`HostWrites`)."""

    def __init__(
        self,
        cache: LiveCache,
        host: HostCache | None = None,
        write_policy: str = "write_through",
    ) -> None:
        super().__init__(cache, host, write_policy)
        self._pos = np.zeros(2, np.int64)

    def admit(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
    ) -> Admission:
        """``RequestCache.admit``: clock, the policy hears it, lookup and pin, positions,
        the host tier's longer hit loaded back (the host's calls come after the GPU's
        admission here and before its admission's positions in ``RequestCache``: the
        tiers share no state)."""
        return self._admit(prompt, full, modules)[0]

    def _admit(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None
    ) -> tuple[Admission, int]:
        """:meth:`admit`, and the node pinned (0: none)."""
        cache, k = self.cache, self.cache.k
        policy = cache.policy
        order = self.admissions
        self.admissions += 1
        cache.sc[k.S_CLOCK] = order
        if self.host is not None:
            self.host.set_clock(order)  # the host tier's recency runs on the same clock
        policy.on_request(prompt, full)  # the window's record (and its snapshot)
        cache.mf[k.F_ALPHA] = policy.alpha  # ``marconi-twin`` tunes here
        pos = self._pos
        node, hit, npos = cache.calls.live_admit(cache.st, full, len(prompt), len(full), order, pos)
        if cache.reference and policy.tuner.tune_if_due(cache.model):
            cache.mf[k.F_ALPHA] = policy.alpha
        n, pinned = len(prompt), node
        found: Hit[object] = Hit(hit, pinned) if pinned else _MISS
        positions = pos[:npos].tolist()
        loaded = 0
        if self.host is not None:
            found, loaded = self._load_back(prompt, found)
            positions = self._with_loaded(positions, found, loaded)
        cut = 0  # ``RequestCache``'s split (sorted): a Transformer's prompt goes in at the end
        while cache.has_ssm and cut < len(positions) and positions[cut] <= n:
            cut += 1
        at_prefill, at_completion = positions[:cut], positions[cut:]
        adm = Admission(order, prompt, full, found, at_prefill, at_completion, modules)
        adm.host_tokens = loaded
        if pinned:
            adm.unpin = _Pin(cache, pinned)
        return adm, pinned

    def serve(
        self, prompt: np.ndarray, full: np.ndarray, modules: np.ndarray | None = None
    ) -> Hit[object]:
        """``RequestCache.serve`` (a replay's request): admission, one insert of every
        checkpoint, release; the clock then points to the next request."""
        adm, node = self._admit(prompt, full, modules)
        if node:
            adm.hit = Hit(adm.hit.length, ServedNode(int(self.cache.st[0][self.cache.k.NID, node])))
        self._last_insert(adm, adm.at_prefill + adm.at_completion)
        self.cache.sc[self.cache.k.S_CLOCK] = self.admissions
        return adm.hit

    def insert_at_prefill_end(self, adm: Admission) -> int:
        """``RequestCache.insert_at_prefill_end``: the checkpoints inside the prompt."""
        if not adm.at_prefill:
            return 0
        assert adm.full is not None, "insert after release"
        self._write_through(adm.prompt, adm.at_prefill, adm.modules)
        added, made = self.cache.insert_at(adm.full, adm.at_prefill)
        adm.prefill_tokens = added
        return made

    def insert_at_completion(self, adm: Admission) -> int:
        """``RequestCache.insert_at_completion``: input + output up to the last checkpoint."""
        if not adm.at_completion:
            return 0
        assert adm.full is not None, "insert after release"
        self._write_through(adm.full, adm.at_completion, adm.modules)
        return self.cache.insert_at(adm.full, adm.at_completion)[1]

    def complete(self, adm: Admission) -> int:
        """``RequestCache.complete``: the insert at completion and the release."""
        if adm.at_completion and self.host is not None:
            assert adm.full is not None, "insert after release"
            self._write_through(adm.full, adm.at_completion, adm.modules)
        return self._last_insert(adm, adm.at_completion)

    def _last_insert(self, adm: Admission, positions: list[int]) -> int:
        """A request's last insert (at ``positions``; none: none) and its release, in one
        kernel call (``kernel.live.live_insert`` unpins after inserting, as the two calls
        would); the states admitted."""
        pin, node = adm.unpin, 0
        if isinstance(pin, _Pin):
            node, adm.unpin = pin.node, None  # the insert's call unpins it
        made = 0
        if positions or node:
            assert adm.full is not None, "insert after release"
            made = self.cache.insert_at(adm.full, positions, node)[1]
        release(adm)
        return made

    def insert_preempted(self, adm: Admission, tokens: int) -> int:
        """``RequestCache.insert_preempted``: a preempted request's first ``tokens`` stay
        cached (vLLM mode, Transformers); the tokens newly cached."""
        assert adm.full is not None, "insert after release"
        if tokens <= 0:
            return 0
        seq = adm.full[:tokens]
        self._write_through(seq, [tokens], adm.modules)
        return self.cache.insert_at(seq, [tokens])[0]

    def release(self, adm: Admission) -> None:
        """``RequestCache.release``: unpin the hit (idempotent), drop the tokens."""
        release(adm)


class _Pin:
    """A request's pin of node ``node`` of a live cache (``Admission.unpin``): called, it
    releases it; :meth:`LiveRequests.complete` reads the node to release it in the
    kernel call of the request's last insert."""

    __slots__ = ("cache", "node")

    def __init__(self, cache: LiveCache, node: int) -> None:
        self.cache = cache
        self.node = node

    def __call__(self) -> None:
        self.cache.unpin(self.node)


def _children(first: list[int], nxt: list[int], v: int) -> list[int]:
    """``v``'s children, last first (a pre-order walk's stack pops them in order)."""
    out = []
    c = first[v]
    while c >= 0:
        out.append(c)
        c = nxt[c]
    out.reverse()
    return out
