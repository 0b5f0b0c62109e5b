"""A fused-MoE fit's per-shape term: the kernel configuration of the shapes NVIDIA measured.

The fused-MoE formulas (``twin.costmodel.formulas``, every ``moe_<mode>``) price a launch
from its FLOPs, bytes and a few shape extras. What they cannot see is the kernel
configuration the engine picks for the shape: vLLM 0.24.0's Triton MoE reads a tuned
config per (experts, width, device, dtype) from
``vllm/model_executor/layers/fused_moe/configs/`` and within it the entry of the nearest
token count (``fused_moe.py`` ``try_get_optimal_moe_config``); SGLang does the same with
its own files; TensorRT-LLM's CUTLASS and FlashInfer-TRT-LLM MoE profile a tactic per
shape and token bucket (its autotuner). Against aiconfigurator-core 0.12.0's tables about
half of each fit's error is such a per-shape offset, and much of the rest changes with the
token count inside one shape (docs/decisions.md, issue 34).

``SeriesTerm`` holds, for each *series* a family's table measured (one shape and layout:
hidden ``d``, expert width ``i``, top-k ``k``, experts ``e``, MoE TP ``tp``, EP ``ep``), a
correction of the formula in log time that is piecewise linear in log tokens between
fixed knots (``KNOTS``): ``t_priced = t_formula x exp(c(t))``. It is fitted by
``twin.calibration.series_fit`` on the fit split's residuals only, shrunk toward zero (a
ridge), and shipped in the profile, so pricing needs no engine installed. A shape the
table never measured has no entry and takes the formula alone.

In the profile JSON (``kernels.<moe family>.series``)::

    {"knots_tokens": [4, 32, 256, 2048, 16384],
     "formula_heldout_median_rel_err": 0.097, "formula_heldout_p90_rel_err": 0.335,
     "log_scale": {"7168,2048,8,256,1,8": "0.012 -0.046 0.1 0.02 0", ...}}

each value a space-separated log correction per knot (a string: one line per series in
the indented file).
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

# Token counts where the correction's slope may change: every factor 8 over the tables'
# range (1 to 16,384 tokens), chosen among four knot sets on an inner split of the fit
# rows (never the held-out rows; docs/decisions.md, issue 34). Below the first and above
# the last knot the correction is flat.
KNOTS = (4, 32, 256, 2048, 16384)
# The largest |log correction| a profile may hold: a factor of e^3 (~20x) either way is
# no configuration change of one kernel.
MAX_LOG_SCALE = 3.0
SHAPE_FIELDS = ("d", "i", "k", "e", "tp", "ep")


def series_key(d: int, i: int, k: int, e: int, tp: int, ep: int) -> str:
    """One series' key: hidden, the experts' full width (before MoE TP), top-k, experts,
    MoE TP, EP, as aiconfigurator's ``moe_perf`` rows name them."""
    return f"{d},{i},{k},{e},{tp},{ep}"


def _text(v: float) -> str:
    """``v`` to 0.001 (0.1% of time), trailing zeros dropped: "0.12", "-0.003", "0"."""
    s = f"{v:.3f}".rstrip("0").rstrip(".")
    return "0" if s in ("", "-0") else s


class SeriesError(ValueError):
    """A malformed ``series`` object: ``str`` is ``field: what``."""


@dataclass
class SeriesTerm:
    """Per measured series, the log correction at each of ``knots`` (module docstring)."""

    log_scale: dict[str, tuple[float, ...]]
    knots: tuple[int, ...] = KNOTS
    # The held-out errors of the formula alone (the fit's own held-out errors include
    # this term): what a shape the tables did not measure can expect.
    formula_heldout_median_rel_err: float | None = None
    formula_heldout_p90_rel_err: float | None = None
    _log_knots: tuple[float, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._log_knots = tuple(math.log(k) for k in self.knots)

    def coefficients(self, key: str) -> tuple[float, ...] | None:
        """The series' knot values, None for a shape the table did not measure."""
        return self.log_scale.get(key)

    def log_factor(self, coefs: tuple[float, ...], tokens: float) -> float:
        """The log correction at ``tokens``: linear in log tokens between the knots, flat
        outside them."""
        x, knots = math.log(max(tokens, 1.0)), self._log_knots
        if x <= knots[0]:
            return coefs[0]
        if x >= knots[-1]:
            return coefs[-1]
        j = bisect.bisect_right(knots, x) - 1
        w = (x - knots[j]) / (knots[j + 1] - knots[j])
        return (1.0 - w) * coefs[j] + w * coefs[j + 1]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"knots_tokens": list(self.knots)}
        out["formula_heldout_median_rel_err"] = self.formula_heldout_median_rel_err
        out["formula_heldout_p90_rel_err"] = self.formula_heldout_p90_rel_err
        out["log_scale"] = {k: " ".join(map(_text, c)) for k, c in self.log_scale.items()}
        return out

    @classmethod
    def from_dict(cls, data: Any) -> SeriesTerm:
        """Inverse of ``to_dict``; raises ``SeriesError`` naming the bad field."""
        if not isinstance(data, dict):
            raise SeriesError(f": must be an object (got {type(data).__name__})")
        knots = data.get("knots_tokens")
        if (
            not isinstance(knots, list)
            or len(knots) < 2
            or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in knots)
            or any(b <= a for a, b in itertools.pairwise(knots))
        ):
            raise SeriesError(
                f".knots_tokens: must be two or more rising whole token counts >= 1 "
                f"(got {knots!r:.60})"
            )
        table = data.get("log_scale")
        if not isinstance(table, dict):
            raise SeriesError(".log_scale: must be an object of series -> knot values")
        scale: dict[str, tuple[float, ...]] = {}
        for key, text in table.items():
            where = f".log_scale.{key}"
            parts = key.split(",")
            if len(parts) != len(SHAPE_FIELDS) or not all(p.isdigit() for p in parts):
                raise SeriesError(f"{where}: the key must be six whole numbers d,i,k,e,tp,ep")
            try:
                values = tuple(float(v) for v in str(text).split())
            except ValueError:
                raise SeriesError(f"{where}: must be numbers separated by spaces") from None
            if len(values) != len(knots):
                raise SeriesError(f"{where}: {len(values)} values for {len(knots)} knots")
            if not all(math.isfinite(v) and abs(v) <= MAX_LOG_SCALE for v in values):
                raise SeriesError(f"{where}: each value finite, |v| <= {MAX_LOG_SCALE:g}")
            scale[key] = values
        med = data.get("formula_heldout_median_rel_err")
        p90 = data.get("formula_heldout_p90_rel_err")
        for name, v in (("median", med), ("p90", p90)):
            if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise SeriesError(f".formula_heldout_{name}_rel_err: a number >= 0 or null")
        return cls(
            log_scale=scale,
            knots=tuple(knots),
            formula_heldout_median_rel_err=None if med is None else float(med),
            formula_heldout_p90_rel_err=None if p90 is None else float(p90),
        )


__all__ = ["KNOTS", "MAX_LOG_SCALE", "SeriesError", "SeriesTerm", "series_key"]
