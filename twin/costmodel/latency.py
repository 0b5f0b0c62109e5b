"""Evaluating a kernel's latency formula (``twin.costmodel.formulas``) on its features.

``compile_kernel`` and ``compile_fast`` fold a profile's fitted parameters and peaks
into a closure; ``predict`` is a one-off evaluation for fitting reports and tests;
``compile_many`` prices arrays of features and ``compile_affine`` lists of counts whose
features are affine in the count (both for runs of decode steps). Pure Python, numpy for
the array form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from twin.costmodel.formulas import get_formula
from twin.costmodel.kernel_formula import FLOOR_PARAM, KernelFormula, line_params
from twin.errors import TwinError


def smooth_max(a: float, b: float, p: float) -> float:
    """(a^p + b^p)^(1/p) for a, b >= 0: between max(a, b) and a + b."""
    if a <= 0.0:
        return b
    if b <= 0.0:
        return a
    m = a if a > b else b
    return m * ((a / m) ** p + (b / m) ** p) ** (1.0 / p)


def predict(
    kernel: str,
    params: dict[str, float],
    peaks: dict[str, float],
    flops: float,
    nbytes: float,
    extras: dict[str, float] | None = None,
) -> float:
    """Seconds for one launch of ``kernel`` with these features."""
    return compile_kernel(kernel, params, peaks)(flops, nbytes, extras or {})


def compile_kernel(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> Callable[[float, float, dict[str, float]], float]:
    """A fast closure ``(flops, bytes, extras) -> seconds`` with the constants folded."""
    f = get_formula(kernel)
    missing = [p for p in f.params_of(params) if p not in params]
    if missing:
        raise TwinError(f"kernel {kernel!r}: profile lacks parameter(s) {', '.join(missing)}")
    if f.lines > 1:
        lowest = _least_line(f, params, peaks)
        return lambda flops, nbytes, extras: lowest(flops, nbytes)
    t0 = float(params["t0_s"])
    inv_b = 1.0 / (float(params["eff_bytes"]) * float(peaks[f.bytes_peak]))
    coeffs = [(x, f.coefficient(params, x)) for x in f.extras]
    if not f.uses_flops:
        if f.floor:  # at least the floor (the all-to-all's families)
            floor = float(params[FLOOR_PARAM])

            def bandwidth_floor(flops: float, nbytes: float, extras: dict[str, float]) -> float:
                work = t0 + nbytes * inv_b + sum(c * extras.get(x, 0.0) for x, c in coeffs)
                return max(floor, work)

            return bandwidth_floor
        assert not coeffs, "a byte-only formula with extras has a floor (the all-to-all's)"

        def bandwidth(flops: float, nbytes: float, extras: dict[str, float]) -> float:
            return t0 + nbytes * inv_b

        return bandwidth
    inv_f = 1.0 / (float(params["eff_flops"]) * float(peaks[f.flops_peak]))
    p = float(params["p"])
    serial = [(x, float(params[f"c_{x}"])) for x in f.serial]
    least = float(params[FLOOR_PARAM]) if f.floor else 0.0  # at least the floor

    def roofline(flops: float, nbytes: float, extras: dict[str, float]) -> float:
        compute = flops * inv_f
        for name, c in coeffs:
            compute += c * extras.get(name, 0.0)
        t = t0 + smooth_max(compute, nbytes * inv_b, p)
        for name, c in serial:
            t += c * extras.get(name, 0.0)
        return t if t > least else least

    return roofline


def compile_fast(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> Callable[..., float]:
    """Like ``compile_kernel`` but ``(flops, bytes, x=0, y=0, z=0)`` with ``x``, ``y``, ``z``
    the kernel's extra features in formula order: no dict per call, for the cost model. A
    formula with serial features (``KernelFormula.serial``) takes every feature in
    ``KernelFormula.features`` order (``_compile_serial``)."""
    f = get_formula(kernel)
    if f.lines > 1:
        compile_kernel(kernel, params, peaks)  # validates the parameters
        return _least_line(f, params, peaks)
    if f.serial:
        return _compile_serial(kernel, params, peaks)
    return _compile_pair(kernel, params, peaks)[0]


def _lines(
    f: KernelFormula, params: dict[str, float], peaks: dict[str, float]
) -> list[tuple[float, float]]:
    """``(t0_i, 1 / (eff_bytes_i * peak))`` of each line of a formula of several lines
    (``KernelFormula.lines``)."""
    peak = float(peaks[f.bytes_peak])
    return [
        (float(params[t0]), 1.0 / (float(params[eff]) * peak))
        for t0, eff in (line_params(i) for i in range(1, f.lines + 1))
    ]


def _least_line(
    f: KernelFormula, params: dict[str, float], peaks: dict[str, float]
) -> Callable[..., float]:
    """``(flops, bytes, ...) -> seconds`` of a formula of several lines
    (``KernelFormula.lines``): the least of ``t0_i + bytes / (eff_bytes_i * peak)``."""
    lines = _lines(f, params, peaks)

    def least(flops: float, nbytes: float, *_: float) -> float:
        return min(t0 + nbytes * inv_b for t0, inv_b in lines)

    return least


def _least_line_many(
    f: KernelFormula, params: dict[str, float], peaks: dict[str, float]
) -> Callable[..., np.ndarray]:
    """:func:`_least_line` over arrays (broadcast against ``flops``), equal to it to the
    bit: each line's ``t0 + bytes * inv_b`` is the same two IEEE operations, and the least
    of equal values is that value."""
    lines = _lines(f, params, peaks)

    def least(flops: Any, nbytes: Any, *_: Any) -> np.ndarray:
        shape = np.broadcast(np.asarray(flops), np.asarray(nbytes)).shape
        b = np.broadcast_to(np.asarray(nbytes, dtype=np.float64), shape)
        out = np.full(shape, np.inf)
        for t0, inv_b in lines:
            out = np.minimum(out, t0 + b * inv_b)
        return out

    return least


def _compile_serial(
    kernel: str, params: dict[str, float], peaks: dict[str, float], many: bool = False
) -> Callable[..., Any]:
    """``compile_fast`` (``compile_many`` with ``many``) of a formula with serial features
    (``KernelFormula.serial``): ``(flops, bytes, *features)`` with the features in
    ``KernelFormula.features`` order (the compute side's extras, then the serial ones;
    missing trailing ones are 0), ``fast``'s smooth maximum of ``_compile_pair`` plus each
    serial term after it. The array form prices element by element with the scalar one
    (the same value to the bit); no decode path runs these kernels in bulk."""
    f = get_formula(kernel)
    assert f.uses_flops and f.serial, "a roofline with serial features"
    compile_kernel(kernel, params, peaks)  # validates the parameters
    t0 = float(params["t0_s"])
    inv_b = 1.0 / (float(params["eff_bytes"]) * float(peaks[f.bytes_peak]))
    inv_f = 1.0 / (float(params["eff_flops"]) * float(peaks[f.flops_peak]))
    p = float(params["p"])
    inv_p = 1.0 / p
    n_in = len(f.extras)
    inside = [f.coefficient(params, x) for x in f.extras]
    serial = [float(params[f"c_{x}"]) for x in f.serial]
    least = float(params[FLOOR_PARAM]) if f.floor else 0.0  # at least the floor

    def fast(flops: float, nbytes: float, *feats: float) -> float:
        a = flops * inv_f
        for c, v in zip(inside, feats[:n_in], strict=False):
            a += c * v
        b = nbytes * inv_b
        if a <= 0.0:
            t = t0 + b
        elif b <= 0.0:
            t = t0 + a
        else:
            m = a if a > b else b
            t = t0 + m * ((a / m) ** p + (b / m) ** p) ** inv_p
        for c, v in zip(serial, feats[n_in:], strict=False):
            t += c * v
        return t if t > least else least

    if not many:
        return fast

    def array(flops: Any, nbytes: Any, *feats: Any) -> np.ndarray:
        cols = np.broadcast_arrays(
            np.asarray(flops, np.float64), np.asarray(nbytes, np.float64), *map(np.asarray, feats)
        )
        shape = cols[0].shape
        rows = zip(*(c.ravel().tolist() for c in cols), strict=True)
        return np.array([fast(*r) for r in rows], np.float64).reshape(shape)

    return array


def compile_many(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> Callable[..., np.ndarray]:
    """``compile_fast`` over arrays of features: one price per element, each equal to the
    scalar one to the bit (the same operations in the same order, and the same ``pow``:
    Python's, not numpy's, whose SIMD versions may round differently). For runs of
    decode steps (``CostModel.decode_steps_s``). A formula with serial features takes
    them as ``compile_fast`` does, one of several lines the least of them."""
    f = get_formula(kernel)
    if f.lines > 1:
        compile_kernel(kernel, params, peaks)  # validates the parameters
        return _least_line_many(f, params, peaks)
    if f.serial:
        return _compile_serial(kernel, params, peaks, many=True)
    return _compile_pair(kernel, params, peaks)[1]


def compile_affine(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> Callable[[float, float, float, float, float, float, float, Iterable[int]], list[float]]:
    """``compile_fast`` over counts ``n`` whose features are ``flops = fn * n``, ``bytes =
    b0 + bn * n``, ``x = xn * n``, a fixed ``y``, and ``z`` from ``zk`` counts on (0 below:
    TensorRT-LLM Hopper's XQA CTAs, ``features.attn_decode_launch``; ``zk`` 0 elsewhere):
    ``(fn, b0, bn, xn, y, z, zk, counts) -> [seconds per count]``, each equal to
    ``compile_fast``'s price of those features to the bit (the same operations in the same
    order; the features themselves are exact while they are integers below 2^53). A tight
    loop without a call per element, for short runs of decode steps (``CostModel.
    decode_steps_s``: ``n`` the keys read). Not for a formula of several lines
    (``KernelFormula.lines``): refused."""
    if get_formula(kernel).lines > 1:
        raise TwinError(f"kernel {kernel!r}: no affine form for a formula of several lines")
    return _compile_pair(kernel, params, peaks)[2]


class KernelConstants(NamedTuple):
    """One kernel's model with its parameters and peaks folded: ``t0 + bytes x inv_b``
    (``roofline`` false: a byte-only kernel, none of which has extras here), or ``t0`` plus
    the p-norm of the compute side ``flops x inv_f + cx x + cy y + cz z`` and the memory
    side ``bytes x inv_b`` (``inv_p = 1 / p``). ``cz`` last: the third extra (the attention
    decode families' ``waves_d``), 0 for every other kernel, whose prices it leaves as they
    were (adding ``0.0 x 0.0`` to a sum is exact)."""

    roofline: bool
    t0: float
    inv_b: float
    inv_f: float = 0.0
    cx: float = 0.0
    cy: float = 0.0
    p: float = 1.0
    inv_p: float = 1.0
    cz: float = 0.0


def kernel_constants(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> KernelConstants:
    """The constants every compiled form of ``kernel``'s model uses (``_compile_pair``'s, and
    ``twin.costmodel.compiled``'s). They leave out a serial feature's term
    (``KernelFormula.serial``): such a formula is compiled by ``_compile_serial``."""
    f = get_formula(kernel)
    assert not f.floor, "the compiled constants carry no floor"
    assert f.lines == 1, "the compiled constants carry one line"
    assert len(f.extras) <= 3, "compile_fast handles at most three extra features"
    assert not f.serial, "the compiled constants carry no serial feature"
    compile_kernel(kernel, params, peaks)  # validates the parameters
    t0 = float(params["t0_s"])
    inv_b = 1.0 / (float(params["eff_bytes"]) * float(peaks[f.bytes_peak]))
    if not f.uses_flops:
        # The byte-only formulas with extras are the all-to-all's, each with a floor
        # (refused above): ``compile_kernel`` prices them.
        assert not f.extras, "the compiled constants of a byte-only kernel carry no extra"
        return KernelConstants(False, t0, inv_b)
    inv_f = 1.0 / (float(params["eff_flops"]) * float(peaks[f.flops_peak]))
    p = float(params["p"])
    cx, cy, cz = _coefficients(f, params)
    return KernelConstants(True, t0, inv_b, inv_f, cx, cy, p, 1.0 / p, cz)


def roofline_s(
    t0: float,
    inv_b: float,
    inv_f: float,
    cx: float,
    cy: float,
    p: float,
    inv_p: float,
    cz: float,
    flops: float,
    nbytes: float,
    x: float = 0.0,
    y: float = 0.0,
    z: float = 0.0,
) -> float:
    """Seconds of a roofline kernel of constants ``t0`` to ``cz`` (``KernelConstants``' after
    ``roofline``) on these features: ``t0`` plus the p-norm of the compute side ``flops x
    inv_f + cx x + cy y + cz z`` and the memory side ``bytes x inv_b`` (``compile_fast``'s
    price of a kernel without serial features; the compiled step's,
    ``twin.costmodel.compiled``, the same function compiled).

    The p-norm is ``m ((a/m)^p + (b/m)^p)^(1/p)`` with ``m`` the larger side, whose term is
    1.0: ``m / m`` is exactly 1.0, ``pow(1.0, p)`` is exactly 1.0 (C99 F.9.4.4) and ``+``
    commutes, so it is written with that term 1.0, one ``pow`` call fewer, the same to the
    bit (as ``_compile_pair``'s affine loop)."""
    a = flops * inv_f + cx * x + cy * y + cz * z
    b = nbytes * inv_b
    if a <= 0.0:
        return t0 + b
    if b <= 0.0:
        return t0 + a
    if a > b:
        return t0 + a * (1.0 + (b / a) ** p) ** inv_p
    return t0 + b * ((a / b) ** p + 1.0) ** inv_p


def bandwidth_s(
    t0: float,
    inv_b: float,
    flops: float,
    nbytes: float,
    x: float = 0.0,
    y: float = 0.0,
    z: float = 0.0,
) -> float:
    """Seconds of a byte-only kernel of constants ``t0``, ``inv_b`` (``KernelConstants``
    with ``roofline`` false): ``t0 + bytes x inv_b``."""
    return t0 + nbytes * inv_b


def _bandwidth_forms(
    t0: float, inv_b: float
) -> tuple[Callable[..., float], Callable[..., np.ndarray], Callable[..., list[float]]]:
    """The three forms of a byte-only kernel's ``t0 + bytes x inv_b`` (``KernelConstants``
    with ``roofline`` false)."""

    def many(flops: Any, nbytes: Any, x: Any = 0.0, y: Any = 0.0, z: Any = 0.0) -> np.ndarray:
        b = np.asarray(nbytes, np.float64) * inv_b
        return t0 + np.broadcast_arrays(b, np.asarray(flops))[0]

    def affine(
        fn: float,
        b0: float,
        bn: float,
        xn: float,
        y: float,
        z: float,
        zk: float,
        counts: Iterable[int],
    ) -> list[float]:
        return [t0 + (b0 + bn * n) * inv_b for n in counts]

    return partial(bandwidth_s, t0, inv_b), many, affine


def _compile_pair(
    kernel: str, params: dict[str, float], peaks: dict[str, float]
) -> tuple[Callable[..., float], Callable[..., np.ndarray], Callable[..., list[float]]]:
    """The scalar, the array and the affine form of one kernel's model (one set of
    constants)."""
    roofline, t0, inv_b, inv_f, cx, cy, p, inv_p, cz = kernel_constants(kernel, params, peaks)
    if not roofline:
        return _bandwidth_forms(t0, inv_b)

    fast = partial(roofline_s, t0, inv_b, inv_f, cx, cy, p, inv_p, cz)

    def many(flops: Any, nbytes: Any, x: Any = 0.0, y: Any = 0.0, z: Any = 0.0) -> np.ndarray:
        a = np.asarray(flops, np.float64) * inv_f + cx * x + cy * y + cz * z
        b = np.asarray(nbytes, np.float64) * inv_b
        if a.shape != b.shape:
            a, b = np.broadcast_arrays(a, b)
        m = np.maximum(a, b)  # ``a if a > b else b``: equal values, no NaN
        lo = np.minimum(a, b)
        edge = lo.min(initial=1.0) <= 0.0
        if edge:  # ratios only where both sides are positive (the rest: ``fast``'s branches)
            both = lo > 0.0
            lo, m = np.where(both, lo, 1.0), np.where(both, m, 1.0)
        # The larger side's ratio is exactly 1.0 and 1.0 ** p == 1.0, so ``fast``'s
        # ``(a/m)**p + (b/m)**p`` is ``1.0 + (lo/m)**p`` to the bit (+ commutes).
        n = m.size
        ratios = (lo / m).ravel().tolist()
        norms = map((1.0).__add__, map(pow, ratios, repeat(p)))
        root = np.fromiter(map(pow, norms, repeat(inv_p)), np.float64, n)
        out = t0 + m * root.reshape(m.shape)
        if edge:
            out = np.where(a <= 0.0, t0 + b, np.where(b <= 0.0, t0 + a, out))
        return out

    def affine(
        fn: float,
        b0: float,
        bn: float,
        xn: float,
        y: float,
        z: float,
        zk: float,
        counts: Iterable[int],
    ) -> list[float]:
        out = []
        # ``z`` from ``zk`` keys on, 0 below (``decode_pricing.affine_in_keys``).
        cyy, czz, czz0 = cy * y, cz * z, cz * 0.0
        for n in counts:
            # ``fast`` on (fn * n, b0 + bn * n, xn * n, y, z), inline (the same additions
            # in the same order: ``czz`` added after ``cyy``, not summed with it first).
            a = fn * n * inv_f + cx * (xn * n) + cyy + (czz if n >= zk else czz0)
            b = (b0 + bn * n) * inv_b
            if a <= 0.0:
                out.append(t0 + b)
            elif b <= 0.0:
                out.append(t0 + a)
            elif a > b:
                out.append(t0 + a * (1.0 + (b / a) ** p) ** inv_p)
            else:
                # ``fast``'s larger side's ratio is exactly 1.0, and 1.0 ** p == 1.0.
                out.append(t0 + b * ((a / b) ** p + 1.0) ** inv_p)
        return out

    return fast, many, affine


def _coefficients(f: KernelFormula, params: dict[str, float]) -> tuple[float, float, float]:
    """The extra features' coefficients in formula order, padded with zeros to three."""
    cs = [*(f.coefficient(params, name) for name in f.extras), 0.0, 0.0, 0.0]
    return cs[0], cs[1], cs[2]


__all__ = [
    "KernelConstants",
    "bandwidth_s",
    "compile_affine",
    "compile_fast",
    "compile_kernel",
    "compile_many",
    "kernel_constants",
    "predict",
    "roofline_s",
    "smooth_max",
]
