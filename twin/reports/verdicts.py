"""What one point's numbers say: whether it meets the SLOs, which target binds, and
which resource limits it (with the advice that follows).

Works on result rows (a point's row, or a seed-aggregated cell of
:func:`reports.analysis.aggregate`: the same column names), so the rules are
tested on rows written by hand. No scipy or matplotlib here: sweep workers
import it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from twin.slo import Slo
from twin.steady_state import OVERLOADED, STABLE, TOO_SHORT, VERDICTS

# The engine's steady-state verdicts (summary["steady_state"]["verdict"]) are
# twin.steady_state's, imported: one spelling of each.
# A summary without a steady-state judgement (an engine before it, or a row written
# before the column existed) is not taken as stable.
NOT_JUDGED = "the run's summary has no steady-state verdict"

# The binding resources of a failing point (binding_resource) and what to change.
PREFILL = "prefill compute"
QUEUEING = "queueing"
MEMORY = "KV/state memory"
DECODE = "decode memory bandwidth"
RUN_LENGTH = "run length"
ADVICE = {
    PREFILL: "more GPUs per replica (--tp) or a faster GPU; more replicas do not shorten a prefill",
    QUEUEING: "more replicas (--replicas) or a lower session rate",
    MEMORY: "a larger cache or KV pool (--cache-gb; --gpu-mem-util for the shared pool) "
    "or fewer running sequences",
    DECODE: "faster memory (another --gpu) or more GPUs per replica (--tp); larger "
    "batches do not help",
    RUN_LENGTH: "a longer run (--duration, or a workload with more sessions)",
}

# "Mostly queue wait": the mean queue wait is at least this share of the mean TTFT
# (TTFT = queue wait + prefill per request, so the means add up exactly).
QUEUE_SHARE = 0.5
# "The GPU is busy": mean replica utilisation at least this (1 is no headroom).
BUSY = 0.9
# "The running batch was capped by memory": running requests filled at least this
# share of the replica's KV pool at their peak while fewer ran than max_running.
MEMORY_FULL = 0.9


def verdict_of(row: dict[str, Any]) -> str:
    """A row's steady-state verdict; one without any (older rows) is too short to tell."""
    v = row.get("verdict")
    return v if v in VERDICTS else TOO_SHORT


def worst_verdict(verdicts: Sequence[str | None]) -> str:
    """The verdict of several seeds of one cell: overloaded if any seed is, else too
    short to tell if any is (or none says), else stable."""
    vs = [v if v in VERDICTS else TOO_SHORT for v in verdicts] or [TOO_SHORT]
    if OVERLOADED in vs:
        return OVERLOADED
    return TOO_SHORT if TOO_SHORT in vs else STABLE


def _ratio(row: dict[str, Any], slo: Slo) -> float:
    """How far a target's value is from its threshold (1: at it; inf: no value)."""
    v = row.get(slo.column)
    return math.inf if v is None else float(v) / slo.threshold_ms


def failing(row: dict[str, Any], slos: Sequence[Slo]) -> list[Slo]:
    """The targets ``row`` misses (a null metric never meets a target)."""
    return [s for s in slos if not s.met_by(row.get(s.column))]


def meets(row: dict[str, Any], slos: Sequence[Slo]) -> bool:
    """Every target met and the steady state judged stable."""
    return verdict_of(row) == STABLE and not failing(row, slos)


def binding_target(row: dict[str, Any], slos: Sequence[Slo]) -> Slo | None:
    """The target that fails first: the one nearest its threshold when all are met, the
    one furthest past it when some are not (a null value is infinitely far). Ties go to
    the first given."""
    if not slos:
        return None
    return max(slos, key=lambda s: _ratio(row, s))


def _queue_share(row: dict[str, Any]) -> float | None:
    q, p = row.get("queue_mean_ms"), row.get("prefill_mean_ms")
    if q is None or p is None or q + p <= 0:
        return None
    return float(q) / float(q + p)


def _prefill_at(row: dict[str, Any], slo: Slo) -> float | None:
    """The unqueued prefill at the TTFT target's percentile (P95 where not recorded)."""
    v = row.get(f"prefill_p{slo.percentile}_ms")
    return row.get("prefill_p95_ms") if v is None else v


def memory_capped(row: dict[str, Any]) -> bool:
    """The shared pool preempted requests, or running requests filled it while fewer ran
    than ``max_running`` (so memory, not the count cap, limited the batch)."""
    if (row.get("preempted_requests") or 0) > 0:
        return True
    peak, cap, full = row.get("peak_running"), row.get("max_running"), row.get("running_pool_peak")
    return (
        peak is not None
        and cap is not None
        and full is not None
        and (peak < cap and full >= MEMORY_FULL)
    )


def binding_resource(row: dict[str, Any], slos: Sequence[Slo]) -> str | None:
    """The resource that limits a point which misses a target or is not stable; None for
    a point that meets every target and is stable. The first rule that holds:

    1. ``prefill compute``: a TTFT target fails and the unqueued prefill alone
       (``prefill_pNN_ms`` at the target's percentile, P95 where that is not
       recorded) exceeds its threshold. More GPUs per replica (``--tp``) or a
       faster GPU; more replicas do not help.
    2. ``KV/state memory``: the shared pool preempted requests
       (``preempted_requests`` > 0), or running requests filled at least 90% of the
       pool (``running_pool_peak``) at their peak while fewer ran than
       ``max_running`` (``peak_running``). A larger cache/pool or fewer sequences.
    3. ``queueing``: a TTFT or end-to-end target fails, or the point is overloaded;
       the mean queue wait is at least half the mean TTFT; and the GPU is busy
       (mean utilisation >= 0.9) or the point is overloaded. More replicas or a
       lower rate.
    4. ``decode memory bandwidth``: a TPOT, ITL or end-to-end target fails while
       every TTFT target is met. Faster memory or more tp; larger batches do not
       help.
    5. What is left: an overloaded point is ``queueing`` (arrivals outpace
       completions); a failing TTFT target is ``queueing`` when the queue wait is
       the larger part of TTFT, else ``prefill compute``; a point that meets
       every target but is too short to tell is ``run length`` (run longer);
       otherwise None (the summary does not say).
    """
    fails = failing(row, slos)
    verdict = verdict_of(row)
    if not fails and verdict == STABLE:
        return None
    ttft_fails = [s for s in fails if s.metric == "ttft"]
    for s in ttft_fails:
        prefill = _prefill_at(row, s)
        if prefill is not None and prefill > s.threshold_ms:
            return PREFILL
    if memory_capped(row):
        return MEMORY
    share = _queue_share(row)
    queued = share is not None and share >= QUEUE_SHARE
    busy = (row.get("utilisation") or 0.0) >= BUSY or verdict == OVERLOADED
    latency_fails = [s for s in fails if s.metric in ("ttft", "e2e")]
    if (latency_fails or verdict == OVERLOADED) and queued and busy:
        return QUEUEING
    if not ttft_fails and any(s.metric in ("tpot", "itl", "e2e") for s in fails):
        return DECODE
    if verdict == OVERLOADED:
        return QUEUEING
    if ttft_fails and share is not None:
        return QUEUEING if queued else PREFILL
    if not fails and verdict == TOO_SHORT:
        return RUN_LENGTH
    return None


def advice(resource: str | None) -> str:
    """What to change for ``resource`` (empty for None)."""
    return ADVICE.get(resource or "", "")
