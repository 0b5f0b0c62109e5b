"""What a user names of the engine's configuration, typed: every group's fields, flat.

:class:`NamedSettings` and :class:`EngineSettings` type the keywords of
``twin.engine.config_build.build_config`` and ``EngineConfig.of`` (their names are the
groups' fields, checked at import), and :func:`typed_settings` is the one builder of
typed settings from loose (name, value) pairs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypedDict, TypeVar, cast

from twin.engine.config import GROUP_OF
from twin.errors import TwinError


class NamedSettings(TypedDict, total=False):
    """What a user names of an :class:`EngineConfig` (flat, each group's own fields), the
    engine mode aside (:class:`EngineSettings` adds it; ``twin.engine.build_run`` takes
    it as its own argument, a release with it): a name given, even at its default, wins
    over the GPU's and the engine's defaults (:func:`build_config`); one absent takes
    them. Every builder of a run takes these typed (``build_config``,
    ``EngineConfig.of``, ``build_run``); the groups' fields and :class:`EngineSettings`'
    names are the same set (checked below)."""

    # cluster (ClusterConfig)
    replicas: int
    tp: int
    ep: int
    dp_attention: int
    moe_a2a: str
    pp: int
    router: str
    # memory (MemoryConfig)
    cache_bytes: int
    gpu_memory_bytes: float | None
    memory_utilization: float
    shared_pool: bool
    kv_allocator: str
    state_slots: int
    host_cache_ratio: float
    host_cache_bytes: int
    host_write_policy: str
    # cache (CacheConfig)
    policy: str
    policy_options: dict[str, Any]
    # scheduling (SchedulerConfig)
    max_batched_tokens: int
    max_running: int
    scheduler: str
    scheduler_options: dict[str, Any]
    schedule_policy: str
    preemption: str
    new_token_ratio: dict[str, float]
    # arrivals (ArrivalConfig)
    session_rate: float | None
    request_rate: float | None
    concurrency: int | None
    burstiness: float
    seed: int
    warmup_s: float
    until_s: float | None
    samples: int
    # mode (EngineModeConfig; ``engine``: EngineSettings)
    engine_release: str
    kernel_tables: str
    engine_build: str
    engine_flags: dict[str, str]
    speculative: dict[str, Any]
    # host_time (HostTimeConfig)
    frontend_s: float
    frontend_batch: int
    frontend_token_s: float
    stream_token_s: float
    step_host_s: float
    seq_host_s: float
    eager_prefill_s: float
    eager_graph_tokens: int
    eager_overlap: bool
    eager_decode_s: float
    cold_prefix_stall_s: float
    # disagg (DisaggConfig)
    prefill_workers: int
    decode_workers: int
    kv_link: str
    decode_gpu: str
    decode_tp: int
    decode_ep: int
    decode_dp_attention: int
    decode_prefix_cache: bool
    shared_kv_tier_bytes: int
    prefill_engine_flags: dict[str, str]
    decode_engine_flags: dict[str, str]


class EngineSettings(NamedSettings, total=False):
    """:class:`NamedSettings` and the engine mode: every :class:`EngineConfig` field."""

    engine: str


assert EngineSettings.__optional_keys__ == frozenset(GROUP_OF)

Settings = TypeVar("Settings", bound=Mapping[str, object])


def typed_settings(kind: type[Settings], pairs: Iterable[tuple[str, object]]) -> Settings:
    """The one builder of typed settings (``kind``: :class:`NamedSettings`,
    ``twin.engine.RunArgs``, ...) from loose (name, value) pairs: a sweep's stored settings,
    a plan's, a measured row's server limits. Every name must be one of ``kind``'s; one it
    lacks is refused in one line, before any work (the values are checked where the config
    is built: :func:`build_config`)."""
    named = dict(pairs)
    # a TypedDict's names (mypy has no bound for TypedDict classes: read, not typed)
    known: frozenset[str] = getattr(kind, "__optional_keys__")  # noqa: B009
    unknown = sorted(set(named) - known)
    if unknown:
        raise TwinError(f"{unknown[0]!r}: not a setting of a run ({kind.__name__})")
    return cast(Settings, named)
