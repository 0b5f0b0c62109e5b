"""Prefix-cache policies (admission, eviction, refresh), one module each, found by name.

Add a policy by subclassing :class:`policies.base.Policy` in its own module and
listing it in ``POLICIES``.
"""

from __future__ import annotations

from typing import Any

from policies.alpha_tuning import ALPHA_GRID
from policies.base import Policy, judicious_admission
from policies.marconi import MarconiPolicy
from policies.marconi_twin import MarconiTwinPolicy
from policies.oracle import OraclePolicy
from policies.sglang_plus import SGLangPlusPolicy
from policies.vanilla import VanillaPolicy
from policies.vllm_plus import VLLMPlusPolicy
from twin.errors import TwinError

POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        VanillaPolicy,
        VLLMPlusPolicy,
        SGLangPlusPolicy,
        MarconiPolicy,
        MarconiTwinPolicy,
        OraclePolicy,
    )
}
ALL_OPTIONS = frozenset(o for cls in POLICIES.values() for o in cls.OPTIONS)


def get_policy(name: str, **options: Any) -> Policy:
    """A fresh policy called ``name``.

    ``options`` may hold any policy's options (e.g. one set from the command
    line for several policies): each policy takes those it knows, ``None``
    values mean "default". Unknown names raise a ``TwinError`` listing the valid ones.
    """
    cls = POLICIES.get(name)
    if cls is None:
        raise TwinError(f"unknown policy {name!r}; valid policies: {', '.join(POLICIES)}")
    unknown = sorted(set(options) - ALL_OPTIONS)
    if unknown:
        raise TwinError(
            f"unknown policy option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(sorted(ALL_OPTIONS))}"
        )
    return cls(**{k: v for k, v in options.items() if k in cls.OPTIONS and v is not None})


__all__ = [
    "ALPHA_GRID",
    "POLICIES",
    "MarconiPolicy",
    "MarconiTwinPolicy",
    "OraclePolicy",
    "Policy",
    "SGLangPlusPolicy",
    "VLLMPlusPolicy",
    "VanillaPolicy",
    "get_policy",
    "judicious_admission",
]
