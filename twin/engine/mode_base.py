"""What an engine mode is (:class:`EngineMode`) and the parsers its flags share.

A mode's flags (``--set name=value``) are :class:`Flag` entries whose ``apply``
parses the value with the helpers here and writes
:class:`~twin.engine.config.EngineConfig` fields or policy options; the modes
themselves live one engine a module (:mod:`twin.engine.modes_vllm`,
:mod:`twin.engine.modes_sglang`) and are found by name in
:mod:`twin.engine.modes`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from twin.costmodel.kernel_layout import DEFAULT_LAYOUT, KernelLayout
from twin.engine.releases import RELEASE, Release
from twin.errors import TwinError
from twin.model import ModelSpec

# The preemption rules and schedule orders the engine runs (EngineConfig checks them).
PREEMPTIONS = ("recompute", "retract")
SCHEDULE_POLICIES = ("fcfs", "lpm")

Apply = Callable[[str, ModelSpec, dict[str, Any]], None]


def flag_name(given: str) -> str:
    """A flag's name as given (``--max-num-seqs``) as the twin spells it (``max_num_seqs``)."""
    return given.lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Flag:
    """One engine flag: its help and how its value changes the run's settings."""

    help: str
    apply: Apply
    default: str


def _int(name: str, value: str, low: int = 1) -> int:
    try:
        v = int(value)
    except ValueError:
        raise TwinError(f"--set {name}={value}: expected an integer") from None
    if v < low:
        raise TwinError(f"--set {name}={value}: must be at least {low}")
    return v


def _float(name: str, value: str, low: float, high: float) -> float:
    try:
        v = float(value)
    except ValueError:
        raise TwinError(f"--set {name}={value}: expected a number") from None
    if not (math.isfinite(v) and low < v <= high):
        raise TwinError(f"--set {name}={value}: must be in ({low:g}, {high:g}]")
    return v


def _bool(name: str, value: str) -> bool:
    low = value.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise TwinError(f"--set {name}={value}: expected true or false")


def _choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise TwinError(f"--set {name}={value}: expected one of {', '.join(choices)}")
    return value


