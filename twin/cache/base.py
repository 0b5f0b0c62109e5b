"""What every prefix cache shares: the hit record, the cache API, the policy hooks.

Three structures implement the same cache API (:class:`CacheStructure`:
``lookup``, ``speculative_insert``, ``insert``, ``pin``/``unpin``, ``touch``,
``evict``): the token-exact radix tree
(:class:`~twin.cache.prefix_cache.PrefixCache`) and the block pool of the
``vllm+`` baseline (:class:`~twin.cache.block_cache.BlockCache`) and the
module store of ``prompt-cache`` (:class:`~twin.cache.module_cache.ModuleCache`).
``modules`` (a request's declared prompt modules, the workload's ``modules``
column) reach ``lookup`` and ``insert``; prefix caches find reuse from the
tokens alone and ignore them. A policy
(``policies/``) decides what is admitted and what is evicted; the cache only
keeps the structure and the bytes right and calls the policy's hooks
(:class:`RequestPolicy`; a radix tree's, :class:`TreePolicy`). Requests use a cache
through one protocol, :class:`twin.cache.requests.RequestCache`; what holds a cache
(the engine, a host tier, ``twin replay``) sees it as a :class:`HeldCache`, which the
compiled live cache of ``marconi`` implements too, with no node in sight.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from twin.errors import TwinError
from twin.model import ModelSpec

if TYPE_CHECKING:
    import numpy as np

    from twin.cache.requests import Requests

# A structure's node (what its policy's hooks are told of and what it evicts: a radix
# tree's ``Node``, a block pool's ``BlockRef``, a module store's ``Module``) and a hit's
# handle (what a request pins: the same, or a module store's ``ModuleHold``, or the
# compiled cache's node id). Only the structure that made one reads it.
N = TypeVar("N")
H = TypeVar("H")
H_co = TypeVar("H_co", covariant=True)
N_co = TypeVar("N_co", covariant=True)


@dataclass(slots=True)
class Hit(Generic[H_co]):
    """A lookup's answer: ``length`` prompt tokens served from cache, via ``node``.

    ``node`` is what the request must pin while it runs (the node whose state
    the hit resumes from; the structure's own handle, opaque to everyone else);
    ``None`` on a miss.

    A hit that is not a prefix (Prompt Cache's modules, reused wherever they
    sit) may leave work for the engine to price: ``recompute`` hit tokens that
    the recurrent layers still compute (their state cannot be moved to another
    position), and ``host_tokens`` whose KV is copied from host memory first.
    Prefix caches leave both 0.
    """

    length: int
    node: H_co | None
    recompute: int = 0
    host_tokens: int = 0


# Told when cached content leaves the GPU (a host tier's write-back, ``RequestCache``):
# the token path from the root to the evicted node's end, and whether that
# position's state (an SSM checkpoint; always true on Transformers) went with it.
EvictHook = Callable[["np.ndarray", bool], None]  # numpy only to mypy: a help need not load it

# The counters every cache keeps (they only grow): snapshots carry them, reports show them.
COUNTERS = (
    "peak_bytes",
    "peak_kv_bytes",
    "peak_ssm_bytes",
    "evictions",
    "checkpoints_admitted",
    "checkpoints_hit",
)


def cache_stats(cache: CacheReadout) -> dict[str, int]:
    """What reports show of a cache: the bytes it holds now, its counters, its nodes."""
    return {
        "kv_bytes": cache.kv_bytes,
        "ssm_bytes": cache.ssm_bytes,
        **{name: getattr(cache, name) for name in COUNTERS},
        "nodes": cache.num_nodes,
    }


def evict_for(cache: Evicts[N], need: int) -> bool:
    """Evict the policy's victims until ``need`` bytes are free; ``False`` if it has none left."""
    while cache.capacity - cache.used_bytes < need:
        victim = cache.policy.choose_victim()
        if victim is None:
            return False
        cache.evict(victim)
    return True


class Started:
    """What the Python structures (radix tree, block pool, module store) start with."""

    def start(self, model: ModelSpec, capacity_bytes: int) -> None:
        """The model, a capacity of ``capacity_bytes`` (refused below 0), the model's SSM
        checkpoint bytes, recency's clock (requests served in a replay, admitted in the
        engine) and every counter of ``COUNTERS`` at 0."""
        if capacity_bytes < 0:
            raise TwinError(f"cache capacity must be >= 0 bytes (got {capacity_bytes})")
        self.model = model
        self.capacity = int(capacity_bytes)
        self.ckpt_bytes = model.ssm_checkpoint_bytes
        self.has_ssm = model.n_ssm_layers > 0
        self.clock = 0
        self.evictions = self.checkpoints_admitted = self.checkpoints_hit = 0
        self.peak_bytes = self.peak_kv_bytes = self.peak_ssm_bytes = 0


class TokenStateBytes:
    """Byte accounting of a cache that counts KV tokens and SSM checkpoints.

    Shared by the radix tree and the module store; the subclass sets
    ``kv_tokens``, ``n_ckpts``, ``kv_per_token`` and ``ckpt_bytes`` and keeps the
    first two current.
    """

    kv_tokens: int
    n_ckpts: int
    kv_per_token: int
    ckpt_bytes: int
    clock: int
    peak_bytes: int
    peak_kv_bytes: int
    peak_ssm_bytes: int

    def set_clock(self, t: int) -> None:
        """Set recency's clock (the request protocol and snapshots do; see ``requests.py``)."""
        self.clock = t

    @property
    def kv_bytes(self) -> int:
        return self.kv_tokens * self.kv_per_token

    @property
    def ssm_bytes(self) -> int:
        return self.n_ckpts * self.ckpt_bytes

    @property
    def used_bytes(self) -> int:
        return self.kv_tokens * self.kv_per_token + self.n_ckpts * self.ckpt_bytes

    def note_peaks(self) -> None:
        """Raise the peak counters to the bytes held now."""
        kv, ssm = self.kv_bytes, self.ssm_bytes  # used = kv + ssm (called once per insert)
        if kv + ssm > self.peak_bytes:
            self.peak_bytes = kv + ssm
        if kv > self.peak_kv_bytes:
            self.peak_kv_bytes = kv
        if ssm > self.peak_ssm_bytes:
            self.peak_ssm_bytes = ssm


class PolicyReadout(Protocol):
    """What a cache's holders read of its policy: the numbers reports show."""

    def stats(self) -> dict[str, Any]: ...


class RequestPolicy(PolicyReadout, Protocol):
    """A policy as its structure and the request protocol call it
    (``twin.cache.requests.RequestCache``): bound to its one cache by that cache
    (:meth:`bind`), it reads the cache itself."""

    def bind(self, cache: HeldCache) -> None: ...
    def on_request(self, prompt: np.ndarray, full: np.ndarray) -> None: ...
    def admit(self, prompt: np.ndarray, full: np.ndarray) -> list[int]: ...


class ChoosesVictims(Protocol[N_co]):
    """A policy that orders a structure's nodes for eviction."""

    def choose_victim(self) -> N_co | None: ...


class TreePolicy(RequestPolicy, ChoosesVictims[N], Protocol[N]):
    """The hooks a radix tree calls (:class:`twin.policies.base.RadixPolicy` implements
    them): told of every node change, so its candidates stay current."""

    def on_hit(self, node: N) -> None: ...
    def on_node_added(self, node: N) -> None: ...
    def on_node_changed(self, node: N) -> None: ...
    def on_node_removed(self, node: N, into: N | None = None) -> None: ...


class CacheReadout(Protocol):
    """What reports read of a cache (:func:`cache_stats`): bytes held, counters, nodes."""

    @property
    def kv_bytes(self) -> int: ...
    @property
    def ssm_bytes(self) -> int: ...
    @property
    def num_nodes(self) -> int: ...
    @property
    def peak_bytes(self) -> int: ...
    @property
    def peak_kv_bytes(self) -> int: ...
    @property
    def peak_ssm_bytes(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def checkpoints_admitted(self) -> int: ...
    @property
    def checkpoints_hit(self) -> int: ...


class HostCache(Protocol):
    """A host tier's cache as the request protocol of the cache above it uses it
    (``twin.cache.requests.HostWrites``): its clock set to the GPU's admissions, a probe,
    an access, inserts (write-through, write-back) and the states they admitted."""

    @property
    def checkpoints_admitted(self) -> int: ...

    def set_clock(self, t: int) -> None: ...
    def peek(self, seq: np.ndarray) -> int: ...
    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit[object]: ...
    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int: ...


class HeldCache(CacheReadout, HostCache, Protocol):
    """A cache as its holders use it (the engine's replicas and memory strategies, a host
    tier, ``twin replay``, the reference executor), with no node in sight: every Python
    structure and the compiled live cache (``twin.policies.compiled.live.LiveCache``).

    ``clock`` is recency's unit, set only through :meth:`set_clock` by the request
    protocol and by snapshots. ``on_evict`` (``None`` by default) is told of each
    victim's content as it goes; the radix trees call it (SGLang's HiCache write-back
    runs on them), the block pool and the module store never do. A host tier is such a
    cache too: the request protocol looks it up, inserts into it and peeks at it.
    """

    model: ModelSpec
    capacity: int
    on_evict: EvictHook | None

    @property
    def has_ssm(self) -> bool: ...
    @property
    def clock(self) -> int: ...
    @property
    def used_bytes(self) -> int: ...
    @property
    def policy(self) -> PolicyReadout: ...

    def shrink_to(self, limit: int) -> int: ...
    def verify(self) -> None: ...
    def request_cache(
        self, host: HostCache | None = None, write_policy: str = "write_through"
    ) -> Requests:
        """The request protocol on this cache (``twin.cache.requests``), with a host tier's
        cache under it or not."""
        ...


class Evicts(Protocol[N]):
    """A structure that evicts its policy's victims (:func:`evict_for`)."""

    @property
    def capacity(self) -> int: ...
    @property
    def used_bytes(self) -> int: ...
    @property
    def policy(self) -> ChoosesVictims[N]: ...

    def evict(self, node: N) -> int: ...


class CacheStructure(HeldCache, Protocol[H]):
    """The cache API the Python structures implement (radix tree, block pool, module
    store), as the request protocol runs it: its hits' handles ``H`` are pinned while a
    request runs. Counters (``evictions``, ``checkpoints_admitted``, ``checkpoints_hit``,
    the peaks) only grow.
    """

    @property
    def policy(self) -> RequestPolicy: ...

    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit[H]: ...
    def pin(self, node: H) -> None: ...
    def unpin(self, node: H) -> None: ...
