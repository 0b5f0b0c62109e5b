"""Synthetic workload generators, found by name through one registry.

A workload file is written by::

    cls = get_generator(kind)
    gen = cls(cls.parse_params({"key": "value", ...}))     # from --set key=value
    gen.write(out, sessions, rate, seed, max_context)      # gen.metadata(...), gen.rows(...)

(or ``sessions=None, duration_s=D`` for every session starting in [0, D) s).

Add a kind by subclassing ``WorkloadGenerator`` (``workloads.generators.base``) and
listing it here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.errors import lookup
from twin.exports import Registry, lazy_exports

if TYPE_CHECKING:
    from twin.workloads.generators.base import GeneratorParams, Turn, WorkloadGenerator
    from twin.workloads.generators.chat import ChatGenerator, ChatParams
    from twin.workloads.generators.doc_qa import DocQAGenerator, DocQAParams
    from twin.workloads.generators.fixed import FixedGenerator, FixedParams
    from twin.workloads.generators.sharegpt import ShareGPTGenerator, ShareGPTParams
    from twin.workloads.generators.swebench import SWEBenchGenerator, SWEBenchParams
    from twin.workloads.generators.system_prompt import SystemPromptGenerator, SystemPromptParams

if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__)  # the names above on first use

# Each kind by its ``name``, imported when looked up (a help lists the kinds without numpy).
GENERATORS: Registry[type[WorkloadGenerator]] = Registry(
    {
        "chat": "twin.workloads.generators.chat:ChatGenerator",
        "doc-qa": "twin.workloads.generators.doc_qa:DocQAGenerator",
        "fixed": "twin.workloads.generators.fixed:FixedGenerator",
        "sharegpt": "twin.workloads.generators.sharegpt:ShareGPTGenerator",
        "swebench": "twin.workloads.generators.swebench:SWEBenchGenerator",
        "system-prompt": "twin.workloads.generators.system_prompt:SystemPromptGenerator",
    }
)


def get_generator(kind: str) -> type[WorkloadGenerator]:
    """The generator class registered as ``kind``; a ``TwinError`` listing valid kinds if none."""
    return lookup(GENERATORS, kind, "generator", "valid generators")


__all__ = [
    "GENERATORS",
    "ChatGenerator",
    "ChatParams",
    "DocQAGenerator",
    "DocQAParams",
    "FixedGenerator",
    "FixedParams",
    "GeneratorParams",
    "SWEBenchGenerator",
    "SWEBenchParams",
    "ShareGPTGenerator",
    "ShareGPTParams",
    "SystemPromptGenerator",
    "SystemPromptParams",
    "Turn",
    "WorkloadGenerator",
    "get_generator",
]
