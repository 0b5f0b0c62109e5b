"""The one builder of an :class:`~twin.engine.config.EngineConfig` from what a user names,
with the GPU's and the engine's defaults where a name is absent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twin.engine.config import AUTO, EngineConfig, SchedulerConfig
from twin.hardware import GB
from twin.model import ModelSpec

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from twin.engine.settings import EngineSettings

_DEFAULT_BUDGET = SchedulerConfig().max_batched_tokens


def build_config(
    profile: Any = None,
    *,
    cache_gb: float | str | None = None,
    model: ModelSpec | None = None,
    **fields: Unpack[EngineSettings],
) -> EngineConfig:
    """The one builder of an :class:`EngineConfig` from what a user names.

    ``cache_gb`` (decimal GB) becomes ``cache_bytes`` (a dedicated cache);
    ``"auto"`` means the shared KV pool (``shared_pool``); ``profile`` (a
    calibration profile) gives ``gpu_memory_bytes`` unless it is named;
    every other field is :class:`EngineConfig`'s own, with its own default
    when absent; ``model``, where given, is read by the engine's defaults that
    depend on it (SGLang's ``mem_fraction_static``: MLA, the architecture).
    ``twin simulate``, the capacity sweeps and the library's entry points all
    build their configuration here, so no caller repeats a default or drops a
    field.
    """
    # The names given, and the defaults filled in below (the modes' own, by name).
    named: dict[str, Any] = dict(fields)
    if cache_gb == AUTO:
        named["shared_pool"] = True  # the engines' one KV pool: the cache takes what is free
    elif cache_gb is not None:
        named["cache_bytes"] = int(float(cache_gb) * GB)
    if profile is not None and "gpu_memory_bytes" not in named:
        from twin.costmodel.profile_store import (
            device_memory_bytes,  # late: the engine needs no profile
        )

        named["gpu_memory_bytes"] = device_memory_bytes(profile)
    engine = named.get("engine")
    if engine is not None and named.get("gpu_memory_bytes"):
        # An engine's own defaults that depend on the GPU (SGLang's chunked_prefill_size,
        # max_running_requests and mem_fraction_static, vLLM's max_num_batched_tokens and
        # max_num_seqs, TensorRT-LLM's max_batch_size), where not given.
        from twin.engine.modes import get_mode  # late: the modes import this module

        release = named.get("engine_release")
        gpu_defaults = get_mode(f"{engine}=={release}" if release else engine).gpu_defaults
        if gpu_defaults is not None:
            tp = named.get("tp", 1)
            gpu = str(getattr(profile, "gpu", "") or "")
            found = gpu_defaults(named["gpu_memory_bytes"], tp, named, gpu, model)
            applied = {k: v for k, v in found.items() if k not in named}
            if "max_running" in applied:  # the twin's batch holds at most a token a sequence
                budget = named.get("max_batched_tokens", applied.get("max_batched_tokens"))
                applied["max_running"] = min(applied["max_running"], budget or _DEFAULT_BUDGET)
            named.update(applied)
    if engine is not None and profile is not None:
        # The engine's times fitted to measured serving runs on this GPU (host time per
        # step, front end per request: twin/calibration/engine_times.json), where not given.
        from twin.engine.engine_times import engine_time_defaults

        for name, value in engine_time_defaults(engine, profile.gpu).items():
            named.setdefault(name, value)
    pools = named.get("prefill_workers") or 0, named.get("decode_workers") or 0
    if (pools[0] or pools[1]) and named.get("replicas", 1) == 1:
        named["replicas"] = max(pools[0], 0) + max(pools[1], 0) or 1  # the two pools
    return EngineConfig.of(**named)
