"""Candidates and victims: the candidate table and the two rules' choice of a victim.

The candidate table is the oracle's ``CandidateTable`` (``tests/marconi_oracle.py``:
recency, efficiency, held, node; swap-removed rows), kept by the policy's
``on_node_changed`` (:func:`changed`). ``REFERENCE`` rules (the oracle's
``ReferenceFlopAwareEviction``): every node with at most one child is a candidate,
pinned ones held (scored, never the victim); recency ``1 / (now - stamp)`` on the
logical clock; ties to the first in pre-order. ``TWIN`` rules (the oracle's
``FlopAwareEviction``): unpinned candidates only; recency is the last access on the
cache clock; ties to the older, then the first created.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel import scores, state, tree
from twin.policies.compiled.kernel.compiling import jit


@jit(inline="always")
def _table_set(st, v: int, r: float, f: float, held: bool) -> None:
    nd, sc, cr, cf, ch, cn = st[0], st[1], st[4], st[5], st[6], st[7]
    i = nd[state.SLOT, v]
    if i < 0:
        i = sc[state.S_NCAND]
        nd[state.SLOT, v] = i
        cn[i] = v
        ch[i] = False
        sc[state.S_NCAND] += 1
    cr[i], cf[i] = r, f
    sc[state.S_NHELD] += int(held) - int(ch[i])
    ch[i] = held


@jit(inline="always")
def table_drop(st, v: int) -> None:
    nd, sc, cr, cf, ch, cn = st[0], st[1], st[4], st[5], st[6], st[7]
    i = nd[state.SLOT, v]
    if i < 0:
        return
    last = sc[state.S_NCAND] - 1
    sc[state.S_NHELD] -= int(ch[i])
    if i != last:
        moved = cn[last]
        cn[i] = moved
        nd[state.SLOT, moved] = i
        cr[i], cf[i], ch[i] = cr[last], cf[last], ch[last]
    sc[state.S_NCAND] = last
    nd[state.SLOT, v] = -1


@jit(inline="always")
def changed(st, v: int) -> None:
    """The policy's ``on_node_changed``: a candidate gets its row, any other node none.

    A candidate (``PrefixCache.candidate``) is a node with no child, or one
    child and a state that frees bytes; the twin's rules also leave out pinned
    ones (``PrefixCache.evictable``).
    """
    nd, mc, mf = st[0], st[2], st[3]
    n = nd[state.NCH, v]
    candidate = v != 0 and (n == 0 or (n == 1 and nd[state.CKPT, v] != 0 and mc[state.M_CKB] > 0))
    if mc[state.M_RULES] == state.REFERENCE and candidate:
        eff = scores.reference_efficiency(nd[state.DEP, v], nd[state.LEN, v], mc)
        _table_set(st, v, float(nd[state.STAMP, v]), eff, nd[state.LOCK, v] > 0)
    elif mc[state.M_RULES] == state.TWIN and candidate and nd[state.LOCK, v] == 0:
        eff = scores.twin_efficiency(nd[state.DEP, v], nd[state.LEN, v], nd[state.CKPT, v], mc, mf)
        _table_set(st, v, float(nd[state.T, v]), eff, False)
    else:
        table_drop(st, v)


@jit(fastmath={"nnan", "ninf", "nsz"})
def _ranges(cr: np.ndarray, cf: np.ndarray, n: int) -> tuple[float, float, float, float]:
    """Least and greatest of ``cr[:n]`` and ``cf[:n]``: exact at any order, so the
    reductions may be vectorised (finite values, no signed zeros among them)."""
    rmin = rmax = cr[0]
    fmin = fmax = cf[0]
    for i in range(1, n):
        rmin = min(rmin, cr[i])
        rmax = max(rmax, cr[i])
        fmin = min(fmin, cf[i])
        fmax = max(fmax, cf[i])
    return rmin, rmax, fmin, fmax


# The two rules are written once, over a candidate table's columns, for both trees: the
# compiled one below and the tests' Python oracle on the radix tree (``tests/marconi_oracle.py``
# calls them on its ``CandidateTable``). What stays with each
# tree is its own order (the reference's ties go to the first node in pre-order).
@jit
def reference_victim_row(
    cr: np.ndarray,
    cf: np.ndarray,
    ch: np.ndarray,
    n: int,
    n_held: int,
    now: int,
    ticked: int,
    alpha: float,
    score: np.ndarray,
) -> tuple[int, bool, int]:
    """``evict_v2``'s victim among rows ``[:n]`` (stamp ``cr``, efficiency ``cf``, held
    ``ch``, ``n_held`` of them): ``(row, tied, now)``; row -1 if every row is held.

    ``now`` is the logical clock; ``ticked`` 0 or 1: has ``evict`` ticked it during this
    insert (it ticks once per insert that makes room, and again when a stamp reached
    it); -1: score at ``now`` as given. Every row is scored, the held ones too (they
    count in both normalisations); they get an infinite score in ``score[:n]`` and are
    never the row. Recency ``1 / (now - stamp)`` is monotone in the stamp (a correctly
    rounded division is), so its extremes are those of the stamps: one pass finds the
    ranges; the scores go into ``score`` by loops without branches (the same operations
    per element, so vectorising them changes no bit); a last pass takes the first
    minimum. ``tied``: another row after it scores the same (the caller's tree breaks
    the tie: the first in pre-order).
    """
    if n == n_held:
        return -1, False, now
    rmin, rmax, fmin, fmax = _ranges(cr, cf, n)
    if ticked == 0 or (ticked > 0 and rmax >= now):
        now += 1  # ``evict``'s tick (once per insert that makes room)
    lo, hi = 1.0 / (now - rmin), 1.0 / (now - rmax)
    if n > 1 and lo != hi:  # ``utils._normalize``: (x - lo) / (hi - lo), or ones
        span = hi - lo
        for i in range(n):
            score[i] = (1.0 / (now - cr[i]) - lo) / span
    else:
        score[:n] = 1.0
    if alpha != 0.0:  # IEEE addition commutes: ``alpha x eff + recency`` to the bit
        if n > 1 and fmin != fmax:
            fspan = fmax - fmin
            for i in range(n):
                score[i] += ((cf[i] - fmin) / fspan) * alpha
        else:
            score[:n] += alpha  # ones times alpha
    best, low, tied = -1, 0.0, False
    for i in range(n):
        if ch[i]:
            score[i] = np.inf
            continue
        x = score[i]
        if best < 0 or x < low:
            best, low, tied = i, x, False
        elif x == low:
            tied = True
    return best, tied, now


@jit
def twin_victim_row(
    cr: np.ndarray, cf: np.ndarray, cn: np.ndarray, nid: np.ndarray, n: int, alpha: float
) -> int:
    """``marconi-twin``'s victim among rows ``[:n]`` (last access ``cr``, efficiency
    ``cf``; row ``i``'s creation id ``nid[cn[i]]``), -1 if none: the least
    ``r_norm + alpha x f_norm``, an exact tie to the older, then the first created.
    Recency alone (``alpha`` 0, or all efficiencies equal) is not scaled: the oldest."""
    if n == 0:
        return -1
    rmin = rmax = cr[0]
    fmin = fmax = cf[0]
    for i in range(1, n):
        r, f = cr[i], cf[i]
        rmin, rmax = min(rmin, r), max(rmax, r)
        fmin, fmax = min(fmin, f), max(fmax, f)
    a = 1.0 / (rmax - rmin) if rmax > rmin else 0.0
    b = 0.0
    if alpha > 0:
        b = alpha / (fmax - fmin) if fmax > fmin else 0.0
    best, low, tied = -1, 0.0, False
    for i in range(n):
        x = cr[i] if b == 0.0 else (cr[i] - rmin) * a + (cf[i] - fmin) * b
        if best < 0 or x < low:
            best, low, tied = i, x, False
        elif x == low:
            tied = True
    if tied:  # an exact tie: the older, then the first created
        for i in range(best + 1, n):
            x = cr[i] if b == 0.0 else (cr[i] - rmin) * a + (cf[i] - fmin) * b
            if x != low:
                continue
            if cr[i] < cr[best] or (cr[i] == cr[best] and nid[cn[i]] < nid[cn[best]]):
                best = i
    return best


@jit
def _reference_victim(st) -> int:
    """``ReferenceFlopAwareEviction.choose_victim`` on this tree (-1 if none)."""
    nd, sc, mf, cn, score = st[0], st[1], st[3], st[7], st[11]
    n = sc[state.S_NCAND]
    best, tied, now = reference_victim_row(
        st[4],
        st[5],
        st[6],
        n,
        sc[state.S_NHELD],
        sc[state.S_NOW],
        sc[state.S_TICKED],
        mf[state.F_ALPHA],
        score,
    )
    if best < 0:
        return -1
    sc[state.S_NOW] = now
    sc[state.S_TICKED] = 1
    victim = cn[best]
    if tied:  # the first in pre-order among the minima (held rows score infinity)
        low = score[best]
        for i in range(best + 1, n):
            if score[i] == low and tree.preorder_before(nd, cn[i], victim):
                victim = cn[i]
    return victim


@jit
def _twin_victim(st) -> int:
    """``FlopAwareEviction.choose_victim`` on this tree (-1 if none)."""
    nd, sc, mf, cn = st[0], st[1], st[3], st[7]
    best = twin_victim_row(st[4], st[5], cn, nd[state.NID], sc[state.S_NCAND], mf[state.F_ALPHA])
    return -1 if best < 0 else cn[best]


@jit(inline="always")
def choose_victim(st) -> int:
    if st[2][state.M_RULES] == state.REFERENCE:
        return _reference_victim(st)
    return _twin_victim(st)
