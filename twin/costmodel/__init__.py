"""The cost model: seconds of prefills, batch steps and state copies (see ``model``)."""

from twin.costmodel.breakdown import KINDS, StepCost
from twin.costmodel.model import TIERS, CostModel

__all__ = ["KINDS", "TIERS", "CostModel", "StepCost"]
