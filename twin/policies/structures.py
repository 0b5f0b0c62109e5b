"""Cache structures by name, and the one rule that chooses which a policy runs on.

A policy declares the structures it runs on as data (:class:`twin.policies.base.Policy`:
``structure``, ``recurrent_structure``, ``fast_structure``, names of
:data:`STRUCTURES`); :func:`choose_structure` picks one by the model's layer kinds and
by what the cache's holder calls; :func:`build_structure` builds it, and the structure
binds the policy (the policy receives the structure it runs on; it makes none). The
engine mode reaches the structure through the policy and options it sets (``sglang``:
the ``sglang`` policy, SGLang's ``MambaRadixCache`` on a model with recurrent layers;
``vllm``: ``vllm+`` with vLLM's retention, the sparse block pool on one). Adding a
structure is one entry here; adding a policy on an existing one never edits this module
unless the structure reads a new option of it.

- ``radix``: the token-exact radix tree (``twin.cache.PrefixCache``);
- ``hybrid-radix``: SGLang's ``MambaRadixCache`` (``twin.cache.hybrid_radix``: KV and
  state pools, tombstones), ``sglang``'s on a model with recurrent layers;
- ``blocks`` / ``sparse-blocks``: vLLM's block pool, a state on every block or on the
  retained ones (``twin.cache.BlockCache``, ``twin.cache.sparse_blocks``);
- ``modules``: Prompt Cache's module store (``twin.cache.ModuleCache``);
- ``compiled-radix``: the Marconis' compiled live cache (``policies.compiled.live``);
- ``empty``: a cache that admits nothing, without a tree (``twin.cache.empty``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from twin.cache import BlockCache, HeldCache, ModuleCache, PrefixCache
from twin.cache.empty import EmptyCache
from twin.cache.hybrid_radix import HybridRadixCache
from twin.cache.sparse_blocks import SparseBlockCache
from twin.errors import TwinError, lookup
from twin.model import ModelSpec
from twin.policies.base import Policy, RadixPolicy, RulePolicy
from twin.policies.compiled.live import LiveCache
from twin.policies.marconi import MarconiPolicy
from twin.policies.prompt_cache import PromptCachePolicy
from twin.policies.sglang_hybrid import SGLangPolicy
from twin.policies.vllm_plus import VLLMPlusPolicy

# A structure: the model, its capacity in bytes and the policy it serves -> the cache,
# bound to the policy (each structure's constructor calls ``policy.bind``).
Build = Callable[[ModelSpec, int, Policy], HeldCache]

P = TypeVar("P", bound=Policy)


@dataclass(frozen=True)
class Structure:
    """One registered structure: how it is built, and whether it hands each evicted node
    to its ``on_evict`` hook (the radix trees: ``PrefixCache.on_evict``, the compiled
    tree's ``LiveCache.on_evict``), so a write-back host tier receives its evictions; the
    block pools and the module store never evict that way
    (``twin.engine.cluster._check_write_back``)."""

    build: Build
    evicts_to_host: bool = False


def _serving(policy: Policy, cls: type[P], structure: str) -> P:
    """``policy`` as the kind of policy ``structure`` calls (and reads its options of)."""
    if not isinstance(policy, cls):
        raise TwinError(f"policy {policy.name!r} does not run on the {structure} structure")
    return policy


def _radix(model: ModelSpec, capacity: int, policy: Policy) -> HeldCache:
    return PrefixCache(model, capacity, _serving(policy, RadixPolicy, "radix"))


def _hybrid_radix(model: ModelSpec, capacity: int, policy: Policy) -> HeldCache:
    p = _serving(policy, SGLangPolicy, "hybrid-radix")
    return HybridRadixCache(model, capacity, p, p.ratio, int8_checkpoint=p.int8_checkpoint)


def _blocks(model: ModelSpec, capacity: int, policy: Policy) -> HeldCache:
    p = _serving(policy, VLLMPlusPolicy, "blocks")
    return BlockCache(model, capacity, p, p.block_size)


def _sparse_blocks(model: ModelSpec, capacity: int, policy: Policy) -> HeldCache:
    p = _serving(policy, VLLMPlusPolicy, "sparse-blocks")
    return SparseBlockCache(model, capacity, p, p.block_size)


def _modules(model: ModelSpec, capacity: int, policy: Policy) -> HeldCache:
    p = _serving(policy, PromptCachePolicy, "modules")
    return ModuleCache(model, capacity, p, p.storage)


def _compiled_radix(model: ModelSpec, capacity: int, policy: Policy) -> HeldCache:
    return LiveCache(model, capacity, _serving(policy, MarconiPolicy, "compiled-radix"))


def _empty(model: ModelSpec, capacity: int, policy: Policy) -> HeldCache:
    return EmptyCache(model, capacity, _serving(policy, RulePolicy, "empty"))


STRUCTURES: dict[str, Structure] = {
    "radix": Structure(_radix, evicts_to_host=True),
    "hybrid-radix": Structure(_hybrid_radix, evicts_to_host=True),
    "blocks": Structure(_blocks),
    "sparse-blocks": Structure(_sparse_blocks),
    "modules": Structure(_modules),
    "compiled-radix": Structure(_compiled_radix, evicts_to_host=True),
    "empty": Structure(_empty),
}

# The structure whose memory is SGLang's two pools (``twin.engine.memory_strategies``).
SPLIT_POOLS_STRUCTURE = "hybrid-radix"


def choose_structure(policy: Policy, model: ModelSpec, fast: bool = False) -> str:
    """The name of the structure ``policy`` runs on for ``model``.

    ``fast``: the holder uses only the request protocol and reads reports (the engine's
    cache without a host tier, a replay's), so the policy's ``fast_structure`` (the same
    answers with less work: ``vanilla``'s ``empty``) may stand in; a host tier's cache,
    one over a host tier (its write-back hook, the host's lookups and inserts) and the
    reference executor's (its tensor store follows the tree's nodes) call the structure
    itself. Otherwise a model with recurrent layers gets ``recurrent_structure`` where
    the policy names one, and every other model ``structure``.
    """
    if fast and policy.fast_structure is not None:
        return policy.fast_structure
    if model.n_ssm_layers and policy.recurrent_structure is not None:
        return policy.recurrent_structure
    return policy.structure


def structure_named(name: str) -> Structure:
    """The registered structure called ``name``; an unknown name is one line."""
    return lookup(STRUCTURES, name, "cache structure")


def build_structure(name: str, model: ModelSpec, capacity: int, policy: Policy) -> HeldCache:
    """The structure called ``name`` of ``capacity`` bytes for ``model``, bound to ``policy``."""
    return structure_named(name).build(model, capacity, policy)


def make_cache(policy: Policy, model: ModelSpec, capacity: int, fast: bool = False) -> HeldCache:
    """The cache ``policy`` runs on (:func:`choose_structure`), built and bound to it."""
    return build_structure(choose_structure(policy, model, fast), model, capacity, policy)
