"""Run a paper's plan: generate its workloads, replay and simulate its points, keep results.

Everything lands under ``OUT``: ``workloads/*.parquet`` (each the output of the
``twin workload generate`` command printed beside it), ``replays.json`` (one
entry per replay point, by a key over the point and the workload's SHA-256,
rewritten atomically after each point, so a rerun computes only what is
missing) and ``sim/<set>/results.parquet`` (the capacity sweep's resumable
table, :mod:`reports.sweep`). Replays run in-process with ``jobs == 1``, in a
local process pool (:func:`twin.workers.run_in_pool`) or as ray tasks
(:func:`reports.ray_executor.run_on_ray`); simulations go through
:func:`reports.sweep.run_sweep` with the same executor.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from twin import __version__
from twin.atomic import write_text_atomic
from twin.errors import TwinError
from twin.hardware import GB
from twin.presets import resolve_model
from twin.replay import replay
from twin.reports.ray_executor import import_ray, run_on_ray
from twin.reports.reproduce import get_paper
from twin.reports.reproduce.artifact import checkout, describe, run_artifact
from twin.reports.reproduce.base import (
    MODEL,
    Claim,
    Computation,
    Paper,
    Recipe,
    ReplayPoint,
    SimSet,
)
from twin.reports.sweep import Point, SweepSpec, resolve, run_sweep
from twin.workers import run_in_pool
from twin.workloads.generators import get_generator
from twin.workloads.importers.base import sha256_file

REPLAYS_FILE = "replays.json"
ARTIFACT_FILE = "artifact.json"
COMPUTED_FILE = "computed.json"
# A cache no workload here can fill: its peak bytes are the workload's footprint.
UNBOUNDED_GB = 1e6
FOOTPRINT_POLICY = "sglang+"

Progress = Callable[[float], None]
T = TypeVar("T")


def _nothing(_: float) -> None:
    return None


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """The results an earlier run kept in the JSON file ``path`` by key (none: ``{}``)."""
    if not path.is_file():
        return {}
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError) as err:
        raise TwinError(f"{path}: cannot read earlier results ({err}); delete it") from None


def _missing(
    items: list[T],
    key: Callable[[T], str],
    results: dict[str, dict[str, Any]],
    path: Path,
    progress: Progress,
) -> tuple[list[T], Callable[[T, dict[str, Any]], None]]:
    """The distinct ``items`` whose ``key`` ``results`` lacks (the rest counted done), and the
    callback keeping an item's result in ``results`` and ``path`` (rewritten atomically)."""
    unique = list(dict.fromkeys(items))
    todo = [x for x in unique if key(x) not in results]
    progress(len(unique) - len(todo))

    def done(item: T, result: dict[str, Any]) -> None:
        results[key(item)] = result
        write_text_atomic(path, json.dumps(results, sort_keys=True, indent=0) + "\n")
        progress(1)

    return todo, done


def generate(recipe: Recipe, path: Path) -> None:
    """Write ``recipe``'s workload to ``path`` (what its printed command does)."""
    cls = get_generator(recipe.kind)
    gen = cls(cls.parse_params({k: str(v) for k, v in recipe.knobs}))
    # At the CLI's default max context, as the printed command runs.
    gen.write(path, recipe.sessions, recipe.session_rate, recipe.seed)


def run_replay(path: str, point: ReplayPoint) -> dict[str, Any]:
    """One replay point's numbers (top-level so pool workers and ray can pickle it)."""
    model = resolve_model(MODEL, point.model_set)
    r = replay(
        path,
        model,
        int(point.cache_gb * GB),
        point.policy,
        dict(point.options),
        per_request=point.per_request,
    )
    out: dict[str, Any] = {
        k: getattr(r, k)
        for k in (
            "token_hit_rate",
            "request_hit_rate",
            "hit_tokens",
            "prompt_tokens",
            "flops_saved",
            "flops_total",
            "peak_bytes",
            "capacity_bytes",
            "checkpoints_admitted",
            "checkpoints_hit",
            "evictions",
            "alpha",
        )
    }
    if r.per_request is not None:
        out["input_tokens"] = [int(x) for x in r.per_request["input_tokens"]]
        out["hit_tokens_per_request"] = [int(x) for x in r.per_request["hit_tokens"]]
    return out


def run_computation(path: str | None, c: Computation) -> dict[str, Any]:
    """One paper computation's numbers (top-level so pool workers and ray can pickle it)."""
    import importlib

    module, _, name = c.function.partition(":")
    function = getattr(importlib.import_module(module), name)
    kwargs = dict(c.args) | ({} if path is None else {"path": path})
    return dict(function(**kwargs))


