"""``twin plan``'s screening runs (successive halving's first rung): a replica count's
short run, and whether it rules the count out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: ``twin plan --help`` reads the constants below
    from twin.reports.sweep import SweepSpec
    from twin.slo import Slo

# Screening runs (successive halving's first rung): each replica count a search asks for
# is first simulated for SCREEN_FRACTION of --duration; only a count the short run does not
# rule out gets the full run. A short run rules a count out when its steady state is
# judged overloaded (a queue growing over a quarter of the run grows over all of it) or
# a target is missed by more than SCREEN_MARGIN times its threshold (a judgement call: the
# short window's P95 carries a colder cache and fewer samples, which move it by tens of
# percent, not by half). Runs shorter than SCREEN_MIN_S simulated seconds are not screened
# (too few requests to judge). benchmarks/bench_plan.py counts the full runs saved and
# checks, against every full run of the same space, that no count screened out would
# have met the SLOs.
SCREEN_FRACTION = 0.25
SCREEN_MARGIN = 1.5
SCREEN_MIN_S = 60.0


def screen_spec(spec: SweepSpec) -> SweepSpec:
    """``spec`` run for :data:`SCREEN_FRACTION` of its duration (and of an explicit
    warm-up): the screening run of successive halving's first rung."""
    named = spec.run_settings()
    given = {"duration_s": named.get("duration_s"), "warmup_s": named.get("warmup_s")}
    scaled = {k: float(v) * SCREEN_FRACTION for k, v in given.items() if v is not None}
    return replace(spec, settings=tuple((k, scaled.get(k, v)) for k, v in spec.settings))


def screened_out(row: dict[str, Any], slos: Sequence[Slo]) -> bool:
    """Whether a screening run rules its replica count out: the steady state judged
    overloaded, or a target missed by more than :data:`SCREEN_MARGIN` times its threshold
    (a null value, nothing measured, rules nothing out)."""
    from twin.reports.verdicts import verdict_of
    from twin.steady_state import OVERLOADED

    if verdict_of(row) == OVERLOADED:
        return True
    for slo in slos:
        value = row.get(slo.column)
        if value is not None and value > SCREEN_MARGIN * slo.threshold_ms:
            return True
    return False
