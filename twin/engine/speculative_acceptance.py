"""The expected acceptance length of speculative decoding (``twin.engine.speculative``).

**Acceptance** is the expected acceptance length ``tau``, from (first match wins, two
given is refused): the engine's own knob (vLLM's ``synthetic_acceptance_*`` keys with
``rejection_sample_method: synthetic``; SGLang's ``SGLANG_SIMULATE_ACC_LEN``), the twin's
``--set speculative_acceptance=`` (one rate ``a``: every drafted token accepted with
probability ``a`` given the ones before, ``tau = (1 - a^(k+1)) / (1 - a)``, Leviathan
et al. 2023, arXiv 2211.17192, eq. 1; or ``k`` rates, each the unconditional share of
steps whose first ``i`` drafts are all accepted, as vLLM's per-position acceptance
metrics report them, ``tau = 1 + sum``), or the method's published default (EAGLE,
EAGLE-3, MTP; draft models and n-gram lookup have none: their acceptance is the
draft's and the workload's, so it must be given).

"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from twin.errors import TwinError


def iid_length(rate: float, k: int) -> float:
    """Expected tokens a step when each of ``k`` drafts is accepted with probability
    ``rate`` given the ones before (Leviathan et al. 2023, arXiv 2211.17192, eq. 1)."""
    if rate >= 1.0:
        return float(k + 1)
    return (1.0 - rate ** (k + 1)) / (1.0 - rate)


def rate_length(rate: float, k: int) -> float:
    """The acceptance length of one per-token ``rate`` over ``k`` drafts, as
    ``--set speculative_acceptance=RATE`` reads it (:func:`parse_acceptance`)."""
    return 1.0 + rate if k == 1 else iid_length(rate, k)


def iid_rate(length: float, k: int) -> float:
    """The per-token rate whose :func:`iid_length` over ``k`` drafts is ``length``."""
    low, high = 0.0, 1.0
    for _ in range(60):  # bisection to below 1e-15
        mid = (low + high) / 2
        if iid_length(mid, k) < length:
            low = mid
        else:
            high = mid
    return high


def length_from_rates(flag: str, rates: Sequence[float], k: int) -> float:
    """``1 + sum(rates)``: ``rates[i]`` the unconditional share of steps whose first
    ``i + 1`` drafts are all accepted (vLLM's per-position acceptance rates), checked."""
    if len(rates) != k:
        raise TwinError(f"{flag}: give one rate, or {k} (one per drafted token); got {len(rates)}")
    for r in rates:
        if not (math.isfinite(r) and 0.0 <= r <= 1.0):
            raise TwinError(f"{flag}: each rate must be in [0, 1] (got {r:g})")
    if any(b > a for a, b in pairwise(rates)):
        raise TwinError(
            f"{flag}: per-position rates are unconditional (all drafts up to i accepted), "
            "so they cannot rise with the position"
        )
    return 1.0 + float(sum(rates))


def parse_acceptance(flag: str, value: str, k: int) -> float:
    """``--set speculative_acceptance=``: one per-token rate, or ``k`` per-position rates;
    the expected acceptance length."""
    try:
        rates = [float(v) for v in value.split(",")]
    except ValueError:
        raise TwinError(
            f"{flag}={value}: expected rates in [0, 1], e.g. 0.8 or 0.8,0.6,0.4"
        ) from None
    if len(rates) == 1 and k > 1:
        r = rates[0]
        if not (math.isfinite(r) and 0.0 <= r <= 1.0):
            raise TwinError(f"{flag}={value}: the rate must be in [0, 1]")
        return rate_length(r, k)
    return length_from_rates(f"{flag}={value}", rates, k)


def check_length(flag: str, length: float, k: int) -> float:
    """An acceptance length given directly: in [1, k + 1]."""
    if not (math.isfinite(length) and 1.0 <= length <= k + 1):
        raise TwinError(f"{flag}: the acceptance length must be in [1, {k + 1}] (got {length:g})")
    return float(length)


__all__ = [
    "iid_length",
    "parse_acceptance",
    "rate_length",
]
