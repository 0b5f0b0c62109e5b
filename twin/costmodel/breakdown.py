"""``StepCost``: the seconds of one step split by layer kind and by kernel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Layer kinds of a breakdown: the four of ModelSpec plus the embedding / final norm /
# LM head, which belong to no layer.
KINDS = ("attention", "ssm", "mlp", "moe", "head")
# Labels of the mixer kinds beyond those (``ssm`` is Mamba2's).
MIXER_LABELS = ("swa", "mamba1", "gdn")
# Breakdown label of each mixer kind: Mamba2 keeps the ``ssm`` label it always had.
LABEL = {
    "attention": "attention",
    "mla": "attention",  # MLA is the model's attention (DeepSeek, Kimi, GLM-5)
    "swa": "swa",
    "mamba2": "ssm",
    "mamba1": "mamba1",
    "gdn": "gdn",
}


@dataclass
class StepCost:
    """Seconds of one batch step; ``items[kind][kernel]`` sums to ``total_s``."""

    items: dict[str, dict[str, float]] = field(default_factory=dict)

    def add(self, kind: str, kernel: str, seconds: float) -> None:
        """Account ``seconds`` of ``kernel`` to layer kind ``kind``."""
        if seconds:
            row = self.items.setdefault(kind, {})
            row[kernel] = row.get(kernel, 0.0) + seconds

    @property
    def total_s(self) -> float:
        """Seconds of the whole step."""
        return sum(sum(row.values()) for row in self.items.values())

    @property
    def by_kind(self) -> dict[str, float]:
        """Seconds per layer kind: every kind of ``KINDS`` (zeros included), then the
        issue-13 mixer kinds present (``swa``, ``mamba1``, ``gdn``)."""
        out = {k: sum(self.items.get(k, {}).values()) for k in KINDS}
        for k in MIXER_LABELS:
            if k in self.items:
                out[k] = sum(self.items[k].values())
        return out

    @property
    def by_kernel(self) -> dict[str, float]:
        """Seconds per kernel over all layer kinds."""
        out: dict[str, float] = {}
        for row in self.items.values():
            for kernel, s in row.items():
                out[kernel] = out.get(kernel, 0.0) + s
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: total, by kind, by kernel, and the kind x kernel items."""
        return {
            "total_s": self.total_s,
            "by_kind": self.by_kind,
            "by_kernel": self.by_kernel,
            "items": {k: dict(v) for k, v in self.items.items()},
        }
