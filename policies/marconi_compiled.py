"""Marconi's reference replay compiled with numba: the hits of every alpha of a grid.

``marconi``'s alpha tuning and the ``oracle`` bound replay the same requests
once per alpha of a 21-point grid and keep only each replay's hits (a score).
This module runs that replay as compiled code over flat arrays: the same tree
operations in the same order as the Python path, so every hit is the same.
The Python path stays the one definition; this is its transliteration, and
``tests/test_marconi_compiled.py`` compares the two on random traces (ties,
truncated admissions, splits and folds) and the benchmark on the chat trace.

What it transliterates, rule by rule (each function names its source):

- :class:`twin.cache.requests.RequestCache.serve` (lookup, pin, admission,
  one insert, unpin);
- :class:`twin.cache.prefix_cache.PrefixCache` (``insert`` with its room
  making, truncation and tidying; ``evict``; splits and folds) on a model
  with SSM layers and no sliding-window layers;
- :class:`twin.cache.radix.RadixTree` (children in insertion order, which the
  tie-break reads; an edge replaced in place keeps its position);
- :func:`policies.base.judicious_admission` and ``marconi``'s insert refresh;
- :class:`policies.reference_score.ReferenceFlopAwareEviction` (clock, stamps,
  candidates, the min-max score and the pre-order tie-break).

A node's tokens are never copied: the request that created a node holds the
node's whole path at the same positions (the path above a node never changes
its tokens, only where it is cut), so a node is ``(base, depth, length)``, its
edge ``buf[base + depth - length : base + depth]`` of the trace's one token
buffer. Nodes are never reused (creation order), so a replay of ``R``
requests needs at most ``3R + 1`` of them (each insert adds at most one split
and two chain nodes).

Where it does not apply (another policy, a sliding-window or pure-Transformer
model, a start from a non-empty cache, declared prompt modules, counts past
exact float range), :func:`supported` says no and the caller replays in Python.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numba
import numpy as np

from twin.model import ModelSpec

# Node fields, rows of the int64 table ``nd`` (one column per node; node 0 is the root).
PAR, FIRST, LAST, NXT, PRV, NCH, BASE, DEP, LEN, CKPT, LOCK, STAMP, SLOT = range(13)
N_FIELDS = 13
# Scalars, entries of the int64 vector ``sc``.
S_NOW, S_TICKED, S_NEXT, S_KV, S_CKPTS, S_NCAND, S_NHELD, S_EVICTIONS = range(8)
# Model constants, entries of the int64 vector ``mc``.
M_CAP, M_KVPT, M_CKB, M_D, M_NSTATE, M_SSM, M_ATTN, M_MLP = range(8)

Range = tuple[bool, float, float]  # (scaled, lo, hi - lo) of a min-max normalisation
_EXACT = 2**53  # floats hold every integer below this: a division of two is then exact-rounded

_jit = numba.njit(cache=True, error_model="numpy", nogil=True)


# ----- the reference FLOP efficiency (policies.reference_score.ReferenceFlops) -----------
@_jit
def _attn(n: int, d: int) -> int:
    return 8 * n * d * d + 4 * n * n * d  # utils.get_attn_flops


@_jit
def _efficiency(depth: int, own: int, mc: np.ndarray) -> float:
    """``ReferenceFlops._efficiency``: int64 counts (checked below 2**53), one division."""
    d, parent = mc[M_D], depth - own
    mamba = 12 * own * d * d + 16 * own * d * mc[M_NSTATE] + 10 * own * d
    saved = (
        mc[M_SSM] * mamba
        + mc[M_ATTN] * (_attn(depth, d) - _attn(parent, d))
        + mc[M_MLP] * (16 * depth * d * d - _attn(parent, d))
    )
    held = mc[M_CKB] + mc[M_KVPT] * depth  # ckpt bytes are 0 on a model without SSM layers
    if held == 0:
        return 0.0
    return saved / held


# ----- the radix tree (twin.cache.radix.RadixTree) ----------------------------------------
@_jit
def _key(node: int, token: int) -> int:
    return node * 4294967296 + token  # tokens are checked non-negative int32


# The children's keys: open addressing over a power-of-two table (``kids[0]`` keys,
# ``kids[1]`` nodes), sized so that it is never more than half full.
_EMPTY, _GONE = -1, -2


@_jit
def _slot(kids: np.ndarray, key: int) -> int:
    """Where ``key`` is, or where it would go (the first free or deleted slot met)."""
    mask = kids.shape[1] - 1
    h = int((np.uint64(key) * np.uint64(11400714819323198485)) >> np.uint64(32)) & mask
    free = -1
    while True:
        k = kids[0, h]
        if k == key:
            return h
        if k == _EMPTY:
            return h if free < 0 else free
        if k == _GONE and free < 0:
            free = h
        h = (h + 1) & mask


@_jit
def _get(kids: np.ndarray, key: int) -> int:
    h = _slot(kids, key)
    return kids[1, h] if kids[0, h] == key else -1


@_jit
def _put(kids: np.ndarray, key: int, node: int) -> None:
    h = _slot(kids, key)
    kids[0, h], kids[1, h] = key, node


@_jit
def _delete(kids: np.ndarray, key: int) -> None:
    h = _slot(kids, key)
    if kids[0, h] == key:
        kids[0, h] = _GONE


@_jit
def _first_token(nd: np.ndarray, buf: np.ndarray, v: int) -> int:
    return buf[nd[BASE, v] + nd[DEP, v] - nd[LEN, v]]


@_jit
def _walk(nd: np.ndarray, kids: np.ndarray, buf: np.ndarray, s0: int, n: int, path: np.ndarray):
    """``RadixTree.match`` of ``buf[s0:s0 + n]``: (nodes on ``path``, length, partial or -1).

    ``path[:count]`` gets the root and every node whose whole edge matched, so
    that the match of any prefix is read off it (:func:`_prefix`): a request's
    lookup, refresh, speculative insertion and insert all match a prefix of its
    input + output in the same tree (nothing changes the tree's shape between
    them), so one walk serves the four.
    """
    node, pos, count = 0, 0, 1
    path[0] = 0
    while pos < n:
        child = _get(kids, _key(node, buf[s0 + pos]))
        if child < 0:
            return count, pos, -1
        m = nd[LEN, child]
        es = nd[BASE, child] + nd[DEP, child] - m
        lim = min(m, n - pos)
        k = 0
        while k < lim and buf[es + k] == buf[s0 + pos + k]:
            k += 1
        if k < m:
            return count, pos + k, child
        node, pos = child, pos + m
        path[count] = node
        count += 1
    return count, pos, -1


@_jit
def _prefix(nd: np.ndarray, path: np.ndarray, count: int, length: int, partial: int, n: int):
    """The match of the walked sequence's first ``n`` tokens: (node, length, partial or -1)."""
    j = count - 1
    while nd[DEP, path[j]] > n:
        j -= 1
    node = path[j]
    if nd[DEP, node] == n:
        return node, n, -1
    if j + 1 < count:  # the next whole node runs past ``n``
        return node, n, path[j + 1]
    return node, min(n, length), partial


