"""The cost model: seconds of prefills, batch steps and state copies (see ``model``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from twin.exports import lazy_exports

if TYPE_CHECKING:
    from twin.costmodel.breakdown import KINDS, StepCost
    from twin.costmodel.model import TIERS, CostModel

if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__)  # the names above on first use

__all__ = ["KINDS", "TIERS", "CostModel", "StepCost"]
