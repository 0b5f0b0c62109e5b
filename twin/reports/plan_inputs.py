"""``twin plan``'s search space and load: each axis's default and its check (one-line
``TwinError`` naming the flag), the load every candidate is sized for, the seeds a
deciding count must meet the SLOs under, and the executor the points run on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from twin.engine.modes import get_mode
from twin.errors import TwinError
from twin.hardware import GPUS
from twin.limits import MAX_CACHE_GB, MAX_TP
from twin.policies import POLICIES
from twin.reports.layouts import AGG
from twin.reports.ray_executor import import_ray

if TYPE_CHECKING:  # ``twin plan --help`` reads the defaults here without the sweep's modules
    from twin.reports.plan_result import Load

DEFAULT_GPUS = ("h100", "h200", "b200")
DEFAULT_ENGINES = ("vllm", "sglang")
DEFAULT_TP = (1, 2, 4, 8)
DEFAULT_CACHE = ("auto",)
DEFAULT_LAYOUTS = (AGG,)
DEFAULT_EP: tuple[int | str, ...] = (1,)  # --ep: no expert parallelism unless asked
DEFAULT_DP_ATTENTION: tuple[int | str, ...] = (1,)  # --dp-attention, likewise
DEFAULT_PP: tuple[int | str, ...] = (1,)  # --pp: one stage unless asked
# Seeds (--seeds): every probe runs seed 0; a replica count that would decide the answer
# (a candidate's fewest found to meet the SLOs, costing no more than the best confirmed so
# far) is rerun with seeds 1 .. N-1 and meets only if it meets under every seed. 3 by
# default: a count that meets under each seed half of the time (a coin flip at the SLO's
# edge) passes one seed with probability 1/2 and three with 1/8, for two more full runs
# of the deciding count (a judgement call; the spread of three is also the least from
# which a t-interval is reported). The seed draws the Poisson session starts
# (--session-rate); without a rate every seed runs the same, so seed 0 alone decides.
DEFAULT_SEEDS = 3
# More than this many runs of one count says nothing a t-interval of them would not.
MAX_SEEDS = 100


def parse_gpus(names: Sequence[str]) -> list[str]:
    out = []
    for name in names:
        gpu = name.strip().lower()
        if gpu not in GPUS:
            raise TwinError(f"--gpus: unknown GPU {name!r}; choose from {', '.join(GPUS)}")
        out.append(gpu)
    if not out:
        raise TwinError("--gpus: give at least one GPU, e.g. h100,h200")
    return list(dict.fromkeys(out))


def cache_choices(
    cache: Sequence[str | float], policies: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """(cache setting, policy) pairs searched: the shared pool with the engine mode's own
    policy (its pool is the mode's); each dedicated size with each of ``policies``, or with
    the mode's own (``""``) when none is given. A bad setting or policy fails in one line."""
    caches = _caches(cache)

    for name in policies:
        if name not in POLICIES:
            raise TwinError(
                f"--policies: unknown policy {name!r}; choose from {', '.join(POLICIES)}"
            )
        if POLICIES[name].hindsight:  # twin simulate refuses it too (one replay per alpha)
            raise TwinError(
                f"--policies: {name!r} is a hindsight bound, not an online policy a "
                "deployment can run"
            )
    if len(set(policies)) != len(policies):
        raise TwinError(f"--policies {','.join(policies)}: a policy is given twice")
    return [
        (c, p) for c in caches for p in ([""] if c == "auto" or not policies else list(policies))
    ]


def parse_engines(names: Sequence[str]) -> list[str]:
    """Engine modes, each optionally at a release (``vllm==0.19``: kept as the release's
    full version, ``vllm==0.19.0``, as ``twin simulate --engine`` takes it)."""
    out = []
    for name in names:
        mode = get_mode(name.strip(), "--engines")
        out.append(mode.name if mode.release is None else f"{mode.name}=={mode.release.version}")
    if not out:
        raise TwinError("--engines: give at least one engine mode, e.g. vllm,sglang")
    return list(dict.fromkeys(out))


def parse_tps(values: Sequence[int]) -> list[int]:
    out = [int(v) for v in values]
    if not out or any(not 1 <= v <= MAX_TP for v in out):
        raise TwinError(f"--tp: each must be a whole number from 1 to {MAX_TP} (got {values})")
    return list(dict.fromkeys(out))


def _caches(values: Sequence[str | float]) -> list[str]:
    out = []
    for value in values:
        text = str(value).strip().lower()
        if text == "auto":
            out.append("auto")
            continue
        try:
            gb = float(text)
        except ValueError:
            raise TwinError(f"--cache-gb {value!r}: expected auto or a number of GB") from None
        if not (math.isfinite(gb) and 0 <= gb <= MAX_CACHE_GB):
            raise TwinError(f"--cache-gb {value!r}: must be auto or 0 to {MAX_CACHE_GB:g} GB")
        out.append(f"{gb:g}")
    if not out:
        raise TwinError("--cache-gb: give at least one setting, e.g. auto")
    return list(dict.fromkeys(out))


def parse_seeds(seeds: int, load: Load) -> tuple[tuple[int, ...], list[str]]:
    """The seeds a deciding count must meet the SLOs under, and a note when the load makes
    the seed irrelevant (no session rate: nothing random left to draw)."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise TwinError(f"--seeds {seeds!r}: must be a whole number from 1 to {MAX_SEEDS}")
    if seeds > 1 and load.session_rate is None:
        return (0,), [
            f"--seeds {seeds}: the seed only draws Poisson session starts (--session-rate); "
            "with the workload's own arrival times or closed-loop clients every seed runs "
            "the same, so seed 0 alone decided"
        ]
    return tuple(range(seeds)), []


def parse_load(
    session_rate: float | None,
    concurrency: int | None,
    duration_s: float | None,
    warmup_s: float | None = None,
    request_rate: float | None = None,
) -> Load:
    """The load every candidate is sized for, checked (one line naming the flag)."""
    from twin.reports.plan_result import Load

    given = [
        flag
        for flag, v in (
            ("--rate", request_rate),
            ("--session-rate", session_rate),
            ("--concurrency", concurrency),
        )
        if v is not None
    ]
    if len(given) > 1:
        raise TwinError(f"{' and '.join(given)} each set the load: give one of them")
    for flag, rate in (("--session-rate", session_rate), ("--rate", request_rate)):
        if rate is not None and not (math.isfinite(rate) and rate > 0):
            raise TwinError(f"{flag} {rate:g}: must be a positive number")
    if concurrency is not None and concurrency < 1:
        raise TwinError(f"--concurrency {concurrency}: must be at least 1")
    if duration_s is not None and not (math.isfinite(duration_s) and duration_s > 0):
        raise TwinError(f"--duration {duration_s:g}: must be a positive number of seconds")
    if warmup_s is not None and not (math.isfinite(warmup_s) and warmup_s >= 0):
        raise TwinError(f"--warmup-s {warmup_s:g}: must be a number of seconds >= 0")
    if warmup_s is not None and duration_s is not None and warmup_s >= duration_s:
        raise TwinError(f"--warmup-s {warmup_s:g}: must be shorter than --duration {duration_s:g}")
    # Floats, as reports.sweep.grid keeps rates: a point of 4 and one of 4.0 share a key.
    return Load(
        None if session_rate is None else float(session_rate),
        concurrency,
        None if duration_s is None else float(duration_s),
        None if warmup_s is None else float(warmup_s),
        None if request_rate is None else float(request_rate),
    )


def check_executor(executor: str, ray_address: str | None = None) -> None:
    """Refuse an unknown ``--executor``, or ``ray`` not installed or not answering at
    ``ray_address``, in one line before any work (:mod:`reports.ray_executor`)."""
    from twin.reports.sweep import EXECUTORS

    if executor not in EXECUTORS:
        raise TwinError(f"--executor {executor!r}: choose from {', '.join(EXECUTORS)}")
    if executor == "ray":
        import_ray(ray_address)
