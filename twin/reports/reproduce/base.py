"""What a paper's reproduction is made of: workloads, points, claims and their verdicts.

A paper module (one per paper, registered in :mod:`reports.reproduce`) says
which workloads to generate (:class:`Recipe`), which cache replays and engine
simulations to run on them (:class:`ReplayPoint`, :class:`SimSet`), and how
to turn their results into :class:`Claim` rows: the paper's number, the
twin's, and a verdict computed from :class:`Check` results.

Verdicts (one rule for every claim, stated in the report):

- ``yes``: every trend check and every magnitude check passes;
- ``qualitatively``: every trend check passes, some magnitude does not;
- ``no``: some trend check fails.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from twin.errors import TwinError

MODEL = "marconi-hybrid-7b"
# Magnitude rule: the twin's number is within this factor of the paper's (both ways).
MAGNITUDE_FACTOR = 2.0
VERDICTS = ("yes", "qualitatively", "no")

# Marconi's grid: the plan (reports.reproduce.marconi) and its claims
# (marconi_claims{,_single}) both read it, so it lives below both.
KINDS = ("chat", "sharegpt", "swebench")
LABEL = {"chat": "LMSys-like", "sharegpt": "ShareGPT-like", "swebench": "SWE-bench-like"}
RATES = (0.5, 1.0, 2.0)  # sessions per second (paper sec. 5.1)
BASE_RATE = 1.0
FRACTIONS = {
    False: (1 / 64, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2),
    True: (1 / 32, 1 / 8, 1 / 2),
}
# The one cache of the single-configuration claims (3, 5, 6, 7, 8), chosen before
# running: an eighth of the footprint is well inside the contended range.
FOCUS = 1 / 8
GRID_POLICIES = ("vllm+", "sglang+", "marconi")
# Attention:SSM layer mixes of the composition sweep (28 mixer layers, 28 MLP).
MIXES = ((28, 0), (14, 14), (7, 21), (4, 24), (2, 26))
D_STATES = (16, 32, 64, 128)
THINK_S = (5.0, 10.0)  # swebench's median tool times of claim 7, seconds


@dataclass(frozen=True)
class Recipe:
    """A synthetic workload: ``twin workload generate KIND`` with these arguments."""

    name: str
    kind: str
    sessions: int
    session_rate: float
    seed: int = 0
    knobs: tuple[tuple[str, Any], ...] = ()

    @property
    def file_name(self) -> str:
        return f"{self.name}.parquet"

    def command(self, path: str) -> str:
        args = ["twin", "workload", "generate", self.kind, "--sessions", str(self.sessions)]
        args += ["--session-rate", f"{self.session_rate:g}", "--seed", str(self.seed)]
        for k, v in self.knobs:
            args += ["--set", f"{k}={v}"]
        return shlex.join([*args, "-o", path])


@dataclass(frozen=True)
class ReplayPoint:
    """One ``twin replay`` of one policy on one workload at one cache size."""

    workload: str  # a Recipe name
    policy: str
    cache_gb: float
    model_set: tuple[str, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    per_request: bool = False  # keep hit rate by input-length bin

    def command(self, path: str) -> str:
        args = ["twin", "replay", path, "-m", MODEL, "--cache-gb", f"{self.cache_gb:g}"]
        args += ["-p", self.policy]
        for s in self.model_set:
            args += ["--model-set", s]
        for k, v in self.options:
            args += ["--policy-option", f"{k}={v}"]
        return shlex.join(args)

    def key(self, workload_sha256: str) -> str:
        blob = json.dumps({**asdict(self), "sha": workload_sha256}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class SimSet:
    """Engine simulations (``twin simulate``) of several policies on one workload and cache."""

    workload: str  # a Recipe name
    policies: tuple[str, ...]
    cache_gb: float
    gpu: str = "h100"
    seed: int = 0

    @property
    def folder(self) -> str:
        return f"{self.workload}-{self.cache_gb:g}gb-{self.gpu}"

    def command(self, path: str, policy: str) -> str:
        args = ["twin", "simulate", path, "-m", MODEL, "--gpu", self.gpu]
        args += ["--cache-gb", f"{self.cache_gb:g}", "-p", policy, "--seed", str(self.seed)]
        return shlex.join([*args, "--out", f"sim-{policy}"])


@dataclass(frozen=True)
class Computation:
    """A paper's own computation: ``function(**args)`` (plus ``path=`` the workload's file when
    ``workload`` names a Recipe), a top-level function returning JSON-able numbers.

    For results that are neither a replay nor a sweep row (per-request TTFTs, allocator
    fits); the runner keeps them like replays, by a key over the computation and the
    workload's SHA-256. ``command`` is what a user types to rerun it.
    """

    name: str
    function: str  # "package.module:function"
    args: tuple[tuple[str, Any], ...] = ()
    workload: str | None = None  # a Recipe name
    command: str = ""

    def key(self, workload_sha256: str = "") -> str:
        blob = json.dumps({**asdict(self), "sha": workload_sha256}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Check:
    """One test of a claim against the twin's data: a trend (direction) or a magnitude."""

    kind: str  # "trend" | "magnitude"
    what: str
    passed: bool