@_jit
def _replace_sibling(nd: np.ndarray, old: int, new: int) -> None:
    """``parent.children[key] = new`` over ``old``: a dict keeps the key's position."""
    p, a, b = nd[PAR, old], nd[PRV, old], nd[NXT, old]
    nd[PRV, new], nd[NXT, new] = a, b
    if a >= 0:
        nd[NXT, a] = new
    else:
        nd[FIRST, p] = new
    if b >= 0:
        nd[PRV, b] = new
    else:
        nd[LAST, p] = new


@_jit
def _append_child(nd: np.ndarray, p: int, v: int) -> None:
    last = nd[LAST, p]
    nd[PRV, v], nd[NXT, v] = last, -1
    if last >= 0:
        nd[NXT, last] = v
    else:
        nd[FIRST, p] = v
    nd[LAST, p] = v
    nd[NCH, p] += 1
    nd[PAR, v] = p


@_jit
def _new_node(nd: np.ndarray, sc: np.ndarray, base: int, depth: int, length: int) -> int:
    v = sc[S_NEXT]
    sc[S_NEXT] += 1
    nd[:, v] = 0
    nd[FIRST, v] = nd[LAST, v] = nd[NXT, v] = nd[PRV, v] = -1
    nd[SLOT, v] = -1
    nd[BASE, v], nd[DEP, v], nd[LEN, v] = base, depth, length
    return v


