"""``Profile``: the fitted latency models of one device, with where they came from.

A profile is JSON (schema below) so that ``twin cost`` and the cost model read
it without torch. ``source`` says how it was made:

- ``measured``: kernels timed on the device by ``twin calibrate``;
- ``transferred``: a measured profile rescaled to another GPU's datasheet peaks;
- ``datasheet``: a roofline with documented default efficiencies (uncalibrated).

Schema::

    {"schema": 1, "gpu": "h100", "device": "NVIDIA H100 80GB HBM3",
     "source": "measured" | "datasheet" | "transferred", "transferred_from": null,
     "dtype": "bfloat16", "provenance": {"date": ..., "torch": ..., ...},
     "peaks": {"flops": ..., "mem_bw": ..., "host_bw": ..., "interconnect_bw": ...,
               "allreduce_latency_s": ...},
     "kernels": {"gemm": {"model": "roofline", "params": {...},
                          "heldout_median_rel_err": 0.04, "heldout_max_rel_err": 0.12,
                          "n_shapes": 36, "n_heldout": 9}, ...}}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from twin.atomic import write_text_atomic
from twin.costmodel.formulas import check_params, get_formula
from twin.errors import TwinError

SCHEMA_VERSION = 1
# ``mixed``: the families come from different places; each fit says where.
SOURCES = ("measured", "datasheet", "transferred", "mixed")


REQUIRED_PEAKS = ("flops", "mem_bw", "host_bw")


@dataclass
class KernelFit:
    """One kernel's fitted model and how well it predicts shapes it was not fitted on."""

    model: str
    params: dict[str, float]
    heldout_median_rel_err: float | None = None
    heldout_max_rel_err: float | None = None
    n_shapes: int = 0
    n_heldout: int = 0
    note: str = ""
    heldout_p90_rel_err: float | None = None
    # Rows refused as physically impossible for the device (faster than its peaks).
    n_flagged: int = 0
    # Where this family's numbers come from when it differs per family (see
    # twin.costmodel.provenance): {"source": "measured" | "datasheet" | ..., "label": ...}.
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``note``, p90, flagged rows and provenance only when set)."""
        out: dict[str, Any] = {
            "model": self.model,
            "params": dict(self.params),
            "heldout_median_rel_err": self.heldout_median_rel_err,
            "heldout_max_rel_err": self.heldout_max_rel_err,
            "n_shapes": self.n_shapes,
            "n_heldout": self.n_heldout,
        }
        if self.heldout_p90_rel_err is not None:
            out["heldout_p90_rel_err"] = self.heldout_p90_rel_err
        if self.n_flagged:
            out["n_flagged"] = self.n_flagged
        if self.provenance:
            out["provenance"] = dict(self.provenance)
        if self.note:
            out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelFit:
        """Inverse of ``to_dict``."""
        return cls(
            model=str(data["model"]),
            params={k: float(v) for k, v in data["params"].items()},
            heldout_median_rel_err=_opt_float(data.get("heldout_median_rel_err")),
            heldout_max_rel_err=_opt_float(data.get("heldout_max_rel_err")),
            n_shapes=int(data.get("n_shapes", 0)),
            n_heldout=int(data.get("n_heldout", 0)),
            note=str(data.get("note", "")),
            heldout_p90_rel_err=_opt_float(data.get("heldout_p90_rel_err")),
            n_flagged=int(data.get("n_flagged", 0)),
            provenance=dict(data.get("provenance") or {}),
        )


@dataclass
class Profile:
    """Fitted kernel models of one device; see the module docstring for the schema."""

    gpu: str  # registry name: a100, h100, ..., cpu
    device: str  # the device's own name (or the datasheet's)
    source: str  # measured | datasheet | transferred
    peaks: dict[str, float]
    kernels: dict[str, KernelFit]
    provenance: dict[str, Any] = field(default_factory=dict)
    transferred_from: str | None = None
    dtype: str = "bfloat16"
    # Host overhead per layer kind beyond the kernels (calibration.overhead):
    # {"mode": "add" | "max", "model": ..., "seconds": {"attention": s, ...}}; None: not measured.
    layer_overhead: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise TwinError(
                f"profile {self.gpu!r}: source must be one of {', '.join(SOURCES)} "
                f"(got {self.source!r})"
            )
        if self.source == "transferred" and not self.transferred_from:
            raise TwinError(
                f"profile {self.gpu!r}: a transferred profile must say transferred_from"
            )
        for key in REQUIRED_PEAKS:
            v = self.peaks.get(key)
            if v is None or not math.isfinite(v) or v <= 0:
                raise TwinError(f"profile {self.gpu!r}: peak {key!r} must be positive (got {v!r})")
        for name, fit in self.kernels.items():
            formula = get_formula(name)
            _upgrade(fit, formula.model_name)
            if fit.model != formula.model_name:
                raise TwinError(
                    f"profile {self.gpu!r}, kernel {name!r}: model {fit.model!r} "
                    f"is not this version's {formula.model_name!r}"
                )
            check_params(name, fit.params)
            peak = formula.flops_peak
            if formula.uses_flops and peak not in ("flops", "fp32_flops"):
                v = self.peaks.get(peak)
                if v is None or not math.isfinite(v) or v <= 0:
                    raise TwinError(
                        f"profile {self.gpu!r}, kernel {name!r}: needs a positive peak "
                        f"{peak!r} (got {v!r})"
                    )

    # ------------------------------------------------------------ display
    @property
    def provenance_label(self) -> str:
        """One line saying where the numbers come from, shown by every output: the
        mixture per kernel family when the families differ."""
        if any(fit.provenance for fit in self.kernels.values()):
            return self.provenance_mixture()
        return self.profile_label()

    def profile_label(self) -> str:
        """Where the whole profile comes from (families without their own provenance)."""
        if self.source == "measured":
            date = self.provenance.get("date", "undated")
            return f"measured on {self.device}, {date}"
        if self.source == "transferred":
            return f"transferred from {self.transferred_from}"
        if self.source == "mixed":
            return "mixed (see each kernel family)"
        return "datasheet roofline (uncalibrated)"

    def provenance_mixture(self) -> str:
        """Per kernel family, e.g. "attention: measured (vLLM 0.24.0 FA3, H100 SXM5); SSM
        scan: datasheet" (``twin.costmodel.provenance``)."""
        from twin.costmodel.provenance import mixture  # late: provenance imports this module

        return mixture(self)

    def precisions(self) -> list[str]:
        """The ``--precision`` values this profile has a GEMM fit for, bf16 first."""
        from twin.precision import WEIGHT_FORMATS  # late: twin.precision is model-side

        return [f.name for f in WEIGHT_FORMATS.values() if f.kernel in self.kernels]

    def heldout_summary(self) -> dict[str, dict[str, float | int | None]]:
        """Held-out errors by kernel, as printed by ``twin calibrate``."""
        return {
            name: {
                "median": fit.heldout_median_rel_err,
                "p90": fit.heldout_p90_rel_err,
                "max": fit.heldout_max_rel_err,
                "flagged": fit.n_flagged,
                "n_shapes": fit.n_shapes,
                "n_heldout": fit.n_heldout,
            }
            for name, fit in self.kernels.items()
        }

    # ------------------------------------------------------------ I/O
    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in the documented schema."""
        out = {
            "schema": SCHEMA_VERSION,
            "gpu": self.gpu,
            "device": self.device,
            "source": self.source,
            "transferred_from": self.transferred_from,
            "provenance_label": self.provenance_label,
            "dtype": self.dtype,
            "provenance": self.provenance,
            "peaks": self.peaks,
            "kernels": {k: v.to_dict() for k, v in self.kernels.items()},
        }
        if self.layer_overhead is not None:
            out["layer_overhead"] = self.layer_overhead
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "profile") -> Profile:
        """Inverse of ``to_dict``; a ``TwinError`` naming ``where`` on a malformed one."""
        try:
            if data.get("schema", SCHEMA_VERSION) != SCHEMA_VERSION:
                raise TwinError(
                    f"{where}: schema {data.get('schema')!r} is not "
                    f"{SCHEMA_VERSION}; re-run twin calibrate"
                )
            return cls(
                gpu=str(data["gpu"]),
                device=str(data["device"]),
                source=str(data["source"]),
                peaks={k: float(v) for k, v in data["peaks"].items() if v is not None},
                kernels={k: KernelFit.from_dict(v) for k, v in data["kernels"].items()},
                provenance=dict(data.get("provenance") or {}),
                transferred_from=data.get("transferred_from"),
                dtype=str(data.get("dtype", "bfloat16")),
                layer_overhead=_overhead(data.get("layer_overhead")),
            )
        except TwinError as err:
            raise TwinError(f"{where}: {err}") from None
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise TwinError(f"{where}: not a valid profile ({type(err).__name__}: {err})") from None

    def save(self, path: str | Path) -> Path:
        """Write atomically as indented JSON; returns the path."""
        path = Path(path)
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Profile:
        """Read a profile file."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise TwinError(f"{path}: no such profile file") from None
        except (OSError, ValueError) as err:  # ValueError: bad JSON, or not UTF-8 (a binary file)
            raise TwinError(f"{path}: cannot read profile ({err})") from None
        if not isinstance(data, dict):
            raise TwinError(f"{path}: not a valid profile (expected a JSON object)")
        return cls.from_dict(data, where=str(path))


def _upgrade(fit: KernelFit, current: str) -> None:
    """Read a fit written before its formula gained extra features: the new features
    get a zero coefficient, so the fit predicts exactly what it did."""
    old, new = fit.model.split("+"), current.split("+")
    if old == new or old[0] != new[0] or not set(old[1:]) <= set(new[1:]):
        return
    for extra in new[1:]:
        fit.params.setdefault(f"c_{extra}", 0.0)
    fit.model = current


def _overhead(data: Any) -> dict[str, Any] | None:
    """A ``layer_overhead`` entry, checked: a mode and non-negative seconds per layer kind."""
    if data is None:
        return None
    mode, seconds = data["mode"], data["seconds"]
    if mode not in ("add", "max"):
        raise ValueError(f"layer_overhead mode must be add or max (got {mode!r})")
    out = {k: float(v) for k, v in seconds.items()}
    if any(not math.isfinite(v) or v < 0 for v in out.values()):
        raise ValueError("layer_overhead seconds must be finite and >= 0")
    return {**data, "seconds": out}


def _opt_float(v: Any) -> float | None:
    return None if v is None else float(v)
