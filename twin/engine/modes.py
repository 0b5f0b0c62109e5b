"""Engine modes: a named bundle of what a serving engine does, with the engine's own flag names.

``--engine NAME`` picks one mode from :data:`ENGINE_MODES`. A mode names

- its **kernel source** (:mod:`twin.costmodel.kernel_sources`: whose measured
  kernels price the steps; ``--engine`` kept this meaning, a mode only adds to it),
- its **cache policy** and the options it derives from the model,
- its **preemption** when the shared KV pool runs out (``recompute`` or ``retract``),
- the **recurrent-state slots** a running request holds,
- its **flags**: ``--set name=value`` with the engine's own flag names, each
  mapped onto an :class:`~twin.engine.config.EngineConfig` field or a policy option.

The memory mode is not part of the bundle: ``--cache-gb auto`` is the shared
pool every engine has; ``--cache-gb G`` is the Marconi paper's dedicated cache
(``paper``, the default mode, is that paper's world: Marconi's policy, any
``--policy``). Adding a mode is one entry here (its flags in a module of its
own, as :mod:`twin.engine.modes_vllm` and :mod:`twin.engine.modes_sglang`;
what a mode is, :mod:`twin.engine.mode_base`); the engine only reads the
configuration it produces.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from twin.engine.kernel_layouts_trtllm import trtllm_kernel_layout
from twin.engine.mode_base import EngineMode
from twin.engine.modes_sglang import SGLANG
from twin.engine.modes_trtllm import (
    MAX_BATCH_SIZE,
    TRTLLM_ADP_BALANCE,
    TRTLLM_BATCH_WAIT,
    TRTLLM_BATCHING,
    TRTLLM_FLAGS,
    TRTLLM_MOE,
    TRTLLM_OVERLAP,
    TRTLLM_SPEC,
    _trtllm_options,
)
from twin.engine.modes_vllm import VLLM
from twin.engine.releases import Release, pick_release, release_for_measured, split_engine
from twin.errors import TwinError
from twin.model import ModelSpec

PAPER = EngineMode(
    name="paper",
    display="Marconi paper",
    kernels=None,
    policy="marconi",
    preemption="recompute",
    models="the Marconi paper's world: any --policy; --cache-gb G is its dedicated cache",
)

# TensorRT-LLM's capacity scheduler GUARANTEED_NO_EVICT (its default): a request starts
# only when the KV cache holds its whole prompt and max_tokens next to what the running
# requests may still need: the new_token_ratio reservation (twin.engine.admission) with
# the ratio held at 1 (start min(0.7 x 2, 1), floor factor 1: no decay) and no clip.
GUARANTEED_NO_EVICT = {
    "schedule_conservativeness": 2.0,
    "sglang_init_new_token_ratio": 0.7,
    "sglang_min_new_token_ratio_factor": 1.0,
    "sglang_new_token_ratio_decay_steps": 600,
    "sglang_retract_decode_steps": 20,
    "sglang_clip_max_new_tokens_estimation": 1 << 30,
}

# TensorRT-LLM: the one release its rules follow (twin.engine.trtllm_batching: the PyTorch
# executor's capacity scheduler and BuildConfig/TorchLlmArgs defaults of release 1.0, its batch
# waiting of 1.1 on (twin.engine.modes_trtllm.TRTLLM_BATCH_WAIT); NVIDIA's
# measured runs span 0.5.1 to 1.3.0rc5). Its flags are max_batch_size, max_num_tokens and the
# speculative_config section of --extra_llm_api_options (twin.engine.modes_trtllm); no
# second release differs in anything the twin models.
TRTLLM_RELEASES = (
    Release(
        version="1.0.0",
        source="tensorrt_llm/_torch/pyexecutor/scheduler.py, llmapi/llm_args.py (1.0)",
        flags=(
            *TRTLLM_BATCHING,
            *TRTLLM_BATCH_WAIT,
            *TRTLLM_OVERLAP,
            *TRTLLM_ADP_BALANCE,
            *TRTLLM_MOE,
            *TRTLLM_SPEC,
        ),
    ),
)


# TensorRT-LLM's ``max_batch_size`` default (BuildConfig, which TorchLlmArgs and
# trtllm-serve use in 1.0: twin.engine.modes_trtllm.MAX_BATCH_SIZE), where not given.
def trtllm_gpu_defaults(
    gpu_bytes: float,
    tp: int,
    given: dict[str, Any],
    gpu: str = "",
    model: ModelSpec | None = None,
) -> dict[str, Any]:
    return {} if "max_running" in given else {"max_running": MAX_BATCH_SIZE}


TRTLLM = EngineMode(
    name="trtllm",
    display="TensorRT-LLM",
    kernels="trtllm",
    policy="marconi",
    preemption="recompute",
    models="TensorRT-LLM's in-flight batching (whole contexts, GUARANTEED_NO_EVICT) with its "
    "kernels; its own cache (block reuse) not modelled: the paper's --policy",
    admission=GUARANTEED_NO_EVICT,
    scheduler="trtllm",
    flags=TRTLLM_FLAGS,
    options=_trtllm_options,
    gpu_defaults=trtllm_gpu_defaults,
    releases=TRTLLM_RELEASES,
    kernel_layout=trtllm_kernel_layout,
)

ENGINE_MODES: dict[str, EngineMode] = {m.name: m for m in (PAPER, VLLM, SGLANG, TRTLLM)}
DEFAULT_MODE = "paper"


def get_mode(name: str | None, flag: str = "--engine") -> EngineMode:
    """The engine mode called ``name`` (``None``: the default); a one-line error otherwise.

    ``name`` may pick a release, ``vllm==0.19`` (twin.engine.releases): the mode then
    runs that release's rules, defaults and flag names; without one, the newest modelled.
    ``flag`` names the option the name came from, in the error.
    """
    base, version = split_engine(name or DEFAULT_MODE, flag)
    try:
        mode = ENGINE_MODES[base]
    except KeyError:
        raise TwinError(f"{flag} {name!r}: expected one of {', '.join(ENGINE_MODES)}") from None
    if version is None:
        return mode
    if not mode.releases:
        raise TwinError(f"{flag} {name!r}: {base} has no releases (the Marconi paper's world)")
    return dataclasses.replace(mode, release=pick_release(base, mode.releases, version, flag))


def measured_mode(engine: str, version: str | None) -> str:
    """``--engine`` for a measured run of ``engine`` at ``version`` (its ``backend_version``):
    the modelled release that stands for it (:func:`release_for_measured`)."""
    mode = get_mode(engine)
    if not mode.releases:
        return mode.name
    return f"{mode.name}=={release_for_measured(mode.releases, version).version}"


__all__ = ["DEFAULT_MODE", "ENGINE_MODES", "get_mode", "measured_mode"]