# ----- the candidate table (policies.candidate_table.CandidateTable) ------------------------
@_jit
def _table_set(nd, sc, cr, cf, ch, cn, v, r, f, held) -> None:
    i = nd[SLOT, v]
    if i < 0:
        i = sc[S_NCAND]
        nd[SLOT, v] = i
        cn[i] = v
        ch[i] = False
        sc[S_NCAND] += 1
    cr[i], cf[i] = r, f
    sc[S_NHELD] += int(held) - int(ch[i])
    ch[i] = held


@_jit
def _table_drop(nd, sc, cr, cf, ch, cn, v) -> None:
    i = nd[SLOT, v]
    if i < 0:
        return
    last = sc[S_NCAND] - 1
    sc[S_NHELD] -= int(ch[i])
    if i != last:
        moved = cn[last]
        cn[i] = moved
        nd[SLOT, moved] = i
        cr[i], cf[i], ch[i] = cr[last], cf[last], ch[last]
    sc[S_NCAND] = last
    nd[SLOT, v] = -1


# ----- the policy's hooks (ReferenceFlopAwareEviction) ---------------------------------------
@_jit
def _changed(nd, sc, mc, cr, cf, ch, cn, v) -> None:
    """``on_node_changed``: a candidate (``PrefixCache.candidate``) gets its row, else none."""
    n = nd[NCH, v]
    if v != 0 and (n == 0 or (n == 1 and nd[CKPT, v] != 0 and mc[M_CKB] > 0)):
        eff = _efficiency(nd[DEP, v], nd[LEN, v], mc)
        _table_set(nd, sc, cr, cf, ch, cn, v, float(nd[STAMP, v]), eff, nd[LOCK, v] > 0)
    else:
        _table_drop(nd, sc, cr, cf, ch, cn, v)


@_jit
def _preorder_before(nd: np.ndarray, a: int, b: int) -> bool:
    """Is ``a`` before ``b`` in the tree's pre-order (``reference_score.preorder_key``)?"""
    da, db, x = 0, 0, a
    while x != 0:
        x = nd[PAR, x]
        da += 1
    x = b
    while x != 0:
        x = nd[PAR, x]
        db += 1
    while da > db:  # an ancestor comes before its descendants
        a = nd[PAR, a]
        da -= 1
        if a == b:
            return False
    while db > da:
        b = nd[PAR, b]
        db -= 1
        if a == b:
            return True
    while nd[PAR, a] != nd[PAR, b]:
        a, b = nd[PAR, a], nd[PAR, b]
    x = nd[NXT, a]
    while x >= 0:  # siblings in insertion order: is ``b`` after ``a``?
        if x == b:
            return True
        x = nd[NXT, x]
    return False


@_jit
def _score(r: float, f: float, now: int, rec: Range, eff: Range, alpha: float) -> float:
    """``alpha x eff + recency``, each min-max normalised (``utils._normalize``: ``(x - lo) /
    (hi - lo)``, or 1 when one value or all equal; ``rec``/``eff`` are ``(scaled, lo, span)``)."""
    x = 1.0
    if rec[0]:
        x = (1.0 / (now - r) - rec[1]) / rec[2]
    if alpha != 0.0:
        y = (f - eff[1]) / eff[2] if eff[0] else 1.0
        x += y * alpha  # IEEE addition commutes: the reference's sum to the bit
    return x


