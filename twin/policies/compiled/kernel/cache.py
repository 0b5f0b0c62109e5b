"""The cache (``twin.cache.prefix_cache.PrefixCache``): its bytes (full-attention KV,
sliding-window tails, states), eviction, insert and lookup.

``insert`` with its room making, truncation and tidying, ``evict`` (a leaf goes, a
one-child node folds; each victim logged for a write-back hook where the caller set
one, ``mc[M_HOOK]``), the peaks, a match's usable hit and the hit's hooks.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel import admission_cost, buffer, edits, state, victims
from twin.policies.compiled.kernel.compiling import jit


@jit(inline="always")
def _used(st) -> int:
    sc, mc = st[1], st[2]
    return _kv_bytes(sc, mc) + sc[state.S_CKPTS] * mc[state.M_CKB]


@jit(inline="always")
def _kv_bytes(sc: np.ndarray, mc: np.ndarray) -> int:
    """``PrefixCache.kv_bytes``: every token's full-attention KV, every node's window tail."""
    return (
        sc[state.S_KV] * (mc[state.M_KVPT] - mc[state.M_SWAKV])
        + sc[state.S_SWA] * mc[state.M_SWAKV]
    )


@jit
def _hand(st, v: int) -> None:
    """``PrefixCache._tell_evict``: ``v``'s path from the root (its ancestors' edges and
    its own) and whether its state goes with it (always, on a Transformer), logged for
    the caller's write-back hook (called before ``v`` goes). The victims of one call are
    distinct nodes there at its start (nothing is made before an insert's evictions), so
    their paths fit in the sum of every node's depth then (``S_DEPTHS``), which the caller
    gave ``handed``; and their count in ``ends``, a column per node id."""
    nd, sc, buf, handed, ends = st[0], st[1], st[9], st[14], st[15]
    at = sc[state.S_HANDED_TOKENS]
    u = v
    while u != 0:
        n, d = nd[state.LEN, u], nd[state.DEP, u]
        end = nd[state.BASE, u] + d
        handed[at + d - n : at + d] = buf[end - n : end]
        u = nd[state.PAR, u]
    i = sc[state.S_HANDED]
    ends[0, i] = at + nd[state.DEP, v]
    ends[1, i] = nd[state.CKPT, v] != 0 or st[2][state.M_SSM] == 0
    sc[state.S_HANDED] = i + 1
    sc[state.S_HANDED_TOKENS] = at + nd[state.DEP, v]


@jit
def _evict_until(st, need: int) -> bool:
    """``base.evict_for`` with ``PrefixCache.evict``: a leaf goes, a one-child node folds."""
    nd, sc, mc = st[0], st[1], st[2]
    while mc[state.M_CAP] - _used(st) < need:
        sc[state.S_CHOSE] += 1
        v = victims.choose_victim(st)
        if v < 0:
            return False
        if not mc[state.M_LIVE]:
            st[10][sc[state.S_EVICTIONS]] = nd[
                state.NID, v
            ]  # the victims, in order (tests compare them)
        if mc[state.M_HOOK]:
            _hand(st, v)
        if sc[state.S_FIRST_EVICTION] < 0:
            sc[state.S_FIRST_EVICTION] = sc[state.S_CLOCK]
        if nd[state.NCH, v] > 0:
            edits._merge(st, v)
        else:
            p = nd[state.PAR, v]
            edits._remove_leaf(st, v)
            edits._tidy(st, p)
        sc[state.S_EVICTIONS] += 1
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
    if mc[state.M_SSM] == 0:  # Transformers: no states to place, only the end matters
        pos[0] = upto
        npos = 1
    base = part if part >= 0 else mnode
    bound = mc[state.M_CAP] - covered * (mc[state.M_KVPT] - mc[state.M_SWAKV])
    missing = admission_cost._missing(st, base, pos, npos, covered)
    need = admission_cost._cost(mc, pos, npos, covered, len(missing))
    if need > bound:
        npos = admission_cost._truncate(mc, pos, npos, covered, missing, max(bound, 0))
        if npos == 0:
            return 0
        upto = pos[npos - 1]
        missing = admission_cost._missing(st, base, pos, npos, covered)
        need = admission_cost._cost(mc, pos, npos, covered, len(missing))
    pinned = False
    while need > mc[state.M_CAP] - _used(st):
        if not pinned and base != 0:
            edits._pin(st, base)  # keep the attach point while making room
            pinned = True
        if not _evict_until(st, need):
            missing = admission_cost._missing(st, base, pos, npos, covered)
            npos = admission_cost._truncate(
                mc, pos, npos, covered, missing, mc[state.M_CAP] - _used(st)
            )
            upto = pos[npos - 1] if npos else 0
            missing = missing[missing <= upto]
            break
        missing = admission_cost._missing(st, base, pos, npos, covered)
        need = admission_cost._cost(mc, pos, npos, covered, len(missing))
    added = 0
    if npos:
        for p in missing:
            v = edits._ending_at(st, base, p)
            nd[state.CKPT, v] = 1  # _set_ckpt
            nd[state.T, v] = sc[state.S_CLOCK]
            sc[state.S_CKPTS] += 1
            sc[state.S_ADMITTED] += 1
            victims.changed(st, v)
        if upto > covered:
            attach = edits._ending_at(st, base, covered) if covered else 0
            start = s0
            if mc[state.M_LIVE]:  # the new tokens are copied once, the chain's edges cut from them
                start = buffer._write(st, q, s0 + covered, upto - covered) - covered
            edits._add_chain(st, attach, start, covered, pos, npos)
            added = upto - covered
        elif mc[state.M_SSM]:
            edits._touch(st, edits._ending_at(st, base, upto))
        else:
            edits._touch(st, base)
    if pinned:
        edits._unpin(st, base)
    _note_peaks(st)
    return added


@jit(inline="always")
def _note_peaks(st) -> None:
    """``TokenStateBytes.note_peaks``."""
    sc, mc = st[1], st[2]
    kv, ssm = _kv_bytes(sc, mc), sc[state.S_CKPTS] * mc[state.M_CKB]
    sc[state.S_PEAK] = max(sc[state.S_PEAK], kv + ssm)
    sc[state.S_PEAK_KV] = max(sc[state.S_PEAK_KV], kv)
    sc[state.S_PEAK_SSM] = max(sc[state.S_PEAK_SSM], ssm)


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
        while node != 0 and nd[state.CKPT, node] == 0:
            node = nd[state.PAR, node]
        return node, nd[state.DEP, node] if node != 0 else 0
    if length == 0:
        return 0, 0
    if partial >= 0:
        n = nd[state.LEN, partial]
        start = nd[state.DEP, partial] - n
        if not (length - start == n or window == 0 or n <= window):
            return (0, 0) if node == 0 else (node, start)
        return partial, length
    return node, length


@jit(inline="always")
def _hit(st, node: int) -> None:
    """``PrefixCache.lookup``'s hit on ``node``: a state's first hit counted, the policy's
    ``on_hit`` (the reference stamps it on its logical clock; both touch it)."""
    nd, sc, mc = st[0], st[1], st[2]
    if mc[state.M_SSM] > 0 and nd[state.CKHIT, node] == 0:
        nd[state.CKHIT, node] = 1
        sc[state.S_CKHIT] += 1
    if mc[state.M_RULES] == state.REFERENCE:
        nd[state.STAMP, node] = sc[state.S_NOW]
    edits._touch(st, node)
