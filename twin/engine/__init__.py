"""The SimPy event engine: sessions arrive, a router picks a replica, replicas batch and step.

Entry points: :func:`build_run` (the one builder of a run from what a user
names) and :func:`simulate` (one run, records + summary), :class:`Cluster`
(the simulated cluster), :class:`EngineConfig` and :func:`build_config`, the
router registry (:data:`ROUTERS`, :func:`get_router`), the scheduler registry
(:data:`SCHEDULERS`, :func:`get_scheduler`: batch formation, apart from the
replica's cache and memory) and the :class:`StepPricer` protocol the engine
prices steps with.

Each name is imported from its module on first use (PEP 562), so importing one
submodule (``twin.engine.modes`` for ``twin simulate --help``) does not import the
whole engine (:mod:`twin.exports`: the ``TYPE_CHECKING`` block below lists them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.exports import lazy_exports

if TYPE_CHECKING:
    from twin.engine.batching import ContinuousBatching
    from twin.engine.budget import memory_budget
    from twin.engine.cluster import Cluster, RunStats, expected_horizon
    from twin.engine.config import (
        ArrivalConfig,
        CacheConfig,
        ClusterConfig,
        DisaggConfig,
        EngineConfig,
        EngineModeConfig,
        HostTimeConfig,
        MemoryConfig,
        SchedulerConfig,
    )
    from twin.engine.config_build import build_config
    from twin.engine.cost import CostModelPricer, PricerBase, StepPricer, make_pricer
    from twin.engine.replica import Replica
    from twin.engine.router import ROUTERS, Router, get_router
    from twin.engine.run import REQUESTS_FILE, SUMMARY_FILE, Run, RunArgs, build_run, simulate
    from twin.engine.scheduler import SCHEDULERS, Scheduler, get_scheduler
    from twin.engine.seq import Seq
    from twin.engine.settings import typed_settings
    from twin.engine.source import SessionSource

if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__)


__all__ = [
    "REQUESTS_FILE",
    "ROUTERS",
    "SCHEDULERS",
    "SUMMARY_FILE",
    "ArrivalConfig",
    "CacheConfig",
    "Cluster",
    "ClusterConfig",
    "ContinuousBatching",
    "CostModelPricer",
    "DisaggConfig",
    "EngineConfig",
    "EngineModeConfig",
    "HostTimeConfig",
    "MemoryConfig",
    "PricerBase",
    "Replica",
    "Router",
    "Run",
    "RunArgs",
    "RunStats",
    "Scheduler",
    "SchedulerConfig",
    "Seq",
    "SessionSource",
    "StepPricer",
    "build_config",
    "build_run",
    "expected_horizon",
    "get_router",
    "get_scheduler",
    "make_pricer",
    "memory_budget",
    "simulate",
    "typed_settings",
]
