"""``twin validate`` as a library call: check every input, then do the work, publish as a set.

:func:`validate_model` is what the command runs (the CLI only parses flags and
prints the report). Its order is the project's rule for bad input: every
input (model, device, policy, numbers, the workload file, the profile file,
the output folder, PyTorch itself) is checked before the first expensive
step (calibrating a device takes minutes). The outputs (``profile.json``
when the device is calibrated, ``workload.parquet``, ``validation.json``,
``requests.parquet``, the figure) are written into a staging folder inside
OUT and moved into place together only once all exist, so a failed run
leaves OUT as it found it.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from twin.atomic import OutputSet, not_an_input
from twin.costmodel.profile import Profile
from twin.errors import TwinError
from twin.hardware import GB
from twin.limits import MAX_CACHE_GB, MAX_REPEATS, MAX_SESSION_RATE
from twin.model import ModelSpec
from twin.policies import get_policy
from twin.presets import resolve_model
from twin.reference.fits import check_fits, free_memory
from twin.validate.arrivals import fix_arrivals
from twin.validate.compare import PLOT_FILE, REQUESTS_FILE, VALIDATION_FILE
from twin.validate.request import ValidationRequest
from twin.validate.run import CacheChoice, default_cache, validate
from twin.workloads.examples import Example
from twin.workloads.generators import get_generator
from twin.workloads.reader import Workload

DEVICES = ("cpu", "cuda")
WORKLOAD_FILE = "workload.parquet"  # the fixed-arrival copy both sides run
PROFILE_FILE = "profile.json"  # the device calibrated for the model (when no profile is given)

# A progress display: ``bar(description, total)`` is a context giving ``advance(amount)``.
Bar = Callable[[str, float | None], AbstractContextManager[Callable[[float], None]]]
# The executor: ``torch``, ``run_reference`` and ``ExecutorConfig`` (tests pass a fake).
Executor = Callable[[], tuple[Any, Callable[..., Any], type]]


def load_executor() -> tuple[Any, Callable[..., Any], type]:
    """``torch``, ``run_reference`` and ``ExecutorConfig``, or a one-line install hint."""
    try:
        import torch
    except ImportError:
        raise TwinError(
            "twin validate runs the model with PyTorch, which is not installed: "
            "pip install 'twin[torch]' (torch==2.13.0)"
        ) from None
    from twin.reference.executor import ExecutorConfig, run_reference

    return torch, run_reference, ExecutorConfig


def _ignore(amount: float = 1) -> None:
    pass


@contextlib.contextmanager
def no_bar(description: str, total: float | None) -> Iterator[Callable[[float], None]]:
    """The default progress display: none."""
    yield _ignore


def validate_model(
    request: ValidationRequest,
    out: str | Path,
    *,
    executor: Executor = load_executor,
    bar: Bar = no_bar,
) -> dict[str, Any]:
    """Measure the twin against the reference executor; return the report (``validation.json``).

    ``request`` says what (:mod:`twin.validate.request`): exactly one of a workload file
    and a generator gives the requests; the first ``requests`` in arrival order are kept.
    Without a profile, the device is calibrated at the model's shapes first (into
    OUT/profile.json). See ``twin validate --help`` for every argument.
    """
    src_of, cache_of, meas = request.source, request.cache, request.measurement
    model, device, repeats, profile = request.model, meas.device, meas.repeats, meas.profile
    workload, generate, sessions = src_of.workload, src_of.generate, src_of.sessions
    requests, session_rate, seed = src_of.requests, src_of.session_rate, src_of.seed
    policy, cache_gb = cache_of.policy, cache_of.cache_gb

    # ----- every input, before any work
    spec = resolve_model(model) if isinstance(model, str) else model
    if device not in DEVICES:
        raise TwinError(f"--device {device!r}: expected cpu or cuda")
    if (workload is None) == (generate is None):
        raise TwinError("give one of --workload W.parquet or --generate KIND")
    if generate is not None:
        _named("--generate", get_generator, generate)
    elif sessions is not None:
        raise TwinError("--sessions: only with --generate (--requests keeps the first N)")
    if _named("--policy", get_policy, policy).hindsight:
        raise TwinError(
            f"--policy {policy}: a hindsight bound (one replay per alpha) cannot serve "
            "requests online; validate marconi, sglang+ or vanilla"
        )
    if cache_gb is not None and not (math.isfinite(cache_gb) and 0 <= cache_gb <= MAX_CACHE_GB):
        raise TwinError(
            f"--cache-gb must be a number of GB in [0, {MAX_CACHE_GB:g}] (got {cache_gb})"
        )
    if session_rate is not None and not (
        math.isfinite(session_rate) and 0 < session_rate <= MAX_SESSION_RATE
    ):
        raise TwinError(
            f"--session-rate must be a number of sessions/s in (0, {MAX_SESSION_RATE:g}] "
            f"(got {session_rate})"
        )
    if requests < 1 or repeats < 1 or (sessions is not None and sessions < 1):
        raise TwinError("--requests, --repeats and --sessions must be at least 1")
    if repeats > MAX_REPEATS:
        raise TwinError(f"--repeats {repeats}: at most {MAX_REPEATS} timings of each prefill")
    if seed < 0:
        raise TwinError(f"--seed {seed}: must be >= 0")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TwinError(f"--out {out}: exists and is not a folder")
    # Never an input among the outputs this run replaces (OUT/workload.parquet, ...).
    names = (WORKLOAD_FILE, PROFILE_FILE, VALIDATION_FILE, REQUESTS_FILE, PLOT_FILE)
    for given in (workload, profile):
        if given is not None:
            for name in names:
                not_an_input("--out", out / name, Path(given))
    src = Workload.open(workload) if workload is not None else None

    prof = Profile.load(profile) if profile is not None else None
    torch, run_reference, config_cls = executor()
    if device == "cuda" and not torch.cuda.is_available():
        raise TwinError("--device cuda: PyTorch sees no CUDA GPU on this machine")
    check_fits(spec, device, free_memory(device, torch))

    # ----- the work, staged inside OUT and published as one set
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".validate-staging-", dir=out))
    outputs: OutputSet | None = None
    try:
        if prof is None:
            prof = _calibrate(device, spec, staging / PROFILE_FILE, bar)
        with tempfile.TemporaryDirectory() as tmp:
            if src is None:
                assert generate is not None
                src = _generate(
                    generate, sessions or requests, session_rate, seed, Path(tmp) / "gen.parquet"
                )
                session_rate = None  # the generator's rate already
            fixed = fix_arrivals(
                src,
                staging / WORKLOAD_FILE,
                seed=seed,
                max_requests=requests,
                session_rate=session_rate,
            )
        cache = (
            default_cache(fixed, spec, policy)
            if cache_gb is None
            else CacheChoice(int(cache_gb * GB), "--cache-gb")
        )
        config = config_cls(
            device=device, policy=policy, cache_bytes=cache.bytes, seed=seed, repeats=repeats
        )
        with bar("prefills measured", fixed.num_rows) as advance:
            report = validate(
                fixed,
                spec,
                prof,
                run_reference=run_reference,
                executor_config=config,
                cache=cache,
                out_dir=staging,
                shown_dir=out,
                progress=_fraction(advance, fixed.num_rows),
            )
        # Published as one set (twin.atomic): a kill between renames is finished later.
        outputs = OutputSet(out, sorted(p.name for p in staging.iterdir()), "twin validate")
        for name in outputs.names:
            os.replace(staging / name, outputs.path(name))
        staging.rmdir()
        outputs.commit()
    except BaseException:
        if outputs is not None:
            outputs.abort()
        shutil.rmtree(staging, ignore_errors=True)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # only if still empty
        raise
    return report


def _named(flag: str, get: Callable[[str], Any], name: str) -> Any:
    """``get(name)`` (a registry look-up), its refusal prefixed with ``flag``."""
    try:
        return get(name)
    except TwinError as err:
        raise TwinError(f"{flag} {name!r}: {err}") from None


def _calibrate(device: str, spec: ModelSpec, path: Path, bar: Bar) -> Any:
    """Step 1 of a validation: time this device's kernels at the model's own shapes, and the
    host overhead of its layers, into ``path`` (a quick, per-model profile)."""
    from twin.calibration.harness import calibrate

    with contextlib.ExitStack() as stack:

        def progress(total: int) -> Any:
            return stack.enter_context(bar("calibrating", total))

        result = calibrate(
            "cpu" if device == "cpu" else "auto",
            "quick",
            path,
            model=spec,
            progress=progress,
            overhead=True,
            model_only=True,
        )
    return result.profile


def _generate(
    kind: str, sessions: int, session_rate: float | None, seed: int, path: Path
) -> Workload:
    """A fresh ``kind`` workload at ``path`` (the generator's defaults; rate 1/s if none given)."""
    Example(kind, sessions, 1.0 if session_rate is None else session_rate, seed).build(path)
    return Workload.open(path)


def _fraction(advance: Callable[[float], None], total: int) -> Callable[[float], None]:
    """Adapt the executor's progress (fraction of requests served) to a bar's advances."""
    done = 0.0

    def report(fraction: float) -> None:
        nonlocal done
        advance(fraction * total - done)
        done = fraction * total

    return report