def run_artifact_point(repo: str, path: str, point: ReplayPoint) -> dict[str, Any]:
    """One replay point run by the authors' artifact (top-level for pool workers)."""
    m = resolve_model(MODEL, point.model_set)
    shape = {
        "num_ssm_layers": m.n_ssm_layers,
        "num_attn_layers": m.n_attention_layers,
        "num_mlp_layers": m.n_mlp_layers,
        "d": m.d_model,
        "n": m.ssm_d_state,
    }
    return run_artifact(repo, path, point.policy, int(point.cache_gb * GB), shape)


class Run:
    """One reproduction's files and results; also what a paper's claims read (``Results``)."""

    def __init__(
        self,
        paper: Paper,
        out: Path,
        quick: bool,
        jobs: int = 1,
        executor: str = "local",
        ray_address: str | None = None,
    ) -> None:
        if jobs < 1:
            raise TwinError(f"--jobs: must be at least 1 (got {jobs})")
        if executor not in ("local", "ray"):
            raise TwinError(f"--executor {executor!r}: choose from local, ray")
        if ray_address and executor != "ray":
            raise TwinError("--ray-address: needs --executor ray")
        self.paper, self.out, self.quick = paper, Path(out), quick
        self.jobs, self.executor, self.ray_address = jobs, executor, ray_address
        # A missing extra or a silent cluster fails before any work.
        self.ray = import_ray(ray_address) if executor == "ray" else None
        self.recipes = {r.name: r for r in paper.workloads(quick)}
        self._sha: dict[str, str] = {}
        self._replays: dict[str, dict[str, Any]] = {}
        self._sims: dict[tuple[SimSet, str], dict[str, Any]] = {}
        self._footprints: dict[str, float] = {}

        self.artifact_repo = checkout()  # $TWIN_MARCONI_ARTIFACT, checked before any work
        self._artifact: dict[str, dict[str, Any]] = {}
        self._computed: dict[str, dict[str, Any]] = {}

    # ----- what the claims read (reports.reproduce.base.Results) -----------------------
    def workload_path(self, name: str) -> str:
        return str(self.out / "workloads" / self.recipes[name].file_name)

    def replay(self, point: ReplayPoint) -> dict[str, Any]:
        found = self._replays.get(self._replay_key(point))
        if found is None:
            raise KeyError(f"replay point not in the plan: {point}")
        return {**found, "command": point.command(self.workload_path(point.workload))}

    def sim(self, sims: SimSet, policy: str) -> dict[str, Any]:
        row = self._sims[(sims, policy)]
        return {**row, "command": sims.command(self.workload_path(sims.workload), policy)}

    def artifact(self, point: ReplayPoint) -> dict[str, Any] | None:
        """The artifact's result on ``point``; None when no checkout is configured."""
        if self.artifact_repo is None:
            return None
        return self._artifact.get(self._artifact_key(point))

    def _replay_key(self, point: ReplayPoint) -> str:
        return point.key(self._sha[point.workload])

    def _artifact_key(self, point: ReplayPoint) -> str:
        return f"{point.key(self._sha[point.workload])}@{self.artifact_repo}"

    def footprint_gb(self, name: str) -> float:
        return self._footprints[name]

    def computed(self, c: Computation) -> dict[str, Any]:
        found = self._computed.get(self._computed_key(c))
        if found is None:
            raise KeyError(f"computation not in the plan: {c}")
        return {**found, "command": c.command}

    def _computed_key(self, c: Computation) -> str:
        return c.key(self._sha[c.workload] if c.workload else "")

    def workload_facts(self) -> tuple[tuple[str, str, str, float], ...]:
        """Per workload: name, generating command, SHA-256, footprint GB (NaN if unmeasured)."""
        return tuple(
            (
                n,
                r.command(self.workload_path(n)),
                self._sha[n],
                self._footprints.get(n, float("nan")),
            )
            for n, r in self.recipes.items()
        )

    def footprint_point(self, name: str) -> ReplayPoint:
        return ReplayPoint(name, FOOTPRINT_POLICY, UNBOUNDED_GB)

    # ----- running ---------------------------------------------------------------------
    def count(self) -> int:
        """Steps of :meth:`execute` (workloads, footprints, replays, simulations), for progress.

        The plan's shape does not depend on the footprints' values, only its cache sizes do.
        """
        names = self.paper.footprint_workloads(self.quick)
        dummy = dict.fromkeys(names, 1.0)
        replays = set(self.paper.replays(self.quick, dummy))
        sims = sum(len(s.policies) for s in self.paper.sims(self.quick, dummy))
        artifact = set(self.paper.artifact_points(self.quick, dummy)) if self.artifact_repo else ()
        computed = len(set(self.paper.computations(self.quick)))
        return len(self.recipes) + len(names) + len(replays) + sims + len(artifact) + computed

    def execute(self, progress: Progress = _nothing) -> list[Claim]:
        """Generate, replay, simulate; then return the paper's claims."""
        (self.out / "workloads").mkdir(parents=True, exist_ok=True)

        for name, recipe in self.recipes.items():
            path = Path(self.workload_path(name))
            if not path.is_file():
                generate(recipe, path)
            self._sha[name] = sha256_file(path)
            progress(1)
        self._replays = read_results(self.out / REPLAYS_FILE)
        feet = [self.footprint_point(n) for n in self.paper.footprint_workloads(self.quick)]
        self._run_replays(feet, progress)
        self._footprints = {
            p.workload: self._replays[self._replay_key(p)]["peak_bytes"] / GB for p in feet
        }
        replays = self.paper.replays(self.quick, self._footprints)
        sims = self.paper.sims(self.quick, self._footprints)
        self._run_replays(replays, progress)
        for s in sims:
            self._run_sims(s, progress)
        if self.artifact_repo is not None:
            self._run_artifact(self.paper.artifact_points(self.quick, self._footprints), progress)
        self._run_computations(self.paper.computations(self.quick), progress)
        return self.paper.claims(self, self.quick)

    def _run_replays(self, points: list[ReplayPoint], progress: Progress) -> None:
        path = self.out / REPLAYS_FILE
        todo, done = _missing(points, self._replay_key, self._replays, path, progress)

        def args(p: ReplayPoint) -> tuple[Any, ...]:
            return (self.workload_path(p.workload), p)

        self._dispatch(run_replay, todo, args, done)

    def _dispatch(
        self,
        fn: Callable[..., Any],
        todo: list[Any],
        args: Callable[[Any], tuple[Any, ...]],
        done: Callable[[Any, Any], None],
        on_ray: bool = True,
    ) -> None:
        """``done(item, fn(*args(item)))`` for each item: on ray, in a pool, or in-process."""
        if on_ray and self.ray is not None and todo:
            run_on_ray(self.ray, self.ray_address, fn, todo, args, done)
        elif self.jobs == 1 or len(todo) <= 1:
            for item in todo:
                done(item, fn(*args(item)))
        else:
            run_in_pool(fn, todo, args, min(self.jobs, len(todo)), done)

    def _run_artifact(self, points: list[ReplayPoint], progress: Progress) -> None:
        path = self.out / ARTIFACT_FILE
        self._artifact = read_results(path)
        todo, done = _missing(points, self._artifact_key, self._artifact, path, progress)

        def args(p: ReplayPoint) -> tuple[Any, ...]:
            return (str(self.artifact_repo), self.workload_path(p.workload), p)

        # The artifact runs locally only: its checkout is on this machine.
        self._dispatch(run_artifact_point, todo, args, done, on_ray=False)

    def _run_computations(self, todo_all: list[Computation], progress: Progress) -> None:
        path = self.out / COMPUTED_FILE
        self._computed = read_results(path)
        todo, done = _missing(todo_all, self._computed_key, self._computed, path, progress)

        def args(c: Computation) -> tuple[Any, ...]:
            return (None if c.workload is None else self.workload_path(c.workload), c)

        self._dispatch(run_computation, todo, args, done)

    def _run_sims(self, sims: SimSet, progress: Progress) -> None:
        spec = resolve(
            SweepSpec(workload=self.workload_path(sims.workload), model=MODEL, gpu=sims.gpu)
        )
        points = [Point(sims.cache_gb, p, None, sims.seed) for p in sims.policies]
        outcome = run_sweep(
            spec,
            points,
            self.out / "sim" / sims.folder,
            jobs=self.jobs,
            progress=progress,
            executor=self.executor,
            ray_address=self.ray_address,
        )
        for point, row in zip(points, outcome.rows, strict=True):
            self._sims[(sims, point.policy)] = row


