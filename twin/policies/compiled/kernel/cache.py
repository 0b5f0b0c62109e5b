"""The cache (``twin.cache.prefix_cache.PrefixCache``): its bytes (full-attention KV,
sliding-window tails, states), eviction, insert and lookup.

``insert`` with its room making, truncation and tidying, ``evict`` (a leaf goes, a
one-child node folds; each victim logged for a write-back hook where the caller set
one, ``mc[M_HOOK]``), the peaks, a match's usable hit and the hit's hooks.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel.admission_cost import _cost, _missing, _truncate
from twin.policies.compiled.kernel.buffer import _write
from twin.policies.compiled.kernel.compiling import jit
from twin.policies.compiled.kernel.edits import (
    _add_chain,
    _ending_at,
    _merge,
    _pin,
    _remove_leaf,
    _tidy,
    _touch,
    _unpin,
)
from twin.policies.compiled.kernel.state import (
    BASE,
    CKHIT,
    CKPT,
    DEP,
    LEN,
    M_CAP,
    M_CKB,
    M_HOOK,
    M_KVPT,
    M_LIVE,
    M_RULES,
    M_SSM,
    M_SWAKV,
    NCH,
    NID,
    PAR,
    REFERENCE,
    S_ADMITTED,
    S_CHOSE,
    S_CKHIT,
    S_CKPTS,
    S_CLOCK,
    S_EVICTIONS,
    S_FIRST_EVICTION,
    S_HANDED,
    S_HANDED_TOKENS,
    S_KV,
    S_NOW,
    S_PEAK,
    S_PEAK_KV,
    S_PEAK_SSM,
    S_SWA,
    STAMP,
    T,
)
from twin.policies.compiled.kernel.victims import changed, choose_victim


@jit(inline="always")
def _used(st) -> int:
    sc, mc = st[1], st[2]
    return _kv_bytes(sc, mc) + sc[S_CKPTS] * mc[M_CKB]


@jit(inline="always")
def _kv_bytes(sc: np.ndarray, mc: np.ndarray) -> int:
    """``PrefixCache.kv_bytes``: every token's full-attention KV, every node's window tail."""
    return sc[S_KV] * (mc[M_KVPT] - mc[M_SWAKV]) + sc[S_SWA] * mc[M_SWAKV]


@jit
def _hand(st, v: int) -> None:
    """``PrefixCache._tell_evict``: ``v``'s path from the root (its ancestors' edges and
    its own) and whether its state goes with it (always, on a Transformer), logged for
    the caller's write-back hook (called before ``v`` goes). The victims of one call are
    distinct nodes there at its start (nothing is made before an insert's evictions), so
    their paths fit in the sum of every node's depth then (``S_DEPTHS``), which the caller
    gave ``handed``; and their count in ``ends``, a column per node id."""
    nd, sc, buf, handed, ends = st[0], st[1], st[9], st[14], st[15]
    at = sc[S_HANDED_TOKENS]
    u = v
    while u != 0:
        n, d = nd[LEN, u], nd[DEP, u]
        end = nd[BASE, u] + d
        handed[at + d - n : at + d] = buf[end - n : end]
        u = nd[PAR, u]
    i = sc[S_HANDED]
    ends[0, i] = at + nd[DEP, v]
    ends[1, i] = nd[CKPT, v] != 0 or st[2][M_SSM] == 0
    sc[S_HANDED] = i + 1
    sc[S_HANDED_TOKENS] = at + nd[DEP, v]


@jit
def _evict_until(st, need: int) -> bool:
    """``base.evict_for`` with ``PrefixCache.evict``: a leaf goes, a one-child node folds."""
    nd, sc, mc = st[0], st[1], st[2]
    while mc[M_CAP] - _used(st) < need:
        sc[S_CHOSE] += 1
        v = choose_victim(st)
        if v < 0:
            return False
        if not mc[M_LIVE]:
            st[10][sc[S_EVICTIONS]] = nd[NID, v]  # the victims, in order (tests compare them)
        if mc[M_HOOK]:
            _hand(st, v)
        if sc[S_FIRST_EVICTION] < 0:
            sc[S_FIRST_EVICTION] = sc[S_CLOCK]
        if nd[NCH, v] > 0:
            _merge(st, v)
        else:
            p = nd[PAR, v]
            _remove_leaf(st, v)
            _tidy(st, p)
        sc[S_EVICTIONS] += 1
    return True


@jit
def _insert(
    st, q: np.ndarray, s0: int, pos: np.ndarray, npos: int, mnode: int, covered: int, part: int
) -> int:
    """``PrefixCache.insert`` of ``q[s0:s0 + pos[npos - 1]]`` with checkpoints ``pos[:npos]``
    (sorted, unique), whose match is ``(mnode, covered, part)``; the tokens newly cached."""
    nd, sc, mc = st[0], st[1], st[2]
    if npos == 0:
        return 0
    upto = pos[npos - 1]
    if mc[M_SSM] == 0:  # Transformers: no states to place, only the end matters
        pos[0] = upto
        npos = 1
    base = part if part >= 0 else mnode
    bound = mc[M_CAP] - covered * (mc[M_KVPT] - mc[M_SWAKV])
    missing = _missing(st, base, pos, npos, covered)
    need = _cost(mc, pos, npos, covered, len(missing))
    if need > bound:
        npos = _truncate(mc, pos, npos, covered, missing, max(bound, 0))
        if npos == 0:
            return 0
        upto = pos[npos - 1]
        missing = _missing(st, base, pos, npos, covered)
        need = _cost(mc, pos, npos, covered, len(missing))
    pinned = False
    while need > mc[M_CAP] - _used(st):
        if not pinned and base != 0:
            _pin(st, base)  # keep the attach point while making room
            pinned = True
        if not _evict_until(st, need):
            missing = _missing(st, base, pos, npos, covered)
            npos = _truncate(mc, pos, npos, covered, missing, mc[M_CAP] - _used(st))
            upto = pos[npos - 1] if npos else 0
            missing = missing[missing <= upto]
            break
        missing = _missing(st, base, pos, npos, covered)
        need = _cost(mc, pos, npos, covered, len(missing))
    added = 0
    if npos:
        for p in missing:
            v = _ending_at(st, base, p)
            nd[CKPT, v] = 1  # _set_ckpt
            nd[T, v] = sc[S_CLOCK]
            sc[S_CKPTS] += 1
            sc[S_ADMITTED] += 1
            changed(st, v)
        if upto > covered:
            attach = _ending_at(st, base, covered) if covered else 0
            start = s0
            if mc[M_LIVE]:  # the new tokens are copied once, the chain's edges cut from them
                start = _write(st, q, s0 + covered, upto - covered) - covered
            _add_chain(st, attach, start, covered, pos, npos)
            added = upto - covered
        elif mc[M_SSM]:
            _touch(st, _ending_at(st, base, upto))
        else:
            _touch(st, base)
    if pinned:
        _unpin(st, base)
    _note_peaks(st)
    return added


@jit(inline="always")
def _note_peaks(st) -> None:
    """``TokenStateBytes.note_peaks``."""
    sc, mc = st[1], st[2]
    kv, ssm = _kv_bytes(sc, mc), sc[S_CKPTS] * mc[M_CKB]
    sc[S_PEAK] = max(sc[S_PEAK], kv + ssm)
    sc[S_PEAK_KV] = max(sc[S_PEAK_KV], kv)
    sc[S_PEAK_SSM] = max(sc[S_PEAK_SSM], ssm)


@jit
def _usable(
    nd: np.ndarray, ssm: bool, window: int, node: int, length: int, partial: int
) -> tuple[int, int]:
    """``PrefixCache._usable`` of a match ``(node, length, partial)``: (the node a hit resumes
    from, 0 if none; the hit's tokens). With SSM layers the deepest node with a state at or
    above ``node``; on a Transformer every matched token (a hit may end inside ``partial``,
    unless that node is longer than the sliding ``window``, whose KV there was dropped: the
    hit then resumes at its start, ``KindBytes.hit_inside_ok``)."""
    if ssm:
        while node != 0 and nd[CKPT, node] == 0:
            node = nd[PAR, node]
        return node, nd[DEP, node] if node != 0 else 0
    if length == 0:
        return 0, 0
    if partial >= 0:
        n = nd[LEN, partial]
        start = nd[DEP, partial] - n
        if not (length - start == n or window == 0 or n <= window):
            return (0, 0) if node == 0 else (node, start)
        return partial, length
    return node, length


@jit(inline="always")
def _hit(st, node: int) -> None:
    """``PrefixCache.lookup``'s hit on ``node``: a state's first hit counted, the policy's
    ``on_hit`` (the reference stamps it on its logical clock; both touch it)."""
    nd, sc, mc = st[0], st[1], st[2]
    if mc[M_SSM] > 0 and nd[CKHIT, node] == 0:
        nd[CKHIT, node] = 1
        sc[S_CKHIT] += 1
    if mc[M_RULES] == REFERENCE:
        nd[STAMP, node] = sc[S_NOW]
    _touch(st, node)