@_jit
def _choose_victim(nd, sc, alpha, cr, cf, ch, cn) -> int:
    """``choose_victim`` then ``victim_at`` (the first minimum in pre-order; -1 if none).

    ``victim_at`` normalises over every candidate, the held ones too. Recency
    ``1 / (now - stamp)`` is monotone in the stamp (a correctly rounded
    division is), so its extremes are those of the stamps: one pass finds the
    ranges, a second scores.
    """
    n = sc[S_NCAND]
    if n == sc[S_NHELD]:
        return -1
    rmin = rmax = cr[0]
    fmin = fmax = cf[0]
    for i in range(1, n):
        r, f = cr[i], cf[i]
        rmin, rmax = min(rmin, r), max(rmax, r)
        fmin, fmax = min(fmin, f), max(fmax, f)
    now = sc[S_NOW]
    if sc[S_TICKED] == 0 or rmax >= now:
        now += 1  # ``evict``'s tick (once per insert that makes room)
        sc[S_NOW] = now
        sc[S_TICKED] = 1
    lo, hi = 1.0 / (now - rmin), 1.0 / (now - rmax)
    rec = (n > 1 and lo != hi, lo, hi - lo)
    eff = (n > 1 and fmin != fmax, fmin, fmax - fmin)
    best, low, tied = -1, 0.0, False
    for i in range(n):
        if ch[i]:
            continue
        x = _score(cr[i], cf[i], now, rec, eff, alpha)
        if best < 0 or x < low:
            best, low, tied = i, x, False
        elif x == low:
            tied = True
    victim = cn[best]
    if tied:  # the first in pre-order among the minima
        for i in range(best + 1, n):
            if ch[i] or _score(cr[i], cf[i], now, rec, eff, alpha) != low:
                continue
            if _preorder_before(nd, cn[i], victim):
                victim = cn[i]
    return victim


# ----- the cache's mechanics (PrefixCache) ------------------------------------------------------
@_jit
def _used(sc: np.ndarray, mc: np.ndarray) -> int:
    return sc[S_KV] * mc[M_KVPT] + sc[S_CKPTS] * mc[M_CKB]


@_jit
def _remove_leaf(nd, kids, buf, sc, mc, cr, cf, ch, cn, v) -> None:
    """``PrefixCache._remove_leaf`` (and ``RadixTree.remove_leaf``)."""
    p, a, b = nd[PAR, v], nd[PRV, v], nd[NXT, v]
    if a >= 0:
        nd[NXT, a] = b
    else:
        nd[FIRST, p] = b
    if b >= 0:
        nd[PRV, b] = a
    else:
        nd[LAST, p] = a
    nd[NCH, p] -= 1
    _delete(kids, _key(p, _first_token(nd, buf, v)))
    sc[S_KV] -= nd[LEN, v]
    sc[S_CKPTS] -= nd[CKPT, v]
    _table_drop(nd, sc, cr, cf, ch, cn, v)  # on_node_removed
    nd[PAR, v] = -1
    if p != 0:
        _changed(nd, sc, mc, cr, cf, ch, cn, p)


@_jit
def _merge(nd, kids, buf, sc, mc, cr, cf, ch, cn, v) -> None:
    """``PrefixCache._merge``: fold one-child ``v`` into its child (``merge_into_child``)."""
    child = nd[FIRST, v]
    _delete(kids, _key(v, _first_token(nd, buf, child)))
    nd[LEN, child] += nd[LEN, v]  # the child's creator holds the longer edge too
    _replace_sibling(nd, v, child)
    nd[PAR, child] = nd[PAR, v]
    _put(kids, _key(nd[PAR, v], _first_token(nd, buf, child)), child)
    nd[FIRST, v] = nd[LAST, v] = -1
    nd[NCH, v] = 0
    sc[S_CKPTS] -= nd[CKPT, v]
    # on_node_removed(v, child): the child keeps the later stamp (_evict_intermediate_node)
    nd[STAMP, child] = max(nd[STAMP, child], nd[STAMP, v])
    _table_drop(nd, sc, cr, cf, ch, cn, v)
    nd[PAR, v] = -1
    _changed(nd, sc, mc, cr, cf, ch, cn, child)


@_jit
def _tidy(nd, kids, buf, sc, mc, cr, cf, ch, cn, v) -> None:
    """``PrefixCache._tidy``: drop state-less leaves, fold a state-less one-child node."""
    while v > 0 and nd[LOCK, v] == 0 and nd[CKPT, v] == 0:
        if nd[NCH, v] == 0:
            p = nd[PAR, v]
            _remove_leaf(nd, kids, buf, sc, mc, cr, cf, ch, cn, v)
            v = p
            continue
        if nd[NCH, v] == 1:
            _merge(nd, kids, buf, sc, mc, cr, cf, ch, cn, v)
        return


