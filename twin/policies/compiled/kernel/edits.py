"""The cache's edits of its tree (``twin.cache.tree_edits.TreeEdits``) and pins.

A node made (``RadixTree``'s next creation id; a live cache reuses the ids of nodes
gone), a leaf removed, a one-child node folded into its child, the tidying after
them (models with SSM layers), an edge split where a node must end, a chain of new
nodes, a pin and an unpin; each updates the cache's counts and tells the policy
(``victims.changed``) as the Python cache's hooks do.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel.buffer import _join_edges
from twin.policies.compiled.kernel.compiling import jit
from twin.policies.compiled.kernel.scores import tail
from twin.policies.compiled.kernel.state import (
    BASE,
    CKPT,
    DEP,
    FIRST,
    LAST,
    LEN,
    LOCK,
    M_LIVE,
    M_SSM,
    NCH,
    NID,
    NXT,
    PAR,
    PRV,
    S_ADMITTED,
    S_CKPTS,
    S_CLOCK,
    S_DEPTHS,
    S_FREE,
    S_GONE,
    S_KV,
    S_NEXT,
    S_NID,
    S_NOW,
    S_SWA,
    STAMP,
    T,
)
from twin.policies.compiled.kernel.tree import (
    append_child,
    delete,
    first_token,
    key,
    new_node,
    put,
    rehash,
    replace_sibling,
    unlink_child,
)
from twin.policies.compiled.kernel.victims import changed, table_drop


@jit(inline="always")
def _make_node(st, base: int, depth: int, length: int) -> int:
    """A new node (``RadixTree``: the next creation id)."""
    nd, sc = st[0], st[1]
    if sc[S_FREE] > 0:  # a live cache reuses the ids of nodes gone (section 4)
        sc[S_FREE] -= 1
        v = new_node(nd, st[13][sc[S_FREE]], base, depth, length)
    else:
        v = new_node(nd, sc[S_NEXT], base, depth, length)
        sc[S_NEXT] += 1
    nd[NID, v] = sc[S_NID]
    sc[S_NID] += 1
    if st[2][M_LIVE]:
        sc[S_DEPTHS] += depth
    return v


@jit(inline="always")
def _added(st, v: int) -> None:
    """``on_node_added``: the reference stamps it now (the twin's rules only hear of it)."""
    st[0][STAMP, v] = st[1][S_NOW]
    changed(st, v)


@jit(inline="always")
def _touch(st, v: int) -> None:
    """``PrefixCache.touch``: accessed now."""
    st[0][T, v] = st[1][S_CLOCK]
    changed(st, v)


@jit(inline="always")
def _gone(st, v: int) -> None:
    """``v`` left the tree; a live cache reuses its id and clears deleted keys now and then."""
    st[0][PAR, v] = -1
    sc = st[1]
    if st[2][M_LIVE]:
        sc[S_DEPTHS] -= st[0][DEP, v]
        st[13][sc[S_FREE]] = v
        sc[S_FREE] += 1
        kids = st[8]
        if 4 * sc[S_GONE] > kids.shape[0]:
            rehash(kids, kids.copy())
            sc[S_GONE] = 0


@jit
def _remove_leaf(st, v: int) -> None:
    """``TreeEdits._remove_leaf`` (and ``RadixTree.remove_leaf``)."""
    nd, sc, kids, buf = st[0], st[1], st[8], st[9]
    p = nd[PAR, v]
    unlink_child(nd, v)
    sc[S_GONE] += delete(kids, key(p, first_token(nd, buf, v)))
    sc[S_KV] -= nd[LEN, v]
    sc[S_SWA] -= tail(st[2], nd[LEN, v])
    sc[S_CKPTS] -= nd[CKPT, v]
    table_drop(st, v)  # on_node_removed
    _gone(st, v)
    if p != 0:
        changed(st, p)


@jit
def _merge(st, v: int) -> None:
    """``TreeEdits._merge``: fold one-child ``v`` into its child (``merge_into_child``)."""
    nd, sc, kids, buf = st[0], st[1], st[8], st[9]
    child = nd[FIRST, v]
    sc[S_GONE] += delete(kids, key(v, first_token(nd, buf, child)))
    if st[2][M_LIVE]:
        _join_edges(st, v, child)
    upper, lower = nd[LEN, v], nd[LEN, child]
    sc[S_SWA] += tail(st[2], upper + lower) - tail(st[2], upper) - tail(st[2], lower)
    nd[LEN, child] += nd[LEN, v]  # the child's creator holds the longer edge too
    replace_sibling(nd, v, child)
    nd[PAR, child] = nd[PAR, v]
    put(kids, key(nd[PAR, v], first_token(nd, buf, child)), child)
    nd[FIRST, v] = nd[LAST, v] = -1
    nd[NCH, v] = 0
    sc[S_CKPTS] -= nd[CKPT, v]
    # on_node_removed(v, child): the reference's child keeps the later stamp
    # (``_evict_intermediate_node``); the twin's keeps its own last access.
    nd[STAMP, child] = max(nd[STAMP, child], nd[STAMP, v])
    table_drop(st, v)
    _gone(st, v)
    changed(st, child)


@jit
def _tidy(st, v: int) -> None:
    """``TreeEdits._tidy``: drop state-less leaves, fold a state-less one-child node (models
    with SSM layers: a Transformer's nodes never hold a state, and nothing is tidied)."""
    nd = st[0]
    if st[2][M_SSM] == 0:
        return
    while v > 0 and nd[LOCK, v] == 0 and nd[CKPT, v] == 0:
        if nd[NCH, v] == 0:
            p = nd[PAR, v]
            _remove_leaf(st, v)
            v = p
            continue
        if nd[NCH, v] == 1:
            _merge(st, v)
        return


@jit(inline="always")
def _pin(st, v: int) -> None:
    nd = st[0]
    nd[LOCK, v] += 1
    if nd[LOCK, v] == 1:
        changed(st, v)


@jit(inline="always")
def _unpin(st, v: int) -> None:
    nd = st[0]
    nd[LOCK, v] -= 1
    if nd[LOCK, v] == 0 and nd[PAR, v] >= 0:
        changed(st, v)
        _tidy(st, v)


@jit
def _ending_at(st, below: int, p: int) -> int:
    """``TreeEdits._node_ending_at``: the node ending at depth ``p``, an edge split if needed."""
    nd, kids, buf = st[0], st[8], st[9]
    v = below
    while nd[DEP, v] - nd[LEN, v] >= p:
        v = nd[PAR, v]
    if nd[DEP, v] == p:
        return v
    k = p - (nd[DEP, v] - nd[LEN, v])
    parent = nd[PAR, v]
    upper = _make_node(st, nd[BASE, v], p, k)  # RadixTree.split
    nd[T, upper] = nd[T, v]  # the upper part inherits the last access
    replace_sibling(nd, v, upper)
    nd[PAR, upper] = parent
    put(kids, key(parent, first_token(nd, buf, upper)), upper)
    before = nd[LEN, v]
    nd[LEN, v] -= k
    mc = st[2]
    st[1][S_SWA] += tail(mc, k) + tail(mc, before - k) - tail(mc, before)
    nd[PAR, v] = upper
    nd[FIRST, upper] = nd[LAST, upper] = v
    nd[PRV, v] = nd[NXT, v] = -1
    nd[NCH, upper] = 1
    put(kids, key(upper, first_token(nd, buf, v)), v)
    _added(st, upper)
    changed(st, v)
    return upper


@jit
def _add_chain(st, attach: int, s0: int, start: int, pos: np.ndarray, npos: int) -> None:
    """``TreeEdits._add_chain``: nodes cut at the positions past ``start``, all with states
    (a Transformer's one node, without)."""
    nd, sc, kids, buf = st[0], st[1], st[8], st[9]
    chain = np.empty(npos, np.int64)
    m = 0
    parent, prev = attach, start
    for j in range(npos):
        end = pos[j]
        if end <= start:
            continue
        v = _make_node(st, s0, end, end - prev)
        append_child(nd, parent, v)
        put(kids, key(parent, buf[s0 + prev]), v)
        nd[T, v] = sc[S_CLOCK]
        sc[S_SWA] += tail(st[2], end - prev)
        if st[2][M_SSM]:
            nd[CKPT, v] = 1
            sc[S_CKPTS] += 1
            sc[S_ADMITTED] += 1
        chain[m] = v
        m += 1
        parent, prev = v, end
    sc[S_KV] += prev - start
    for j in range(m):  # hooks once the chain is whole
        _added(st, chain[j])
    if attach != 0:
        changed(st, attach)
