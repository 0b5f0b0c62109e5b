"""The bytes an insert adds and how much of it fits
(``twin.cache.admission_cost.AdmissionCost``)."""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel import scores, state
from twin.policies.compiled.kernel.compiling import jit


@jit
def _missing(st, base: int, pos: np.ndarray, npos: int, covered: int) -> np.ndarray:
    """``AdmissionCost._missing_ckpts``: positions on the cached path whose node has no state
    (none on a Transformer: no states to place)."""
    nd = st[0]
    out = np.empty(npos, np.int64)
    m = 0
    if st[2][state.M_SSM] == 0:
        return out[:0]
    for j in range(npos):
        p = pos[j]
        if p > covered:
            break
        v = base
        while nd[state.DEP, v] - nd[state.LEN, v] >= p:
            v = nd[state.PAR, v]
        if not (nd[state.DEP, v] == p and nd[state.CKPT, v] != 0):
            out[m] = p
            m += 1
    return out[:m]


@jit
def _cost(mc: np.ndarray, pos: np.ndarray, npos: int, covered: int, n_missing: int) -> int:
    """``AdmissionCost._cost``: the new tokens' KV, their window tails (and at most one
    more tail per edge split), the states placed."""
    n_new = 0
    for j in range(npos):
        if pos[j] > covered:
            n_new += 1
    last = pos[npos - 1]
    kv = (last - covered) * (mc[state.M_KVPT] - mc[state.M_SWAKV]) if last > covered else 0
    if mc[state.M_SWAKV]:
        swa, prev = 0, covered
        if mc[state.M_SSM]:  # a chain node per position past the cached path
            for j in range(npos):
                if pos[j] > covered:
                    swa += scores.tail(mc, pos[j] - prev)
                    prev = pos[j]
        else:  # one node to the end
            swa += scores.tail(mc, last - covered)
        swa += (n_missing + 1) * scores.tail(mc, last)
        kv += swa * mc[state.M_SWAKV]
    return kv + (n_missing + n_new) * mc[state.M_CKB]


@jit
def _truncate(mc, pos, npos, covered, missing, free) -> int:
    """``AdmissionCost._truncate``: how many positions of ``pos`` fit in ``free``. On a
    Transformer (one position, ``pos[0]``) the tokens that fit: ``pos[0]`` is cut to them."""
    if mc[state.M_SSM] == 0:
        per = mc[state.M_KVPT]  # a bound: tails cost at most this
        split = (
            scores.tail(mc, pos[npos - 1]) * mc[state.M_SWAKV] if covered else 0
        )  # an edge split's tail
        end = covered + (max(free - split, 0) // per if per else 0)
        end = min(end, pos[npos - 1])
        if end <= 0:
            return 0
        pos[0] = end
        return 1
    kept = 0
    for j in range(npos):
        n_missing = 0
        for q in missing:
            if q <= pos[j]:
                n_missing += 1
        if _cost(mc, pos, j + 1, covered, n_missing) > free:
            break
        kept += 1
    return kept
