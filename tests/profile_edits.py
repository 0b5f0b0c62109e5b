"""A profile with one fit's coefficients (or provenance) changed; a decode step's MoE seconds."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from twin.costmodel import CostModel
from twin.costmodel.profile import Profile
from twin.model import ModelSpec


def with_fit(
    profile: Profile, kernel: str, provenance: Mapping[str, Any] | None = None, **params: float
) -> Profile:
    """``profile`` with its ``kernel`` fit's coefficients ``params`` set (the others kept),
    and its provenance entries ``provenance`` where given."""
    fit = profile.kernels[kernel]
    fit = dataclasses.replace(
        fit,
        params={**fit.params, **params},
        provenance={**fit.provenance, **(provenance or {})},
    )
    return dataclasses.replace(profile, kernels={**profile.kernels, kernel: fit})


def moe_decode_s(model: ModelSpec, profile: Profile, tp: int, batch: int, ep: int = 1) -> float:
    """The fused-MoE seconds of a decode step of ``batch`` sequences of 1,000 keys each."""
    step = CostModel(model, profile, tp, ep=ep).decode([1000] * batch, breakdown=True)
    return float(step.by_kernel["moe"])  # type: ignore[union-attr]
