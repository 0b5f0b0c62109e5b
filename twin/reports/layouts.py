"""Serving layouts as one more axis of a sweep or a plan: aggregated, or ``xPyD``.

A layout is the unit a search scales: ``agg`` is one replica (prefill and decode on the
same GPUs), ``1P2D`` one prefill worker and two decode workers (``twin simulate
--prefill-workers 1 --decode-workers 2``, :mod:`twin.engine.disagg`). A point's replica
count counts these units: ``1P2D`` on 3 replicas runs 3 prefill and 6 decode workers,
as aiconfigurator scales an xPyD layout by whole copies. Its GPUs are the workers it
runs x tp (every worker on the candidate's GPU and tp: per-pool GPUs and TPs are
``twin simulate``'s, not an axis of the search yet).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from twin.errors import TwinError
from twin.limits import MAX_REPLICAS

AGG = "agg"
_PD = re.compile(r"(\d+)p(\d+)d")


@dataclass(frozen=True)
class ServingLayout:
    """Aggregated (``prefill == decode == 0``) or ``prefill``P``decode``D workers a unit."""

    prefill: int = 0
    decode: int = 0

    @property
    def aggregated(self) -> bool:
        return not self.prefill

    @property
    def name(self) -> str:
        """``agg`` or ``xPyD`` (the canonical spelling: in keys, labels and plan.json)."""
        return AGG if self.aggregated else f"{self.prefill}P{self.decode}D"

    @property
    def workers(self) -> int:
        """Replicas (each ``tp`` GPUs) of one unit."""
        return 1 if self.aggregated else self.prefill + self.decode

    def pools(self, units: int) -> dict[str, int]:
        """The engine settings of ``units`` copies (none for aggregated: the replica
        count is the point's)."""
        if self.aggregated:
            return {}
        return {"prefill_workers": self.prefill * units, "decode_workers": self.decode * units}


def parse_layout(text: str, flag: str = "--layouts") -> ServingLayout:
    """``agg`` or ``xPyD`` (any case, e.g. ``1p2d``); one line naming ``flag`` otherwise."""
    t = text.strip().lower()
    if t in (AGG, "aggregated", ""):
        return ServingLayout()
    m = _PD.fullmatch(t)
    if m is None:
        raise TwinError(f"{flag} {text!r}: expected agg or xPyD (e.g. 1p1d, 2p3d)")
    p, d = int(m.group(1)), int(m.group(2))
    if not (p >= 1 and d >= 1 and p + d <= MAX_REPLICAS):
        raise TwinError(
            f"{flag} {text!r}: each pool needs at least 1 worker, at most {MAX_REPLICAS:,} in all"
        )
    return ServingLayout(p, d)


def parse_layouts(values: Sequence[str], flag: str = "--layouts") -> list[ServingLayout]:
    """Each of ``values`` (:func:`parse_layout`), once each, in order."""
    out = list(dict.fromkeys(parse_layout(v, flag) for v in values))
    if not out:
        raise TwinError(f"{flag}: give at least one layout, e.g. agg,1p1d")
    return out


__all__ = ["AGG", "ServingLayout", "parse_layout", "parse_layouts"]