@dataclass
class Claim:
    """One row of the claims table, and the evidence under it."""

    number: int
    title: str
    section: str
    paper: str  # the paper's figure or number, as text
    twin: str  # the twin's, as text
    checks: list[Check]
    commands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    table: tuple[list[str], list[list[str]]] | None = None  # detail table
    # (caption, draw): draw() returns <svg> text; called only when the report is written.
    figure: tuple[str, Callable[[], str]] | None = None

    @property
    def verdict(self) -> str:
        return verdict(self.checks)


def verdict(checks: Sequence[Check]) -> str:
    """``yes`` / ``qualitatively`` / ``no`` from the checks (module docstring)."""
    if not checks:
        raise ValueError("a claim needs at least one check")
    if not all(c.passed for c in checks if c.kind == "trend"):
        return "no"
    return "yes" if all(c.passed for c in checks) else "qualitatively"


def trend(what: str, passed: bool) -> Check:
    return Check("trend", what, bool(passed))


def magnitude(what: str, paper: float, twin: float | None) -> Check:
    """The twin's ``twin`` within :data:`MAGNITUDE_FACTOR` of the paper's ``paper`` (same sign)."""
    ok = (
        twin is not None
        and paper != 0
        and twin / paper > 0
        and 1 / MAGNITUDE_FACTOR <= twin / paper <= MAGNITUDE_FACTOR
    )
    shown = "-" if twin is None else f"{twin:.3g}"
    return Check("magnitude", f"{what}: paper {paper:g}, twin {shown}", ok)


def magnitude_range(what: str, low: float, high: float, twin: float | None) -> Check:
    """A paper's range ``low``-``high``: the twin's number within :data:`MAGNITUDE_FACTOR` of
    it (``low / F <= twin <= high * F``), the point rule of :func:`magnitude` widened."""
    ok = twin is not None and low / MAGNITUDE_FACTOR <= twin <= high * MAGNITUDE_FACTOR
    shown = "-" if twin is None else f"{twin:.3g}"
    return Check("magnitude", f"{what}: paper {low:g}-{high:g}, twin {shown}", ok)


class Results(Protocol):
    """What a paper's claims read: finished replays and simulations, with their commands."""

    def replay(self, point: ReplayPoint) -> dict[str, Any]: ...

    def sim(self, sims: SimSet, policy: str) -> dict[str, Any]: ...

    def workload_path(self, name: str) -> str: ...

    def footprint_gb(self, name: str) -> float: ...

    def artifact(self, point: ReplayPoint) -> dict[str, Any] | None: ...

    def computed(self, c: Computation) -> dict[str, Any]: ...


class Paper(Protocol):
    """A paper whose published results ``twin reproduce NAME`` reruns."""

    name: str
    title: str
    citation: str

    def workloads(self, quick: bool) -> list[Recipe]: ...

    def footprint_workloads(self, quick: bool) -> list[str]: ...

    def replays(self, quick: bool, footprint_gb: dict[str, float]) -> list[ReplayPoint]: ...

    def sims(self, quick: bool, footprint_gb: dict[str, float]) -> list[SimSet]: ...

    def artifact_points(self, quick: bool, footprint_gb: dict[str, float]) -> list[ReplayPoint]:
        """Points also run by the authors' code when its checkout is configured."""
        ...

    def computations(self, quick: bool) -> list[Computation]:
        """The paper's own computations (:class:`Computation`), run after the replays."""
        ...

    def claims(self, results: Results, quick: bool) -> list[Claim]: ...

    def notes(self) -> list[str]: ...


class ComputedPaper:
    r"""Defaults for a paper whose results are all :class:`Computation`\ s: no workloads
    unless it says so, and no footprints, replays, simulations or artifact points."""

    def workloads(self, quick: bool) -> list[Recipe]:
        return []

    def footprint_workloads(self, quick: bool) -> list[str]:
        return []

    def replays(self, quick: bool, footprint_gb: dict[str, float]) -> list[ReplayPoint]:
        return []

    def sims(self, quick: bool, footprint_gb: dict[str, float]) -> list[SimSet]:
        return []

    def artifact_points(self, quick: bool, footprint_gb: dict[str, float]) -> list[ReplayPoint]:
        return []


def cache_gb_of(fraction: float, footprint_gb: float) -> float:
    """A cache of ``fraction`` of a workload's footprint, rounded to 3 significant digits
    (so the printed ``--cache-gb`` reruns the exact same point)."""
    if footprint_gb <= 0:
        raise TwinError(f"workload footprint {footprint_gb} GB: nothing to cache")
    return float(f"{fraction * footprint_gb:.3g}")


def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def times(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"