@_jit
def _evict_until(nd, kids, buf, sc, mc, alpha, cr, cf, ch, cn, need) -> bool:
    """``PrefixCache._evict_until`` with ``evict``: a leaf goes, a one-child node folds."""
    while mc[M_CAP] - _used(sc, mc) < need:
        v = _choose_victim(nd, sc, alpha, cr, cf, ch, cn)
        if v < 0:
            return False
        if nd[NCH, v] > 0:
            _merge(nd, kids, buf, sc, mc, cr, cf, ch, cn, v)
        else:
            p = nd[PAR, v]
            _remove_leaf(nd, kids, buf, sc, mc, cr, cf, ch, cn, v)
            _tidy(nd, kids, buf, sc, mc, cr, cf, ch, cn, p)
        sc[S_EVICTIONS] += 1
    return True


@_jit
def _pin(nd, sc, mc, cr, cf, ch, cn, v) -> None:
    nd[LOCK, v] += 1
    if nd[LOCK, v] == 1:
        _changed(nd, sc, mc, cr, cf, ch, cn, v)


@_jit
def _unpin(nd, kids, buf, sc, mc, cr, cf, ch, cn, v) -> None:
    nd[LOCK, v] -= 1
    if nd[LOCK, v] == 0 and nd[PAR, v] >= 0:
        _changed(nd, sc, mc, cr, cf, ch, cn, v)
        _tidy(nd, kids, buf, sc, mc, cr, cf, ch, cn, v)


@_jit
def _added(nd, sc, mc, cr, cf, ch, cn, v) -> None:
    """``on_node_added``: stamped now."""
    nd[STAMP, v] = sc[S_NOW]
    _changed(nd, sc, mc, cr, cf, ch, cn, v)


@_jit
def _ending_at(nd, kids, buf, sc, mc, cr, cf, ch, cn, below, p) -> int:
    """``PrefixCache._node_ending_at``: the node ending at depth ``p``, an edge split if needed."""
    v = below
    while nd[DEP, v] - nd[LEN, v] >= p:
        v = nd[PAR, v]
    if nd[DEP, v] == p:
        return v
    k = p - (nd[DEP, v] - nd[LEN, v])
    parent = nd[PAR, v]
    upper = _new_node(nd, sc, nd[BASE, v], p, k)  # RadixTree.split
    _replace_sibling(nd, v, upper)
    nd[PAR, upper] = parent
    _put(kids, _key(parent, _first_token(nd, buf, upper)), upper)
    nd[LEN, v] -= k
    nd[PAR, v] = upper
    nd[FIRST, upper] = nd[LAST, upper] = v
    nd[PRV, v] = nd[NXT, v] = -1
    nd[NCH, upper] = 1
    _put(kids, _key(upper, _first_token(nd, buf, v)), v)
    _added(nd, sc, mc, cr, cf, ch, cn, upper)
    _changed(nd, sc, mc, cr, cf, ch, cn, v)
    return upper


@_jit
def _missing(nd: np.ndarray, base: int, pos: np.ndarray, npos: int, covered: int) -> np.ndarray:
    """``PrefixCache._missing_ckpts``: positions on the cached path whose node has no state."""
    out = np.empty(npos, np.int64)
    m = 0
    for j in range(npos):
        p = pos[j]
        if p > covered:
            break
        v = base
        while nd[DEP, v] - nd[LEN, v] >= p:
            v = nd[PAR, v]
        if not (nd[DEP, v] == p and nd[CKPT, v] != 0):
            out[m] = p
            m += 1
    return out[:m]


@_jit
def _cost(mc: np.ndarray, pos: np.ndarray, npos: int, covered: int, n_missing: int) -> int:
    """``PrefixCache._cost`` without sliding-window layers."""
    n_new = 0
    for j in range(npos):
        if pos[j] > covered:
            n_new += 1
    last = pos[npos - 1]
    kv = (last - covered) * mc[M_KVPT] if last > covered else 0
    return kv + (n_missing + n_new) * mc[M_CKB]


