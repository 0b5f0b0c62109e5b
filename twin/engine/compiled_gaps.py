"""Compiled binning of a scheduler's pending inter-token gaps (:mod:`twin.engine.step_gaps`).

One call bins every step recorded since the last: each step's duration (the difference
of two consecutive step ends of a decode run, a mixed step's seconds, or ``alpha + beta
i`` in closed form), its bin from the float64's bits as :mod:`twin.token_gaps` defines
them (:func:`twin.token_gaps.key_constants`), ``batch`` counts in that bin, and the exact
sums. numpy takes a dozen calls and as many temporary arrays a flush, each call
microseconds in a running simulation whose caches have gone cold and the temporaries
evicting the simulation's own data; this is one call, no temporary, a few nanoseconds a
step. Loaded (numba, the kernels from their disk cache: ``twin.jit``) when a scheduler is
built, not inside a run.
"""

from __future__ import annotations

import numpy as np

from twin.jit import jit


@jit("i8(f8[::1], f8[::1], i8, i8[::1], i8, i8, f8[::1])")
def bin_steps(
    ends: np.ndarray,
    records: np.ndarray,
    page: int,
    counts: np.ndarray,
    shift: int,
    base: int,
    total: np.ndarray,
) -> int:
    """Bin the steps of ``records`` (``steps, batch, x`` each) into ``counts``, each step
    ``batch`` gaps; add their seconds to ``total[0]``; return how many gaps.

    ``steps`` 0: a mixed step of ``x`` seconds. Else a decode run whose step ends, counted
    from its start, are in ``ends`` from the next ``page``-aligned place (runs start on
    pages, one after another), its last step ``x`` seconds longer (``StepGaps.run``).
    """
    cell = np.empty(1, np.float64)
    bits = cell.view(np.int64)
    top = len(counts) - 1
    seconds = 0.0
    gaps = 0
    start = 0  # where the next run's ends begin
    for r in range(0, len(records), 3):
        steps, batch, x = int(records[r]), int(records[r + 1]), records[r + 2]
        if steps == 0:
            cell[0] = x
            k = (bits[0] >> shift) - base
            counts[0 if k < 0 else top if k > top else k] += batch
            seconds += batch * x
            gaps += batch
            continue
        before = 0.0
        last = start + steps - 1
        for j in range(start, last):
            end = ends[j]
            cell[0] = end - before
            before = end
            k = (bits[0] >> shift) - base
            counts[0 if k < 0 else top if k > top else k] += batch
        end = ends[last]
        cell[0] = end - before + x  # the last step, and the extra after it
        k = (bits[0] >> shift) - base
        counts[0 if k < 0 else top if k > top else k] += batch
        seconds += batch * (end + x)  # the run's whole time
        gaps += batch * steps
        start += (steps + page - 1) // page * page
    total[0] += seconds
    return gaps


@jit("i8(f8[::1], i8[::1], i8, i8, f8[::1])")
def bin_affine(
    records: np.ndarray, counts: np.ndarray, shift: int, base: int, total: np.ndarray
) -> int:
    """Bin closed-form runs (records ``alpha, beta, steps, batch, extra``: step i lasts
    ``alpha + beta i`` seconds, the last ``extra`` more) into ``counts`` as
    :func:`bin_steps`; add their seconds to ``total[0]``; return how many gaps."""
    cell = np.empty(1, np.float64)
    bits = cell.view(np.int64)
    top = len(counts) - 1
    seconds = 0.0
    gaps = 0
    for r in range(0, len(records), 5):
        alpha, beta = records[r], records[r + 1]
        steps, batch, extra = int(records[r + 2]), int(records[r + 3]), records[r + 4]
        for i in range(steps):
            d = alpha + beta * i
            if i == steps - 1:
                d += extra
            cell[0] = d
            k = (bits[0] >> shift) - base
            counts[0 if k < 0 else top if k > top else k] += batch
            seconds += batch * d
        gaps += batch * steps
    total[0] += seconds
    return gaps
