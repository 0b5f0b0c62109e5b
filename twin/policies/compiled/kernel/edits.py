"""The cache's edits of its tree (``twin.cache.tree_edits.TreeEdits``) and pins.

A node made (``RadixTree``'s next creation id; a live cache reuses the ids of nodes
gone), a leaf removed, a one-child node folded into its child, the tidying after
them (models with SSM layers), an edge split where a node must end, a chain of new
nodes, a pin and an unpin; each updates the cache's counts and tells the policy
(``victims.changed``) as the Python cache's hooks do.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel import buffer, scores, state, tree, victims
from twin.policies.compiled.kernel.compiling import jit


@jit(inline="always")
def _make_node(st, base: int, depth: int, length: int) -> int:
    """A new node (``RadixTree``: the next creation id)."""
    nd, sc = st[0], st[1]
    if sc[state.S_FREE] > 0:  # a live cache reuses the ids of nodes gone (section 4)
        sc[state.S_FREE] -= 1
        v = tree.new_node(nd, st[13][sc[state.S_FREE]], base, depth, length)
    else:
        v = tree.new_node(nd, sc[state.S_NEXT], base, depth, length)
        sc[state.S_NEXT] += 1
    nd[state.NID, v] = sc[state.S_NID]
    sc[state.S_NID] += 1
    if st[2][state.M_LIVE]:
        sc[state.S_DEPTHS] += depth
    return v


@jit(inline="always")
def _added(st, v: int) -> None:
    """``on_node_added``: the reference stamps it now (the twin's rules only hear of it)."""
    st[0][state.STAMP, v] = st[1][state.S_NOW]
    victims.changed(st, v)


@jit(inline="always")
def _touch(st, v: int) -> None:
    """``PrefixCache.touch``: accessed now."""
    st[0][state.T, v] = st[1][state.S_CLOCK]
    victims.changed(st, v)


@jit(inline="always")
def _gone(st, v: int) -> None:
    """``v`` left the tree; a live cache reuses its id and clears deleted keys now and then."""
    st[0][state.PAR, v] = -1
    sc = st[1]
    if st[2][state.M_LIVE]:
        sc[state.S_DEPTHS] -= st[0][state.DEP, v]
        st[13][sc[state.S_FREE]] = v
        sc[state.S_FREE] += 1
        kids = st[8]
        if 4 * sc[state.S_GONE] > kids.shape[0]:
            tree.rehash(kids, kids.copy())
            sc[state.S_GONE] = 0


@jit
def _remove_leaf(st, v: int) -> None:
    """``TreeEdits._remove_leaf`` (and ``RadixTree.remove_leaf``)."""
    nd, sc, kids, buf = st[0], st[1], st[8], st[9]
    p = nd[state.PAR, v]
    tree.unlink_child(nd, v)
    sc[state.S_GONE] += tree.delete(kids, tree.key(p, tree.first_token(nd, buf, v)))
    sc[state.S_KV] -= nd[state.LEN, v]
    sc[state.S_SWA] -= scores.tail(st[2], nd[state.LEN, v])
    sc[state.S_CKPTS] -= nd[state.CKPT, v]
    victims.table_drop(st, v)  # on_node_removed
    _gone(st, v)
    if p != 0:
        victims.changed(st, p)


@jit
def _merge(st, v: int) -> None:
    """``TreeEdits._merge``: fold one-child ``v`` into its child (``merge_into_child``)."""
    nd, sc, kids, buf = st[0], st[1], st[8], st[9]
    child = nd[state.FIRST, v]
    sc[state.S_GONE] += tree.delete(kids, tree.key(v, tree.first_token(nd, buf, child)))
    if st[2][state.M_LIVE]:
        buffer._join_edges(st, v, child)
    upper, lower = nd[state.LEN, v], nd[state.LEN, child]
    sc[state.S_SWA] += (
        scores.tail(st[2], upper + lower) - scores.tail(st[2], upper) - scores.tail(st[2], lower)
    )
    nd[state.LEN, child] += nd[state.LEN, v]  # the child's creator holds the longer edge too
    tree.replace_sibling(nd, v, child)
    nd[state.PAR, child] = nd[state.PAR, v]
    tree.put(kids, tree.key(nd[state.PAR, v], tree.first_token(nd, buf, child)), child)
    nd[state.FIRST, v] = nd[state.LAST, v] = -1
    nd[state.NCH, v] = 0
    sc[state.S_CKPTS] -= nd[state.CKPT, v]
    # on_node_removed(v, child): the reference's child keeps the later stamp
    # (``_evict_intermediate_node``); the twin's keeps its own last access.
    nd[state.STAMP, child] = max(nd[state.STAMP, child], nd[state.STAMP, v])
    victims.table_drop(st, v)
    _gone(st, v)
    victims.changed(st, child)


@jit
def _tidy(st, v: int) -> None:
    """``TreeEdits._tidy``: drop state-less leaves, fold a state-less one-child node (models
    with SSM layers: a Transformer's nodes never hold a state, and nothing is tidied)."""
    nd = st[0]
    if st[2][state.M_SSM] == 0:
        return
    while v > 0 and nd[state.LOCK, v] == 0 and nd[state.CKPT, v] == 0:
        if nd[state.NCH, v] == 0:
            p = nd[state.PAR, v]
            _remove_leaf(st, v)
            v = p
            continue
        if nd[state.NCH, v] == 1:
            _merge(st, v)
        return


@jit(inline="always")
def _pin(st, v: int) -> None:
    nd = st[0]
    nd[state.LOCK, v] += 1
    if nd[state.LOCK, v] == 1:
        victims.changed(st, v)


@jit(inline="always")
def _unpin(st, v: int) -> None:
    nd = st[0]
    nd[state.LOCK, v] -= 1
    if nd[state.LOCK, v] == 0 and nd[state.PAR, v] >= 0:
        victims.changed(st, v)
        _tidy(st, v)


@jit
def _ending_at(st, below: int, p: int) -> int:
    """``TreeEdits._node_ending_at``: the node ending at depth ``p``, an edge split if needed."""
    nd, kids, buf = st[0], st[8], st[9]
    v = below
    while nd[state.DEP, v] - nd[state.LEN, v] >= p:
        v = nd[state.PAR, v]
    if nd[state.DEP, v] == p:
        return v
    k = p - (nd[state.DEP, v] - nd[state.LEN, v])
    parent = nd[state.PAR, v]
    upper = _make_node(st, nd[state.BASE, v], p, k)  # RadixTree.split
    nd[state.T, upper] = nd[state.T, v]  # the upper part inherits the last access
    tree.replace_sibling(nd, v, upper)
    nd[state.PAR, upper] = parent
    tree.put(kids, tree.key(parent, tree.first_token(nd, buf, upper)), upper)
    before = nd[state.LEN, v]
    nd[state.LEN, v] -= k
    mc = st[2]
    st[1][state.S_SWA] += scores.tail(mc, k) + scores.tail(mc, before - k) - scores.tail(mc, before)
    nd[state.PAR, v] = upper
    nd[state.FIRST, upper] = nd[state.LAST, upper] = v
    nd[state.PRV, v] = nd[state.NXT, v] = -1
    nd[state.NCH, upper] = 1
    tree.put(kids, tree.key(upper, tree.first_token(nd, buf, v)), v)
    _added(st, upper)
    victims.changed(st, v)
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
        tree.append_child(nd, parent, v)
        tree.put(kids, tree.key(parent, buf[s0 + prev]), v)
        nd[state.T, v] = sc[state.S_CLOCK]
        sc[state.S_SWA] += scores.tail(st[2], end - prev)
        if st[2][state.M_SSM]:
            nd[state.CKPT, v] = 1
            sc[state.S_CKPTS] += 1
            sc[state.S_ADMITTED] += 1
        chain[m] = v
        m += 1
        parent, prev = v, end
    sc[state.S_KV] += prev - start
    for j in range(m):  # hooks once the chain is whole
        _added(st, chain[j])
    if attach != 0:
        victims.changed(st, attach)
