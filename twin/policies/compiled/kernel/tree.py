"""The radix tree (``twin.cache.radix.RadixTree``) over the node arrays.

A node's tokens are never copied: the sequence that created a node holds the node's
whole path at the same positions (the path above a node never changes its tokens, only
where it is cut), so a node is ``(base, depth, length)``, its edge
``buf[base + depth - length : base + depth]``. Splitting keeps the creator for both
halves; folding a node into its child keeps the child's creator, which holds the longer
edge too. Children are kept twice: in a key table (parent and first token to child,
open addressing; :func:`rehash` clears its deleted slots) for the walk, and as a
sibling list in insertion order for the tie-break (a Python dict keeps a replaced
key's position, so an edge replaced in place, by a split or a fold, keeps its place
among its siblings). The walk (:func:`walk`, :func:`prefix`) and the sibling lists'
edits; what an edit does to the cache's counts and candidates is in ``edits``.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel import state
from twin.policies.compiled.kernel.compiling import jit

EMPTY, GONE = -1, -2  # free and deleted slots of the key table


@jit
def key(node: int, token: int) -> int:
    """One int64 per (node, int32 token): the token's 32 bits below the node's."""
    return node * 4294967296 + (token & 4294967295)


@jit
def _slot(kids: np.ndarray, k: int) -> int:
    """Where key ``k`` is, or where it would go (the first free or deleted slot met)."""
    mask = kids.shape[0] - 1
    h = int((np.uint64(k) * np.uint64(11400714819323198485)) >> np.uint64(32)) & mask
    free = -1
    while True:
        here = kids[h, 0]
        if here == k:
            return h
        if here == EMPTY:
            return h if free < 0 else free
        if here == GONE and free < 0:
            free = h
        h = (h + 1) & mask


@jit
def get(kids: np.ndarray, k: int) -> int:
    h = _slot(kids, k)
    return kids[h, 1] if kids[h, 0] == k else -1


@jit
def put(kids: np.ndarray, k: int, node: int) -> None:
    h = _slot(kids, k)
    kids[h, 0], kids[h, 1] = k, node


@jit
def delete(kids: np.ndarray, k: int) -> bool:
    h = _slot(kids, k)
    if kids[h, 0] == k:
        kids[h, 0] = GONE
        return True
    return False


@jit
def first_token(nd: np.ndarray, buf: np.ndarray, v: int) -> int:
    return buf[nd[state.BASE, v] + nd[state.DEP, v] - nd[state.LEN, v]]


@jit
def walk(
    nd: np.ndarray,
    kids: np.ndarray,
    buf: np.ndarray,
    q: np.ndarray,
    s0: int,
    n: int,
    path: np.ndarray,
    known: np.ndarray,
    learn: bool,
    start: int = 0,
):
    """``RadixTree.match`` of ``q[s0:s0 + n]``: (nodes on ``path``, length, partial or -1);
    the edges' tokens are in ``buf`` (a replay's ``q`` is ``buf`` itself); from ``start``, a
    node no deeper than ``n`` whose path ``q`` starts with (``path`` then begins there).

    ``path[:count]`` gets the root and every node whose whole edge matched, so
    that the match of any prefix is read off it (:func:`prefix`): a request's
    lookup, refresh, speculative insertion and insert all match a prefix of its
    input + output in the same tree (nothing changes the tree's shape between
    them), so one walk serves the four.

    ``known``: a replay's request's agreement with the sequences that made nodes
    (:func:`_agreement`; ``learn``: add what this walk compares), shared by the grid's
    replays of the same request; empty (a live cache's: its edges are not laid out
    in their creators' sequences): compare every token.
    """
    node, pos, count = start, nd[state.DEP, start], 1
    path[0] = start
    while pos < n:
        child = get(kids, key(node, q[s0 + pos]))
        if child < 0:
            return count, pos, -1
        m = nd[state.LEN, child]
        es = nd[state.BASE, child] + nd[state.DEP, child] - m
        lim = min(m, n - pos)
        if len(known):
            k = _agreement(known, learn, nd[state.BASE, child], buf, q, s0, pos, lim)
        else:
            k = 0
            while k < lim and buf[es + k] == q[s0 + pos + k]:
                k += 1
        if k < m:
            return count, pos + k, child
        node, pos = child, pos + m
        path[count] = node
        count += 1
    return count, pos, -1


AGREEMENTS = 4  # creators a replay's request remembers its agreement with


@jit(inline="always")
def _agreement(known, learn: bool, base: int, buf, q, s0: int, pos: int, lim: int) -> int:
    """How many of ``lim`` tokens from ``pos`` on the sequence at ``q[s0:]`` shares with the
    sequence at ``buf[base:]`` (a node's creator, which holds the node's whole path at the
    same positions, so the two agree on their first ``pos`` tokens, as the walk matched).

    ``known``: ``AGREEMENTS`` pairs (the creator's start + 1, 0: free; ``2 L + exact``):
    the two agree on their first ``L`` tokens, and ``exact``: not on token ``L``. Every
    pair holds whatever walk learned it, so a grid's replays of one request (the same
    tokens, mostly the same creators) compare each pair of tokens once, not once per alpha.
    """
    free, k = -1, 0
    for r in range(0, 2 * AGREEMENTS, 2):
        if known[r] == base + 1:
            agreed = known[r + 1] >> 1
            if agreed >= pos + lim:
                return lim
            if known[r + 1] & 1:
                return agreed - pos
            k, free = max(agreed - pos, 0), r
            break
        if known[r] == 0 and free < 0:
            free = r
    while k < lim and buf[base + pos + k] == q[s0 + pos + k]:
        k += 1
    if learn and free >= 0:
        known[free], known[free + 1] = base + 1, 2 * (pos + k) + (k < lim)
    return k


@jit
def prefix(nd: np.ndarray, path: np.ndarray, count: int, length: int, partial: int, n: int):
    """The match of the walked sequence's first ``n`` tokens: (node, length, partial or -1)."""
    j = count - 1
    while nd[state.DEP, path[j]] > n:
        j -= 1
    node = path[j]
    if nd[state.DEP, node] == n:
        return node, n, -1
    if j + 1 < count:  # the next whole node runs past ``n``
        return node, n, path[j + 1]
    return node, min(n, length), partial


@jit
def _bridge(nd: np.ndarray, p: int, a: int, b: int, after_a: int, before_b: int) -> None:
    """Among ``p``'s children, ``after_a`` follows ``a`` and ``before_b`` precedes ``b``
    (-1: the list's ends, ``p``'s first and last child)."""
    if a >= 0:
        nd[state.NXT, a] = after_a
    else:
        nd[state.FIRST, p] = after_a
    if b >= 0:
        nd[state.PRV, b] = before_b
    else:
        nd[state.LAST, p] = before_b


@jit
def replace_sibling(nd: np.ndarray, old: int, new: int) -> None:
    """``parent.children[key] = new`` over ``old``: the key keeps its position."""
    p, a, b = nd[state.PAR, old], nd[state.PRV, old], nd[state.NXT, old]
    nd[state.PRV, new], nd[state.NXT, new] = a, b
    _bridge(nd, p, a, b, new, new)


@jit
def append_child(nd: np.ndarray, p: int, v: int) -> None:
    """A new key: last among ``p``'s children."""
    last = nd[state.LAST, p]
    nd[state.PRV, v], nd[state.NXT, v] = last, -1
    if last >= 0:
        nd[state.NXT, last] = v
    else:
        nd[state.FIRST, p] = v
    nd[state.LAST, p] = v
    nd[state.NCH, p] += 1
    nd[state.PAR, v] = p


@jit
def unlink_child(nd: np.ndarray, v: int) -> None:
    """``del parent.children[key]``."""
    p, a, b = nd[state.PAR, v], nd[state.PRV, v], nd[state.NXT, v]
    _bridge(nd, p, a, b, b, a)
    nd[state.NCH, p] -= 1


@jit
def new_node(nd: np.ndarray, next_index: int, base: int, depth: int, length: int) -> int:
    """Clear column ``next_index`` for a node of ``length`` tokens ending at ``depth``."""
    v = next_index
    nd[:, v] = 0
    nd[state.FIRST, v] = nd[state.LAST, v] = nd[state.NXT, v] = nd[state.PRV, v] = -1
    nd[state.SLOT, v] = -1
    nd[state.BASE, v], nd[state.DEP, v], nd[state.LEN, v] = base, depth, length
    return v


@jit
def preorder_before(nd: np.ndarray, a: int, b: int) -> bool:
    """Is ``a`` before ``b`` in the tree's pre-order (the oracle's ``preorder_key``)?"""
    da, db, x = 0, 0, a
    while x != 0:
        x = nd[state.PAR, x]
        da += 1
    x = b
    while x != 0:
        x = nd[state.PAR, x]
        db += 1
    while da > db:  # an ancestor comes before its descendants
        a = nd[state.PAR, a]
        da -= 1
        if a == b:
            return False
    while db > da:
        b = nd[state.PAR, b]
        db -= 1
        if a == b:
            return True
    while nd[state.PAR, a] != nd[state.PAR, b]:
        a, b = nd[state.PAR, a], nd[state.PAR, b]
    x = nd[state.NXT, a]
    while x >= 0:  # siblings in insertion order: is ``b`` after ``a``?
        if x == b:
            return True
        x = nd[state.NXT, x]
    return False


@jit
def rehash(kids: np.ndarray, old: np.ndarray) -> None:
    """Put every key of ``old`` into ``kids`` (cleared first; deleted slots dropped)."""
    kids[:] = EMPTY
    for h in range(old.shape[0]):
        k = old[h, 0]
        if k != EMPTY and k != GONE:
            put(kids, k, old[h, 1])
