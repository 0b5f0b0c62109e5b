"""Admission rules: where in a request's input + output to keep a recurrent state, found by name.

A rule is a small frozen class (its options are its fields) called with the policy's
cache, the request's input (``prompt``) and its input + output (``full``), before the
request is inserted; it returns the token positions after which the cache keeps a
state, in order (the cache keeps the KV of every token up to the last). A policy
takes its rule from :data:`ADMISSIONS` by name (:func:`admission_rule`); adding a rule
never edits a policy. ``marconi``, ``marconi-twin`` and ``oracle`` admit by
``judicious`` inside their compiled cache (``policies.compiled.kernel.request._admit``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from twin.cache import HeldCache
from twin.cache.sparse_blocks import KVOnly, SparseBlockCache
from twin.errors import lookup

# Jenga sec. 5: Mamba states are cached every 512 tokens.
STATE_INTERVAL = 512


class Admits(HeldCache, Protocol):
    """What a rule reads of a Python structure (the radix tree, the block pool, the
    module store): whether it places states, and a dry run of an insert."""

    def speculative_insert(self, seq: np.ndarray) -> int | None: ...


class Rule(Protocol):
    def __call__(self, cache: Admits, prompt: np.ndarray, full: np.ndarray) -> list[int]: ...


@dataclass(frozen=True, slots=True)
class Nothing:
    """``vanilla``: nothing is kept, so every lookup misses."""

    def __call__(self, cache: Admits, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        return []


@dataclass(frozen=True, slots=True)
class Judicious:
    """Marconi's admission (sec. 4.1), ``sglang+``'s, ``marconi``'s and ``oracle``'s.

    Two kinds of reuse are worth an SSM checkpoint: a purely-input shared
    prefix (e.g. a system prompt), found by speculative insertion of the input
    as the branch point it would create, and input + output reuse (the next
    turn of a conversation), served by the state after the last decoded token.
    """

    def __call__(self, cache: Admits, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        branch = cache.speculative_insert(prompt)
        end = len(full)
        return [end] if branch is None else [branch, end]


JUDICIOUS = Judicious()


@dataclass(frozen=True, slots=True)
class PageAligned:
    """``sglang``: judicious, then on a hybrid model only whole pages
    (``cache_finished_req`` caches ``page_aligned_len`` tokens; SGLang ``--page-size``)."""

    page_size: int = 1

    def __call__(self, cache: Admits, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        positions = JUDICIOUS(cache, prompt, full)
        if not cache.has_ssm:
            return positions
        k = self.page_size
        return sorted({p // k * k for p in positions if p >= k})


@dataclass(frozen=True, slots=True)
class EveryInterval:
    """``jenga``: a state every ``interval`` tokens (Jenga sec. 5), so hits land on its
    multiples; a model without recurrent layers keeps every prefix token's KV."""

    interval: int = STATE_INTERVAL

    def __call__(self, cache: Admits, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        if not cache.has_ssm:
            return [len(full)]
        k = self.interval
        return list(range(k, len(full) + 1, k))


@dataclass(frozen=True, slots=True)
class EveryBlock:
    """``vllm+``: every full block of input + output keeps its KV and (the block pool
    checkpoints each one, so only the last boundary needs saying) its state; with
    vLLM's ``retention_interval`` on a sparse pool, only the states it retains."""

    block_size: int = 32
    retention_interval: int | None = None

    def __call__(self, cache: Admits, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        bs = self.block_size
        end = len(full) // bs * bs
        if not isinstance(cache, SparseBlockCache):
            return [end] if end else []
        return retained_states(cache, prompt, end, bs, self.retention_interval or 0)


@dataclass(frozen=True, slots=True)
class WholePrompt:
    """``prompt-cache``: modules are stored once the prompt is computed; the position
    only says "store"."""

    def __call__(self, cache: Admits, prompt: np.ndarray, full: np.ndarray) -> list[int]:
        return [len(prompt)]


ADMISSIONS: dict[str, type[Rule]] = {
    "nothing": Nothing,
    "judicious": Judicious,
    "page-aligned": PageAligned,
    "every-interval": EveryInterval,
    "every-block": EveryBlock,
    "whole-prompt": WholePrompt,
}


def admission_rule(name: str, **options: Any) -> Rule:
    """The rule called ``name`` with ``options`` (its fields)."""
    return lookup(ADMISSIONS, name, "admission")(**options)


def retained_states(
    cache: SparseBlockCache, prompt: np.ndarray, end: int, block_size: int, interval: int
) -> list[int]:
    """The positions whose state vLLM keeps for one request, then the KV's end.

    ``SingleTypeKVCacheManager.cache_blocks`` (``vllm/v1/core/
    single_type_kv_cache_manager.py``) passes two reachable boundaries, the
    replay boundary ``num_prompt_tokens - 1`` and the request's
    ``shared_prefix_boundary`` (the junction, when a prefix is cached as KV
    beyond its deepest state); ``MambaManager.reachable_block_mask`` keeps the
    state of the block ending on each, floored to the block grid, plus, for an
    interval ``N > 0``, that of every block ending on a multiple of ``N``.
    """
    keep = {(len(prompt) - 1) // block_size * block_size, cache.junction(prompt)}
    if interval:
        keep.update(range(interval, end + 1, interval))
    positions = sorted(p for p in keep if 0 < p <= end)
    if end and (not positions or positions[-1] < end):
        positions.append(KVOnly(end))
    return positions