def _acceptance(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
    """``--set speculative_acceptance=`` (both engines): read with the speculative tokens
    once every flag is given (``twin.engine.speculative_acceptance.parse_acceptance``)."""
    out["spec_acceptance"] = value


def _field(name: str, target: str, kind: str, help: str, default: str) -> Flag:
    """Flag ``name``, which sets one EngineConfig field."""

    def apply(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
        out[target] = _int(name, value) if kind == "int" else _float(name, value, 0.0, 1.0)

    return Flag(help, apply, default)


def _scheduler_option(name: str, kind: str = "int", low: int = 1) -> Apply:
    """The rule of flag ``name`` when it sets the scheduler option of its own name
    (``EngineConfig.scheduler_options``): an integer of at least ``low``, or a bool."""

    def apply(value: str, model: ModelSpec, out: dict[str, Any]) -> None:
        v = _bool(name, value) if kind == "bool" else _int(name, value, low)
        out.setdefault("scheduler_options", {})[name] = v

    return apply


def _batching_flags(
    running: str,
    budget: str,
    memory: str,
    budget_default: str = "8192",
    memory_default: str = "0.9",
    running_default: str = "256",
) -> dict[str, Flag]:
    """An engine's names for the running cap, the step's token budget and its memory share."""
    return {
        running: _field(running, "max_running", "int", "most running requests", running_default),
        budget: _field(
            budget,
            "max_batched_tokens",
            "int",
            "token budget per step (chunked prefill)",
            budget_default,
        ),
        memory: _field(
            memory,
            "memory_utilization",
            "float",
            "share of HBM for weights + KV pool",
            memory_default,
        ),
    }


@dataclass(frozen=True)
class EngineMode:
    """A serving engine's bundle of choices (module docstring)."""

    name: str
    display: str
    kernels: str | None  # kernel source (None: the default lookup, own profiles first)
    policy: str  # the cache policy it runs
    preemption: str  # "recompute" (youngest running) or "retract" (decode requests)
    models: str  # which real system this mode models (README, --help)
    flags: dict[str, Flag] = field(default_factory=dict)
    options: Callable[[ModelSpec, dict[str, Any]], dict[str, Any]] = lambda m, s: {}
    # SGLang's new_token_ratio admission settings (twin.engine.admission); None: none.
    admission: dict[str, float] | None = None
    # Batch formation (twin.engine.scheduler.SCHEDULERS) unless a flag picks another,
    # and its settings (EngineConfig.scheduler_options) before the flags'.
    scheduler: str = "continuous"
    scheduler_options: dict[str, Any] = field(default_factory=dict)
    # EngineConfig defaults that depend on the GPU: (HBM bytes per GPU, tp, the fields
    # given, the GPU's name or "", the model or None) -> fields, applied by build_config
    # where a field is not given; None: none.
    gpu_defaults: (
        Callable[[float, int, dict[str, Any], str, ModelSpec | None], dict[str, Any]] | None
    ) = None
    # The releases modelled, newest first (twin.engine.releases), and the one picked
    # (--engine NAME==VERSION; None: the newest). A mode without releases (paper) has none.
    releases: tuple[Release, ...] = ()
    release: Release | None = None
    # How the engine build lays out a model's kernels where it differs from the twin's
    # default pricing (twin.costmodel.kernel_layout): (the model, the build: a release or a
    # nightly image's tag, the replica's GPUs, its attention-DP ranks, its expert-parallel
    # size, the GPU's name) -> the layout the cost model prices; None: the default layout.
    kernel_layout: Callable[[ModelSpec, str, int, int, int, str], KernelLayout] | None = None

    def layout_for(
        self, model: ModelSpec, build: str, tp: int, dp: int, ep: int, gpu: str
    ) -> KernelLayout:
        """The kernel layout of ``model`` on ``build`` of this engine, ``tp`` GPUs a replica
        (``gpu``; "": not known), ``dp`` attention-DP ranks among them and experts split
        over ``ep`` (``kernel_layout``)."""
        if self.kernel_layout is None:
            return DEFAULT_LAYOUT
        return self.kernel_layout(model, build, tp, dp, ep, gpu)

    @property
    def current(self) -> Release | None:
        """The release this mode runs under: the one picked, else the newest."""
        return self.release or (self.releases[0] if self.releases else None)

    @property
    def build(self) -> str:
        """The engine build a run of this mode lays its kernels out as when it names none
        (``EngineModeConfig.engine_build``; ``twin.engine.run_pricing.kernel_layout_of``): the
        current release's, which a run's config records as ``engine_release``, or as
        ``kernel_tables`` where ``NAME==VERSION`` picks it; "" for a mode without releases."""
        rel = self.current
        return rel.version if rel is not None else ""

    def release_flags(self) -> dict[str, Flag]:
        """The flags of the current release (all the mode's flags without releases)."""
        rel = self.current
        if rel is None:
            return dict(self.flags)
        return {name: self.flags[name] for name in rel.flags}

    def check_flag(self, name: str) -> Flag:
        """The flag ``name`` of the current release; one line naming what to give otherwise."""
        rel = self.current
        if rel is not None and name not in rel.flags:
            label = f"{self.display} {rel.version}"
            if name in rel.renamed:
                raise TwinError(f"--set {name}: {label} {rel.renamed[name]}")
            others = [r.version for r in self.releases if name in r.flags]
            if others:
                raise TwinError(
                    f"--set {name}: not a flag of {label}; it is one of "
                    + ", ".join(f"--engine {self.name}=={v}" for v in others)
                )
        flags = self.release_flags()
        if name in flags:
            return flags[name]
        if not flags:
            raise TwinError(
                f"--set {name}: engine {self.name!r} takes no flags; "
                "name the engine the flags are for (--engine vllm or --engine sglang)"
            )
        raise TwinError(
            f"--set {name}: engine {self.name!r} has no such flag (its flags: {', '.join(flags)})"
        )

    def apply_flag(self, name: str, value: str, model: ModelSpec, out: dict[str, Any]) -> None:
        """Apply flag ``name`` under the current release, writing ``out``."""
        flag = self.check_flag(name)
        out[RELEASE] = self.current
        try:
            flag.apply(value, model, out)
        finally:
            out.pop(RELEASE, None)

    def flag_lines(self) -> list[str]:
        """The current release's flags with its defaults and sources (``--help``, README)."""
        rel = self.current
        if rel is None:
            return []
        lines = [
            f"--engine {self.name} = {self.display} {rel.version} (rules read from {rel.source})"
        ]
        for name, flag in self.release_flags().items():
            lines.append(f"  --set {name}={rel.default(name, flag.default)}: {flag.help}")
        for other in self.releases:
            if other is not rel:
                lines.append(f"  --engine {self.name}=={other.version}: {other.notes}")
        return lines

    def settings(self, model: ModelSpec, sets: dict[str, str]) -> dict[str, Any]:
        """EngineConfig fields for this mode with ``sets`` (``--set name=value``) applied."""
        sets = {flag_name(k): v for k, v in sets.items()}
        for name in sorted(sets):
            self.check_flag(name)
        rel = self.current
        out: dict[str, Any] = {
            "policy": self.policy,
            "preemption": self.preemption,
            "scheduler": self.scheduler,
        }
        out[RELEASE] = rel
        for name, flag in self.flags.items():
            if name in sets:
                flag.apply(sets[name], model, out)
        out["policy_options"] = {**self.options(model, out), **out.get("policy_options", {})}
        out.pop(RELEASE)
        if self.scheduler_options or "scheduler_options" in out:
            out["scheduler_options"] = {
                **self.scheduler_options,
                **out.get("scheduler_options", {}),
            }
        if self.admission is not None:
            out["new_token_ratio"] = {**self.admission, **out.pop("new_token_ratio", {})}
        if self.name != "paper":
            out["engine"] = self.name
            if rel is not None:
                out["engine_release"] = rel.version
            if sets:
                out["engine_flags"] = dict(sorted(sets.items()))
        return out
