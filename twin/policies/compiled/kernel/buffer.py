"""A live cache's token buffer: each node's own edge, packed to the front when it runs out.

In a live cache (``mc[M_LIVE]``; ``live``) ``buf`` holds each node's own edge, not a
trace: an insert copies its new tokens once (:func:`_write`; the chain's nodes cut from
them), a split keeps both halves in place, a fold keeps the child's edge where the two
lie side by side, else copies both (:func:`_join_edges`); when ``buf`` runs out, live
edges are packed to its front (:func:`_pack`: in order, so edges side by side stay so).
A node's ``BASE`` is its edge's start less ``DEP - LEN``, so ``first_token`` and
``walk`` read it as in a replay.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel import state
from twin.policies.compiled.kernel.compiling import jit


@jit
def _pack(st) -> None:
    """Move every live edge to the front of ``buf``, in order."""
    nd, sc, buf = st[0], st[1], st[9]
    top = sc[state.S_NEXT]
    ids = np.empty(top, np.int64)
    at = np.empty(top, np.int64)
    m = 0
    for v in range(1, top):
        if nd[state.PAR, v] >= 0:
            ids[m] = v
            at[m] = nd[state.BASE, v] + nd[state.DEP, v] - nd[state.LEN, v]
            m += 1
    order = np.argsort(at[:m])
    w = 0
    for j in order:
        v, s, n = ids[j], at[j], nd[state.LEN, ids[j]]
        if s != w:
            for i in range(n):  # w < s: forward copies never overwrite what is still read
                buf[w + i] = buf[s + i]
        nd[state.BASE, v] = w - nd[state.DEP, v] + n
        w += n
    sc[state.S_BUFEND] = w


@jit
def _reserve(st, n: int) -> int:
    """Room for ``n`` more tokens at the end of ``buf`` (packing it if needed): where they go."""
    sc, buf = st[1], st[9]
    if sc[state.S_BUFEND] + n > len(buf):
        _pack(st)
        if sc[state.S_BUFEND] + n > len(buf):
            raise MemoryError("live cache: token buffer too small (grow it between calls)")
    return sc[state.S_BUFEND]


@jit
def _write(st, q: np.ndarray, s: int, n: int) -> int:
    """Copy ``q[s:s + n]`` to the end of ``buf``; return where it starts."""
    w = _reserve(st, n)
    st[9][w : w + n] = q[s : s + n]
    st[1][state.S_BUFEND] = w + n
    return w


@jit
def _join_edges(st, v: int, child: int) -> None:
    """Before ``child`` takes ``v``'s edge in front of its own: make them adjacent."""
    nd, buf = st[0], st[9]
    lv, lc = nd[state.LEN, v], nd[state.LEN, child]
    if nd[state.BASE, v] + nd[state.DEP, v] == nd[state.BASE, child] + nd[state.DEP, child] - lc:
        return  # side by side already: the child's base reads the joined edge
    w = _reserve(st, lv + lc)  # may pack: read the edges' places after it
    sv = nd[state.BASE, v] + nd[state.DEP, v] - lv
    buf[w : w + lv] = buf[sv : sv + lv]
    sc_ = nd[state.BASE, child] + nd[state.DEP, child] - lc
    buf[w + lv : w + lv + lc] = buf[sc_ : sc_ + lc]
    st[1][state.S_BUFEND] = w + lv + lc
    nd[state.BASE, child] = w - nd[state.DEP, child] + lv + lc
