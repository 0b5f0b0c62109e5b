"""Prompt Cache's module store: attention KV of schema-declared modules, reused at any position.

Rules (Gim et al., "Prompt Cache: Modular Attention Reuse for Low-Latency
Inference", MLSys 2024, arXiv 2311.04934):

- A prompt module is a segment that a schema declares reusable (sec. 3.2);
  here, the workload's ``modules`` column names each request's modules by id,
  start and length. A module's attention states are computed once and reused
  wherever it appears in a later prompt, not only as a prefix: the schema
  gives each module its position IDs and the model accepts discontinuous ones
  (sec. 3.3-3.4), and attention states of a module are taken as independent
  of the text before it (the approximation the paper accepts, sec. 3.4).
- Text outside the modules (the question) is always computed (sec. 3.4).
- Modules live in GPU memory or in host memory (sec. 4, "storing prompt
  modules"); from host memory each use copies the module's KV to the GPU
  first (``Hit.host_tokens``, priced by the engine at the host link's speed).
- Recurrent layers (Mamba, SSM) carry a state through every token before a
  module, so a module's cached work cannot move to another position: they
  recompute the module's tokens (``Hit.recompute``). Only a module at
  position 0 keeps its end state valid: the store keeps that state (one SSM
  checkpoint) when the module was computed at position 0, and a later use at
  position 0 is a full reuse. This is the twin's extension to hybrid models;
  the paper serves Transformers only.

Eviction is not the paper's subject (its modules are loaded with the schema
and stay); here a module whose bytes do not fit evicts the policy's victims
(``prompt-cache``: least recently used unpinned module). A library holds tens
to thousands of modules, so victims are found by a scan of the modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from twin.cache.base import (
    ChoosesVictims,
    EvictHook,
    Hit,
    RequestPolicy,
    Started,
    TokenStateBytes,
    evict_for,
)
from twin.cache.requests import ServesRequests
from twin.errors import TwinError
from twin.model import ModelSpec

# Where modules are stored (sec. 4): "gpu" serves a hit in place, "host" copies it first.
STORAGES = ("gpu", "host")


class Module:
    """One cached module: its length, whether it holds the end state at position 0, its pins."""

    __slots__ = ("length", "lock", "mid", "state", "state_hit", "t")

    def __init__(self, mid: int, length: int, state: bool, t: int) -> None:
        self.mid = mid
        self.length = length
        self.state = state  # the recurrent layers' state after it, computed at position 0
        self.state_hit = False  # counted once in ``checkpoints_hit``, as the radix tree does
        self.lock = 0
        self.t = t

    def __repr__(self) -> str:
        return f"Module(id={self.mid}, length={self.length}, state={self.state}, lock={self.lock})"


class ModuleHold:
    """What a hit pins: the cached modules it reuses."""

    __slots__ = ("modules",)

    def __init__(self, modules: list[Module]) -> None:
        self.modules = modules


class ModulePolicy(RequestPolicy, ChoosesVictims[Module], Protocol):
    """What the store asks of its policy: admission and the next module to evict (it
    reads the store's modules, their pins and last access: the store keeps no candidate
    structure for it, so it is told of no module)."""


class ModuleCache(Started, TokenStateBytes, ServesRequests):
    """Module id -> cached attention KV (and, at position 0, the recurrent state); bytes capped."""

    def __init__(
        self, model: ModelSpec, capacity_bytes: int, policy: ModulePolicy, storage: str = "gpu"
    ) -> None:
        self.start(model, capacity_bytes)
        if storage not in STORAGES:
            raise TwinError(
                f"module storage must be one of {', '.join(STORAGES)} (got {storage!r})"
            )
        self.storage = storage
        self.kv_per_token = model.kv_bytes_per_token
        self.modules: dict[int, Module] = {}
        self.kv_tokens = 0
        self.n_ckpts = 0
        # What hits reused, for reports: modules, tokens, recurrent recompute, host copies.
        self.module_hits = 0
        self.reused_tokens = 0
        self.recompute_tokens = 0
        self.host_tokens = 0
        self.on_evict: EvictHook | None = None  # never called: write-back is the radix trees'
        self.policy = policy
        policy.bind(self)

    # ------------------------------------------------------------------ bytes
    @property
    def num_nodes(self) -> int:
        return len(self.modules)

    def node_bytes(self, node: Module) -> int:
        return node.length * self.kv_per_token + (self.ckpt_bytes if node.state else 0)

    # ------------------------------------------------------------------ queries
    def lookup(self, seq: np.ndarray, modules: np.ndarray | None = None) -> Hit[ModuleHold]:
        """Reuse every cached module the request declares, wherever it sits (module docstring)."""
        if modules is None or not len(modules):
            return Hit(0, None)
        used: list[Module] = []
        reused = recompute = 0
        for mid, start, length in modules.tolist():
            m = self.modules.get(mid)
            if m is None or m.length != length:
                continue
            used.append(m)
            reused += length
            if self.has_ssm:
                if start == 0 and m.state:
                    if not m.state_hit:
                        m.state_hit = True
                        self.checkpoints_hit += 1
                else:
                    recompute += length
        if not used:
            return Hit(0, None)
        hold = ModuleHold(used)
        self.touch(hold)
        host = reused if self.storage == "host" else 0
        self.module_hits += len(used)
        self.reused_tokens += reused
        self.recompute_tokens += recompute
        self.host_tokens += host
        return Hit(reused, hold, recompute=recompute, host_tokens=host)

    def peek(self, seq: np.ndarray) -> int:
        """A router's prefix probe: modules are declared per request, so none is seen here."""
        return 0

    def speculative_insert(self, seq: np.ndarray) -> int | None:
        return None

    # ------------------------------------------------------------------ insert
    def insert(
        self, seq: np.ndarray, checkpoints: Sequence[int], modules: np.ndarray | None = None
    ) -> int:
        """Store the request's modules not cached yet (and the position-0 state); new tokens.

        A module that does not fit after evicting every unpinned victim is not stored.
        """
        if modules is None or not checkpoints:
            return 0
        added = 0
        for mid, start, length in modules.tolist():
            state = self.has_ssm and start == 0
            m = self.modules.get(mid)
            if m is not None:
                if state and not m.state and self._make_room(self.ckpt_bytes, m):
                    m.state = True
                    self.n_ckpts += 1
                    self.checkpoints_admitted += 1
                continue
            need = length * self.kv_per_token + (self.ckpt_bytes if state else 0)
            if need > self.capacity or not self._make_room(need, None):
                continue
            m = Module(mid, length, state, self.clock)
            self.modules[mid] = m
            self.kv_tokens += length
            if state:
                self.n_ckpts += 1
                self.checkpoints_admitted += 1
            added += length
        self.note_peaks()
        return added

    # ------------------------------------------------------------------ pins, access, eviction
    def pin(self, node: ModuleHold) -> None:
        for m in node.modules:
            m.lock += 1

    def unpin(self, node: ModuleHold) -> None:
        for m in node.modules:
            assert m.lock > 0, "unpin without pin"
            m.lock -= 1

    def touch(self, node: ModuleHold | Module) -> None:
        for m in node.modules if isinstance(node, ModuleHold) else (node,):
            m.t = self.clock

    def evictable(self, node: Module) -> bool:
        return node.lock == 0 and self.modules.get(node.mid) is node

    def evict(self, node: Module) -> int:
        """Drop ``node``'s KV and state; return the bytes freed."""
        if not self.evictable(node):
            raise ValueError(f"{node!r} is not evictable")
        freed = self.node_bytes(node)
        del self.modules[node.mid]
        self.kv_tokens -= node.length
        self.n_ckpts -= node.state
        self.evictions += 1
        return freed

    def shrink_to(self, limit: int) -> int:
        """Evict victims until at most ``limit`` bytes are cached; set the capacity.

        As ``PrefixCache.shrink_to``: a shared KV pool (``twin.cache.pool``)
        reclaims cached modules this way; pinned ones stay, so the capacity
        becomes ``max(limit, what is left)``. Returns the bytes still cached.
        """
        self.capacity = max(int(limit), 0)
        self._make_room(0, None)
        self.capacity = max(self.capacity, self.used_bytes)
        return self.used_bytes

    def verify(self) -> None:
        """Assert the byte counters and the capacity (tests)."""
        assert self.kv_tokens == sum(m.length for m in self.modules.values())
        assert self.n_ckpts == sum(m.state for m in self.modules.values())
        assert self.used_bytes <= self.capacity, "capacity exceeded"

    # ------------------------------------------------------------------ internals
    def _make_room(self, need: int, keep: Module | None) -> bool:
        """Evict the policy's victims (never ``keep``) until ``need`` bytes are free."""
        if keep is not None:
            keep.lock += 1  # pinned while room is made for its own state
        try:
            return evict_for(self, need)
        finally:
            if keep is not None:
                keep.lock -= 1
