"""A run of pure-decode steps priced as compiled code (numba): step prices and running ends.

The engine times a decode run from the cumulative ends of its steps
(``twin.engine.decode_run.DecodeRun``); when the attention decode kernel is not
affine in the context (a measured p-norm roofline) every step is priced. In
Python that costs a few calls and list passes a step; :func:`fill_ends` does a
chunk of steps in one call, no Python per step.

It transliterates three Python pieces, the same float operations in the same
order, so every end equals the Python path's to the bit
(``tests/test_decode_kernel.py``):

1. ``latency._compile_pair``'s ``affine``: the attention decode kernel over the
   keys the step reads (its features affine in the keys, ``decode_pricing.affine_in_keys``);
2. ``decode_pricing.decode_steps``: the step's other parts around it, and the host
   time added or taken as a floor;
3. ``DecodeRun.price_next``'s running sums (``itertools.accumulate``, left to right).

No ``fastmath`` (``twin.jit``): no FMA contraction, no reassociation. ``x ** y``
on floats is LLVM's ``pow`` intrinsic, which calls the C library's ``pow`` as
CPython's ``float.__pow__`` does; numba links the process's own libm.

The constants of one batch size are one float array (:func:`pack`), the rows named
below; ``twin.costmodel.CostModel.decode_run_constants`` fills it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from twin.costmodel.latency import KernelConstants
from twin.jit import jit

# Rows of the constants: the step's parts (``CostModel._decode_shape``: dense layers, the
# mixers summed before full attention, its layer count, the head), the host time and its
# mode (1: a floor, 0: added), the attention decode features' coefficients in the keys
# (``affine_in_keys``: FLOPs, bytes at 0 keys and per key, score elements, and the tiles
# term ``cy x tiles`` already multiplied), the kernel's constants
# (``latency.KernelConstants``), then the count of the later parts and the parts.
(
    DENSE,
    BEFORE,
    LAYERS,
    HEAD,
    HOST,
    HOST_FLOOR,
    FN,
    B0,
    BN,
    XN,
    CYY,
    ROOFLINE,
    T0,
    INV_B,
    INV_F,
    CX,
    P,
    INV_P,
    N_AFTER,
) = range(19)
AFTER = 19


def pack(
    parts: tuple[float, float, int, Sequence[float], float],
    host_s: float,
    host_floor: bool,
    keys: tuple[float, float, float, float, float],
    kernel: KernelConstants,
) -> np.ndarray:
    """The constants of one batch size: ``parts`` = ``(dense, before, layers, after, head)``
    (``CostModel._decode_shape``), ``keys`` = ``(fn, b0, bn, xn, y)`` (``affine_in_keys``)."""
    dense, before, layers, after, head = parts
    fn, b0, bn, xn, y = keys
    c = np.zeros(AFTER + len(after), np.float64)
    c[DENSE], c[BEFORE], c[LAYERS], c[HEAD] = dense, before, layers, head
    c[HOST], c[HOST_FLOOR] = host_s, float(host_floor)
    c[FN], c[B0], c[BN], c[XN] = fn, b0, bn, xn
    c[CYY] = kernel.cy * y  # ``affine``'s ``cyy``, taken once
    c[ROOFLINE], c[T0], c[INV_B], c[INV_F] = kernel.roofline, kernel.t0, kernel.inv_b, kernel.inv_f
    c[CX], c[P], c[INV_P] = kernel.cx, kernel.p, kernel.inv_p
    c[N_AFTER] = len(after)
    c[AFTER:] = after
    return c


@jit("void(f8[::1], i8, i8, f8[::1], i8, i8)")
def fill_ends(c: np.ndarray, keys0: int, batch: int, ends: np.ndarray, first: int, n: int) -> None:
    """``ends[first:first + n]``: the ends of steps ``first`` to ``first + n - 1`` of a run
    whose step j reads ``keys0 + j x batch`` keys, summed on from ``ends[first - 1]``."""
    dense, before, layers, head = c[DENSE], c[BEFORE], c[LAYERS], c[HEAD]
    host, floor = c[HOST], c[HOST_FLOOR] != 0.0
    fn, b0, bn, xn, cyy = c[FN], c[B0], c[BN], c[XN], c[CYY]
    roofline, t0, inv_b, inv_f = c[ROOFLINE] != 0.0, c[T0], c[INV_B], c[INV_F]
    cx, p, inv_p = c[CX], c[P], c[INV_P]
    n_after = int(c[N_AFTER])
    total_s = ends[first - 1] if first else 0.0
    for j in range(first, first + n):
        keys = keys0 + j * batch
        # 1. ``affine`` on ``keys`` (``bandwidth_affine`` for a bandwidth-only kernel).
        b = (b0 + bn * keys) * inv_b
        if not roofline:
            r = t0 + b
        else:
            a = fn * keys * inv_f + cx * (xn * keys) + cyy
            if a <= 0.0:
                r = t0 + b
            elif b <= 0.0:
                r = t0 + a
            elif a > b:
                r = t0 + a * (1.0 + (b / a) ** p) ** inv_p
            else:
                r = t0 + b * ((a / b) ** p + 1.0) ** inv_p
        # 2. ``decode_steps``: the parts in ``_sum_parts``' order, then ``_with_host``.
        total = before + layers * r
        for i in range(n_after):
            total += c[AFTER + i]
        step = dense + total + head
        if floor:
            if not step >= host:
                step = host
        elif host != 0.0:
            step = step + host
        # 3. The running sum: ``accumulate`` (the first end is the first price itself).
        total_s = total_s + step if j else step
        ends[j] = total_s