@_jit
def _truncate(mc, pos, npos, covered, missing, free) -> int:
    """``PrefixCache._truncate`` (SSM models): how many positions of ``pos`` fit in ``free``."""
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


@_jit
def _insert(nd, kids, buf, sc, mc, alpha, cr, cf, ch, cn, s0, pos, npos, mnode, covered, part):
    """``PrefixCache.insert`` of ``buf[s0:s0 + pos[npos - 1]]`` with checkpoints ``pos[:npos]``
    (sorted, unique), whose match is ``(mnode, covered, part)``."""
    if npos == 0:
        return
    upto = pos[npos - 1]
    base = part if part >= 0 else mnode
    bound = mc[M_CAP] - covered * mc[M_KVPT]
    missing = _missing(nd, base, pos, npos, covered)
    need = _cost(mc, pos, npos, covered, len(missing))
    if need > bound:
        npos = _truncate(mc, pos, npos, covered, missing, max(bound, 0))
        if npos == 0:
            return
        upto = pos[npos - 1]
        missing = _missing(nd, base, pos, npos, covered)
        need = _cost(mc, pos, npos, covered, len(missing))
    pinned = False
    while need > mc[M_CAP] - _used(sc, mc):
        if not pinned and base != 0:
            _pin(nd, sc, mc, cr, cf, ch, cn, base)  # keep the attach point while making room
            pinned = True
        if not _evict_until(nd, kids, buf, sc, mc, alpha, cr, cf, ch, cn, need):
            missing = _missing(nd, base, pos, npos, covered)
            npos = _truncate(mc, pos, npos, covered, missing, mc[M_CAP] - _used(sc, mc))
            upto = pos[npos - 1] if npos else 0
            missing = missing[missing <= upto]
            break
        missing = _missing(nd, base, pos, npos, covered)
        need = _cost(mc, pos, npos, covered, len(missing))
    if npos:
        for p in missing:
            v = _ending_at(nd, kids, buf, sc, mc, cr, cf, ch, cn, base, p)
            nd[CKPT, v] = 1  # _set_ckpt
            sc[S_CKPTS] += 1
            _changed(nd, sc, mc, cr, cf, ch, cn, v)
        if upto > covered:
            attach = 0
            if covered:
                attach = _ending_at(nd, kids, buf, sc, mc, cr, cf, ch, cn, base, covered)
            _add_chain(nd, kids, buf, sc, mc, cr, cf, ch, cn, attach, s0, covered, pos, npos)
        else:
            v = _ending_at(nd, kids, buf, sc, mc, cr, cf, ch, cn, base, upto)
            _changed(nd, sc, mc, cr, cf, ch, cn, v)  # touch
    if pinned:
        _unpin(nd, kids, buf, sc, mc, cr, cf, ch, cn, base)


@_jit
def _add_chain(nd, kids, buf, sc, mc, cr, cf, ch, cn, attach, s0, start, pos, npos) -> None:
    """``PrefixCache._add_chain``: nodes cut at the positions past ``start``, all with states."""
    chain = np.empty(npos, np.int64)
    m = 0
    parent, prev = attach, start
    for j in range(npos):
        end = pos[j]
        if end <= start:
            continue
        v = _new_node(nd, sc, s0, end, end - prev)
        _append_child(nd, parent, v)
        _put(kids, _key(parent, buf[s0 + prev]), v)
        nd[CKPT, v] = 1
        sc[S_CKPTS] += 1
        chain[m] = v
        m += 1
        parent, prev = v, end
    sc[S_KV] += prev - start
    for j in range(m):  # hooks once the chain is whole
        _added(nd, sc, mc, cr, cf, ch, cn, chain[j])
    if attach != 0:
        _changed(nd, sc, mc, cr, cf, ch, cn, attach)


