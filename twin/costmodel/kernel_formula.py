"""The latency model of each kernel, and the FLOPs/bytes features it is fitted on.

One physically-shaped model for every kernel::

    t = t0 + smax_p(F / (eff_flops * flops_peak) + sum_j c_j x_j, B / (eff_bytes * bytes_peak))

``F`` is the FLOPs, ``B`` the fewest bytes the kernel must move, ``t0`` the launch
overhead, ``smax_p(a, b) = (a^p + b^p)^(1/p)`` a smooth maximum (p = 1 is no
overlap at all, large p a hard roofline), and the ``x_j`` extra features a kernel
needs beyond the roofline, on the compute side (they overlap with memory traffic
as arithmetic does): the score elements (query x key pairs x heads) of attention,
whose softmax costs per score and not per FLOP; the chunks x heads of the Mamba2
scan, whose state passing is sequential; and the weight elements of a GEMM, whose
per-panel work (packing, tile edges) makes few-token products slower than their
FLOPs. Every coefficient is non-negative and every feature grows with tokens and
context, so predictions are monotone in both. Byte-only kernels (copies,
element-wise passes) are ``t0 + B / (eff_bytes * bytes_peak)``; the all-reduce's
(``KernelFormula.lines``) the least of a few such lines, one per algorithm the library
chooses among.

Features are additive across the sequences of one batched launch, so a batch of
prefill chunks is priced as one launch with the summed features (one ``t0``).
``KernelFormula`` names how one kernel's formula reads a profile (its parameters, its
peaks, its extra features); the registry of every kernel's formula is
``twin.costmodel.formulas``, ``twin.costmodel.features`` computes the features of a shape
and ``twin.costmodel.latency`` evaluates the formula. All are pure Python: the cost model
and the fitting import them without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The model-name part and parameter of ``KernelFormula.floor``.
FLOOR = "floor"
FLOOR_PARAM = "floor_s"


def line_params(i: int) -> tuple[str, str]:
    """The latency and efficiency parameters of line ``i`` (1-based) of a byte-only
    formula with several lines (``KernelFormula.lines``): ``t0_s`` and ``eff_bytes`` for
    the first, ``t0_<i>_s`` and ``eff_bytes_<i>`` after it."""
    return ("t0_s", "eff_bytes") if i == 1 else (f"t0_{i}_s", f"eff_bytes_{i}")


# The most lines a formula may have (``KernelFormula.lines``); their parameters' ranges
# (``twin.costmodel.profile.PARAM_RANGES``) are written for these.
MAX_LINES = 3


@dataclass(frozen=True)
class KernelFormula:
    """How one kernel's latency model reads a profile."""

    kernel: str
    bytes_peak: str  # the profile peak the byte time divides by: mem_bw or host_bw
    uses_flops: bool  # False: a pure byte-moving kernel (no FLOP term, no smooth max)
    # Extra linear features, each with a ``c_<name>`` coefficient: on the compute side of a
    # roofline kernel; added to the byte time of a byte-only one (the all-to-all's).
    extras: tuple[str, ...]
    doc: str
    # The peak the FLOP time divides by: tensor-core ``flops``, or ``fp32_flops`` for a
    # kernel that runs on CUDA cores in fp32 (Mamba-1's selective scan).
    flops_peak: str = "flops"
    # Serial extras: linear features priced after the smooth maximum (``t0 + smax_p(...) +
    # sum_k s_k z_k``), work that overlaps neither the math nor the memory stream (the
    # fused MoE's set-up of each expert it touches). Each has a ``c_<name>`` coefficient
    # after the extras'. The scalar and array forms price them (``latency.compile_kernel``,
    # ``compile_fast``, ``compile_many``); the affine form and the decode paths' compiled
    # constants (``latency.kernel_constants``) refuse such a formula.
    serial: tuple[str, ...] = ()
    # Serial features priced at a fixed physical rate rather than a fitted one: (feature,
    # peak) pairs, the feature's ``c_<name>`` held at ``1 / peaks[peak]`` by the fit
    # (``fit.fit_params``) and stored like any other coefficient, so a feature of bytes is
    # priced as a stream at that bandwidth and cannot absorb the rest of the kernel's time.
    fixed_rates: tuple[tuple[str, str], ...] = ()
    # The model name's first part where the smooth maximum's FLOPs and bytes are not the
    # whole kernel's (``""``: ``roofline`` / ``bandwidth``): a fit written when they were
    # is then refused by name (``fit_upgrade.upgrade_fit`` upgrades only a fit of the same base),
    # not read with coefficients meant for other features.
    base: str = ""
    # A floor: the time is the larger of a fitted ``floor_s`` and the formula, for a call
    # whose small work hides under a wait (the all-to-all's families: the peers' signals,
    # vLLM's host path; the MLA decode kernels: ``MLA_DECODE_FLOOR``). Named ``+floor``
    # last in the model; a fit written without it reads with ``floor_s`` 0
    # (``fit_upgrade.upgrade_fit``): the same prices. ``latency.compile_kernel`` and
    # ``latency.compile_fast`` of a formula with serial features price it.
    floor: bool = False
    # Lines: a byte-only formula that is the least of this many latency-plus-bandwidth
    # lines, ``min_i(t0_i + B / (eff_bytes_i * peak))`` (parameters :func:`line_params`),
    # one per algorithm a collective library picks among by message size, each at its own
    # latency and bandwidth: the all-reduce's (the custom all-reduce's one-shot and
    # two-shot kernels, NCCL above them; NCCL's own protocols). Named ``min<lines>``; no
    # extras, serial features or floor with it.
    lines: int = 1
    # Coefficients a fit may carry under another name, ``(formula's name, fit's name)``: the
    # attention decode families' third, which prices what the fit's launch rule counts
    # (``features.launch_coefficient``: ``c_xqa_ctas`` on TensorRT-LLM Hopper's XQA fits).
    # Read by position: ``coefficient`` / ``params_of``; the fit's model name carries the
    # name too (``model_name_of``).
    aliases: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.lines <= MAX_LINES:
            raise ValueError(f"{self.kernel}: lines must be 1..{MAX_LINES} (got {self.lines})")
        if self.lines > 1 and (self.uses_flops or self.features or self.floor):
            raise ValueError(f"{self.kernel}: several lines only for a plain byte-only formula")
        if any(x not in self.serial for x, _ in self.fixed_rates):
            raise ValueError(f"{self.kernel}: a fixed rate only for a serial feature")
        if any(not name.startswith("c_") for pair in self.aliases for name in pair):
            raise ValueError(f"{self.kernel}: an alias only of an extra's coefficient")

    @property
    def model_name(self) -> str:
        """Formula name stored in a profile (a fit whose coefficient carries its alias:
        :meth:`model_name_of`)."""
        return self._model_name(self.features)

    def model_name_of(self, params: dict[str, Any]) -> str:
        """``model_name`` as fit ``params`` name their coefficients: an aliased extra under
        the name the fit carries (``aliases``: an XQA fit's ``c_xqa_ctas`` makes it
        ``roofline+score_elems+tiles+xqa_ctas``), so the name says what each coefficient
        prices."""
        alias = self._aliased(params)
        return self._model_name(
            tuple(alias.get(f"c_{x}", f"c_{x}").removeprefix("c_") for x in self.features)
        )

    def _model_name(self, features: tuple[str, ...]) -> str:
        plain = "roofline" if self.uses_flops else "bandwidth"
        base = self.base or (plain if self.lines == 1 else f"min{self.lines}_{plain}")
        return "+".join((base, *features, *((FLOOR,) if self.floor else ())))

    @property
    def features(self) -> tuple[str, ...]:
        """Every extra feature in parameter order: the compute side's, then the serial."""
        return (*self.extras, *self.serial)

    @property
    def param_names(self) -> tuple[str, ...]:
        """Parameter names in fitting order."""
        if self.lines > 1:
            return tuple(n for i in range(1, self.lines + 1) for n in line_params(i))
        names = ["t0_s"]
        if self.uses_flops:
            names += ["eff_flops", "eff_bytes", "p"]
        else:
            names += ["eff_bytes"]
        return (*names, *(f"c_{x}" for x in self.features), *((FLOOR_PARAM,) if self.floor else ()))

    def params_of(self, params: dict[str, Any]) -> tuple[str, ...]:
        """``param_names`` as fit ``params`` names them: an aliased coefficient under the
        name the fit carries (``aliases``)."""
        alias = self._aliased(params)
        return tuple(alias.get(n, n) for n in self.param_names)

    def _aliased(self, params: dict[str, Any]) -> dict[str, str]:
        """The formula's coefficient names that ``params`` carry under their alias."""
        return {a: b for a, b in self.aliases if b in params and a not in params}

    def fixed_coefficients(self, peaks: dict[str, float]) -> dict[str, float]:
        """The coefficients held at a fixed physical rate (``fixed_rates``) on a device of
        ``peaks``: one over the peak, exactly (the fitter and the transfer to another GPU
        both set them so, never scaling or fitting them)."""
        return {f"c_{x}": 1.0 / peaks[peak] for x, peak in self.fixed_rates}

    def coefficient(self, params: dict[str, Any], feature: str) -> float:
        """Extra ``feature``'s coefficient in fit ``params``, under its own name or its
        alias (``aliases``)."""
        name = f"c_{feature}"
        return float(params[self._aliased(params).get(name, name)])


__all__ = [
    "FLOOR",
    "FLOOR_PARAM",
    "MAX_LINES",
    "KernelFormula",
    "line_params",
]
