"""The cache structures by name and the one rule choosing a policy's (``policies.structures``)."""

from __future__ import annotations

import pytest

from twin.cache import BlockCache, ModuleCache, PrefixCache
from twin.cache.empty import EmptyCache
from twin.cache.hybrid_radix import HybridRadixCache
from twin.cache.sparse_blocks import SparseBlockCache
from twin.errors import TwinError
from twin.policies import POLICIES, get_policy
from twin.policies.compiled.live import LiveCache
from twin.policies.structures import (
    STRUCTURES,
    build_structure,
    choose_structure,
    make_cache,
)
from twin.presets import get_model

HYBRID = get_model("tiny-hybrid")
TRANSFORMER = get_model("tiny-transformer")

# policy (options) -> (attention only, with recurrent layers, fast on the hybrid)
EXPECTED = {
    ("vanilla", ()): ("radix", "radix", "empty"),
    ("sglang+", ()): ("radix", "radix", "radix"),
    ("jenga", ()): ("radix", "radix", "radix"),
    ("sglang", ()): ("radix", "hybrid-radix", "hybrid-radix"),
    ("vllm+", ()): ("blocks", "blocks", "blocks"),
    ("vllm+", (("retention_interval", 0),)): ("blocks", "sparse-blocks", "sparse-blocks"),
    ("prompt-cache", ()): ("modules", "modules", "modules"),
    ("marconi", ()): ("compiled-radix", "compiled-radix", "compiled-radix"),
    ("marconi-twin", ()): ("compiled-radix", "compiled-radix", "compiled-radix"),
    ("oracle", ()): ("compiled-radix", "compiled-radix", "compiled-radix"),
}

# structure -> its cache class, and a policy (options) chosen it on the hybrid (fast or not)
KINDS = {
    "radix": (PrefixCache, "sglang+", {}, False),
    "hybrid-radix": (HybridRadixCache, "sglang", {}, False),
    "blocks": (BlockCache, "vllm+", {}, False),
    "sparse-blocks": (SparseBlockCache, "vllm+", {"retention_interval": 0}, False),
    "modules": (ModuleCache, "prompt-cache", {}, False),
    "compiled-radix": (LiveCache, "marconi", {}, False),
    "empty": (EmptyCache, "vanilla", {}, True),
}


def test_every_policy_is_chosen_a_registered_structure():
    assert {name for name, _ in EXPECTED} == set(POLICIES)
    for (name, options), (plain, recurrent, fast) in EXPECTED.items():
        policy = get_policy(name, **dict(options))
        chosen = (
            choose_structure(policy, TRANSFORMER),
            choose_structure(policy, HYBRID),
            choose_structure(policy, HYBRID, fast=True),
        )
        assert chosen == (plain, recurrent, fast), name
        assert set(chosen) <= set(STRUCTURES)


def test_each_structure_builds_its_cache_bound_to_the_policy():
    assert set(KINDS) == set(STRUCTURES)  # the tests' oracle structure is not registered
    for name, (cls, policy_name, options, fast) in KINDS.items():
        policy = get_policy(policy_name, **options)
        assert choose_structure(policy, HYBRID, fast) == name
        cache = make_cache(policy, HYBRID, 10**9, fast)
        assert type(cache) is cls
        assert policy.cache is cache


def test_a_policy_on_a_structure_it_does_not_run_on_is_refused():
    with pytest.raises(TwinError, match="does not run on the blocks structure"):
        build_structure("blocks", HYBRID, 10**9, get_policy("sglang+"))
    with pytest.raises(TwinError, match="unknown cache structure 'heap'; valid: radix"):
        build_structure("heap", HYBRID, 10**9, get_policy("sglang+"))


def test_the_sglang_policy_learns_its_structure_from_the_cache_it_is_given():
    hybrid, plain = get_policy("sglang"), get_policy("sglang")
    make_cache(hybrid, HYBRID, 10**9)
    make_cache(plain, TRANSFORMER, 10**9)
    assert hybrid.hybrid and not plain.hybrid