# ----- one request (RequestCache.serve with marconi's admission) ------------------------------
@_jit
def _serve(nd, kids, buf, sc, mc, alpha, cr, cf, ch, cn, s0, plen, flen, pos, path) -> int:
    count, length, partial = _walk(nd, kids, buf, s0, flen, path)
    sc[S_NOW] += 1  # on_request: the lookup's tick
    node, _, _ = _prefix(nd, path, count, length, partial, plen)
    while node != 0 and nd[CKPT, node] == 0:  # lookup: the deepest state on the path
        node = nd[PAR, node]
    hit = 0
    if node != 0:
        hit = nd[DEP, node]
        nd[STAMP, node] = sc[S_NOW]  # on_hit, then touch
        _changed(nd, sc, mc, cr, cf, ch, cn, node)
        _pin(nd, sc, mc, cr, cf, ch, cn, node)
    # marconi's admit: the insert's refresh (two ticks; the deepest whole node of the full)
    sc[S_NOW] += 2
    sc[S_TICKED] = 0
    whole = path[count - 1]
    if whole != 0:
        nd[STAMP, whole] = sc[S_NOW]
        _changed(nd, sc, mc, cr, cf, ch, cn, whole)
    # judicious admission: speculative insertion of the prompt (PrefixCache.speculative_insert)
    mnode, p, part = _prefix(nd, path, count, length, partial, plen)
    npos = 0
    if p > 0 and (part >= 0 or (nd[CKPT, mnode] == 0 and (p == plen or nd[NCH, mnode] > 0))):
        pos[0] = p
        npos = 1
    if npos == 0 or pos[0] != flen:  # sorted and unique, as ``insert`` makes them
        pos[npos] = flen
        npos += 1
    # The insert of the whole input + output: the walk's own match.
    whole_match = (path[count - 1], length, partial)
    _insert(nd, kids, buf, sc, mc, alpha, cr, cf, ch, cn, s0, pos, npos, *whole_match)
    if node != 0:
        _unpin(nd, kids, buf, sc, mc, cr, cf, ch, cn, node)
    return hit


@_jit
def _replay(buf, starts, plens, flens, mc, alpha, hits) -> np.ndarray:
    """Serve every request from an empty cache at ``alpha``; fill ``hits``; return the counters."""
    r = len(starts)
    size = 3 * r + 2
    nd = np.zeros((N_FIELDS, size), np.int64)
    nd[FIRST, 0] = nd[LAST, 0] = nd[NXT, 0] = nd[PRV, 0] = nd[PAR, 0] = nd[SLOT, 0] = -1
    sc = np.zeros(8, np.int64)
    sc[S_NEXT] = 1
    cr = np.zeros(size)
    cf = np.zeros(size)
    ch = np.zeros(size, np.bool_)
    cn = np.zeros(size, np.int64)
    table = 1
    while table < 8 * size:  # at most two keys per node ever made: never half full
        table *= 2
    kids = np.full((2, table), _EMPTY, np.int64)
    pos = np.zeros(2, np.int64)
    path = np.zeros(size, np.int64)
    for i in range(r):
        s0, plen, flen = starts[i], plens[i], flens[i]
        hits[i] = _serve(nd, kids, buf, sc, mc, alpha, cr, cf, ch, cn, s0, plen, flen, pos, path)
    live = 0
    for v in range(1, sc[S_NEXT]):
        if nd[PAR, v] >= 0:
            live += 1
    return np.array([sc[S_EVICTIONS], sc[S_KV], sc[S_CKPTS], live], np.int64)


# ----- the Python side ----------------------------------------------------------------------
class CompiledTrace:
    """Requests laid out for :func:`grid_hits`: one token buffer, offsets and lengths."""

    def __init__(self, requests: Sequence[tuple[np.ndarray, int]]) -> None:
        fulls = [np.asarray(full, np.int32) for full, *_ in requests]
        self.flens = np.array([len(f) for f in fulls], np.int64)
        self.plens = np.array([int(req[1]) for req in requests], np.int64)
        self.starts = np.zeros(len(fulls), np.int64)
        if len(fulls) > 1:
            np.cumsum(self.flens[:-1], out=self.starts[1:])
        self.buf = np.concatenate(fulls) if fulls else np.zeros(0, np.int32)
        self.max_depth = int(self.flens.max()) if len(fulls) else 0


