"""Prefix-cache policies (admission, eviction, refresh), one module each, found by name.

Add a policy by subclassing :class:`policies.base.Policy` (a radix tree's:
:class:`policies.base.RadixPolicy`) in its own module and listing it in ``POLICIES`` (its
name and ``module:Class``); its admission is a rule of :mod:`policies.admissions`, a leaf
policy's eviction order a function of :mod:`policies.eviction_orders` and the structures it
runs on names of :mod:`policies.structures` (which chooses one and builds it), each by name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twin.errors import TwinError, lookup
from twin.exports import Registry, lazy_exports

if TYPE_CHECKING:
    from twin.policies.admissions import ADMISSIONS, admission_rule
    from twin.policies.alpha_tuning import ALPHA_GRID
    from twin.policies.base import Policy
    from twin.policies.jenga import JengaPolicy
    from twin.policies.marconi import MarconiPolicy
    from twin.policies.marconi_twin import MarconiTwinPolicy
    from twin.policies.oracle import OraclePolicy
    from twin.policies.prompt_cache import PromptCachePolicy
    from twin.policies.sglang_hybrid import SGLangPolicy
    from twin.policies.sglang_plus import SGLangPlusPolicy
    from twin.policies.vanilla import VanillaPolicy
    from twin.policies.vllm_plus import VLLMPlusPolicy

if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__)  # the names above on first use

# Each policy by its ``name``, in the order ``--policy`` lists them, imported when looked up
# (a help lists the names without importing numpy and every policy; tests/test_policies.py
# checks each entry's class carries its name).
POLICIES: Registry[type[Policy]] = Registry(
    {
        "vanilla": "twin.policies.vanilla:VanillaPolicy",
        "vllm+": "twin.policies.vllm_plus:VLLMPlusPolicy",
        "sglang+": "twin.policies.sglang_plus:SGLangPlusPolicy",
        "marconi": "twin.policies.marconi:MarconiPolicy",
        "marconi-twin": "twin.policies.marconi_twin:MarconiTwinPolicy",
        "oracle": "twin.policies.oracle:OraclePolicy",
        "prompt-cache": "twin.policies.prompt_cache:PromptCachePolicy",
        "jenga": "twin.policies.jenga:JengaPolicy",
        "sglang": "twin.policies.sglang_hybrid:SGLangPolicy",
    }
)


def get_policy(name: str, **options: Any) -> Policy:
    """A fresh policy called ``name`` with ``options`` (``None`` values mean "default").

    Unknown names, and options this policy does not take, raise a ``TwinError``
    naming the policy and its valid options. Callers holding options meant for
    several policies (``twin replay``'s shared flags) pick each policy's own
    with :func:`options_for` first.
    """
    cls = policy_class(name)
    unknown = sorted(set(options) - set(cls.OPTIONS))
    if unknown:
        valid = ", ".join(cls.OPTIONS) if cls.OPTIONS else "none"
        raise TwinError(
            f"unknown policy option(s) {', '.join(unknown)} for policy {name!r}; "
            f"{name} takes: {valid}"
        )
    return cls(**{k: v for k, v in options.items() if v is not None})


def policy_class(name: str) -> type[Policy]:
    """The registered class called ``name``, or a ``TwinError`` listing the valid names."""
    return lookup(POLICIES, name, "policy", "valid policies")


def options_for(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``options`` (shared by several policies) that policy ``name`` takes."""
    cls = policy_class(name)
    return {k: v for k, v in options.items() if k in cls.OPTIONS}


__all__ = [
    "ADMISSIONS",
    "ALPHA_GRID",
    "POLICIES",
    "JengaPolicy",
    "MarconiPolicy",
    "MarconiTwinPolicy",
    "OraclePolicy",
    "Policy",
    "PromptCachePolicy",
    "SGLangPlusPolicy",
    "SGLangPolicy",
    "VLLMPlusPolicy",
    "VanillaPolicy",
    "admission_rule",
    "get_policy",
    "options_for",
    "policy_class",
]