def reproduce(
    name: str,
    out: str | Path,
    *,
    quick: bool = False,
    jobs: int = 1,
    executor: str = "local",
    ray_address: str | None = None,
    command: str = "twin reproduce (invoked programmatically)",
    progress: Progress = _nothing,
) -> tuple[list[Claim], list[Path]]:
    """Run paper ``name``'s plan under ``out`` and write its report; return claims and files."""
    from twin.reports.reproduce.render import Facts, render_report

    run = Run(get_paper(name), Path(out), quick, jobs, executor, ray_address)
    claims = run.execute(progress)
    dummy = dict.fromkeys(run.paper.footprint_workloads(quick), 1.0)
    no_artifact = not run.paper.artifact_points(quick, dummy)
    facts = Facts(
        paper=run.paper.name,
        citation=f"{run.paper.title}. {run.paper.citation}",
        command=command,
        form="quick" if quick else "full",
        twin_version=__version__,
        workloads=run.workload_facts(),
        **(
            {"artifact": "none for this paper (the twin's numbers only)"}
            if no_artifact
            else {}
            if run.artifact_repo is None
            else {"artifact": describe(run.artifact_repo)}
        ),
    )
    return claims, render_report(Path(out), facts, claims, run.paper.notes())


def plan_size(name: str, quick: bool) -> int:
    """How many steps ``reproduce(name, quick=quick)`` takes (for a progress bar)."""
    return Run(get_paper(name), Path("."), quick).count()