def model_constants(model: ModelSpec, capacity: int) -> np.ndarray:
    """The int64 vector of ``capacity`` and the model's byte and FLOP constants."""
    return np.array(
        [
            capacity,
            model.kv_bytes_per_token,
            model.ssm_checkpoint_bytes if model.n_ssm_layers else 0,
            model.d_model,
            model.ssm_d_state,
            model.n_ssm_layers,
            model.n_attention_layers,
            model.n_mlp_layers + model.n_moe_layers,
        ],
        np.int64,
    )


def supported(model: ModelSpec, policy_cls: type, requests: Sequence[Any], empty: bool) -> bool:
    """Does the compiled replay give exactly the Python path's hits here?

    ``policy_cls`` must run ``marconi``'s rules unchanged (its class or
    ``oracle``), from an empty cache (``empty``), on a model with SSM layers
    and states that cost bytes, without sliding-window layers, on requests
    without declared modules, with token ids that fit the children's keys, and
    with every FLOP and byte count below 2**53 (so that each efficiency is the
    same correctly rounded division as Python's).
    """
    from policies.marconi import MarconiPolicy
    from policies.oracle import OraclePolicy

    if policy_cls not in (MarconiPolicy, OraclePolicy) or not empty:
        return False
    if model.n_ssm_layers == 0 or model.ssm_checkpoint_bytes <= 0:
        return False
    if model.sliding_window is not None or model.kv_bytes_per_token <= 0:
        return False
    if any(len(req) > 2 and req[2] is not None for req in requests):
        return False
    depth = 0
    for full, *_ in requests:
        if len(full):
            lo, hi = int(np.min(full)), int(np.max(full))
            if lo < 0 or hi >= 2**31:
                return False
        depth = max(depth, len(full))
    d = model.d_model
    attn = 8 * depth * d * d + 4 * depth * depth * d
    mamba = 12 * depth * d * d + 16 * depth * d * model.ssm_d_state + 10 * depth * d
    mlp = max(16 * depth * d * d, attn)
    layers = model.n_mlp_layers + model.n_moe_layers
    saved = model.n_ssm_layers * mamba + model.n_attention_layers * attn + layers * mlp
    held = model.ssm_checkpoint_bytes + model.kv_bytes_per_token * depth
    return saved < _EXACT and held < _EXACT and 3 * len(requests) + 2 < 2**31


def grid_hits(
    model: ModelSpec, capacity: int, requests: Sequence[Any], grid: Sequence[float]
) -> list[list[int]]:
    """Each alpha's hit tokens per request, replayed from an empty ``capacity``-byte cache.

    Only where :func:`supported` says yes (:func:`compiled_grid_hits` checks).
    """
    trace = CompiledTrace(requests)
    mc = model_constants(model, int(capacity))
    out = []
    for alpha in grid:
        hits = np.zeros(len(trace.starts), np.int64)
        _replay(trace.buf, trace.starts, trace.plens, trace.flens, mc, float(alpha), hits)
        out.append(hits.tolist())  # Python ints: the scores are exact integer sums
    return out


def compiled_grid_hits(
    model: ModelSpec,
    capacity: int,
    requests: Sequence[Any],
    grid: Sequence[float],
    policy_cls: type,
    empty: bool = True,
) -> list[list[int]] | None:
    """:func:`grid_hits` where :func:`supported`, else ``None`` (replay in Python).

    ``TWIN_COMPILED_REPLAY=0`` in the environment turns the compiled path off
    (to time or debug the Python one; the results are the same).
    """
    if os.environ.get("TWIN_COMPILED_REPLAY", "1") == "0":
        return None
    if not supported(model, policy_cls, requests, empty):
        return None
    return grid_hits(model, capacity, requests, grid)


def replay_counters(
    model: ModelSpec, capacity: int, requests: Sequence[Any], alpha: float
) -> tuple[np.ndarray, dict[str, int]]:
    """One alpha's hits and the cache's counters at the end (tests)."""
    trace = CompiledTrace(requests)
    hits = np.zeros(len(trace.starts), np.int64)
    c = _replay(
        trace.buf,
        trace.starts,
        trace.plens,
        trace.flens,
        model_constants(model, int(capacity)),
        float(alpha),
        hits,
    )
    names = ("evictions", "kv_tokens", "n_ckpts", "num_nodes")
    return hits, {k: int(v) for k, v in zip(names, c, strict=True)}
