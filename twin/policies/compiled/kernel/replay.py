"""A replay over one trace buffer (``mc[M_LIVE]`` 0): the grid's and ``oracle``'s entries.

The state from a restored snapshot (:func:`start`), a copy that goes on at another
alpha (:func:`copy`), a range of requests served (:func:`serve_range`) and the victims
in order (:func:`victims`: the tests compare them). Called by
``policies.compiled.ReplayGrid``.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel import edits, request, scores, state, tree
from twin.policies.compiled.kernel.compiling import jit


@jit
def start(buf, n_requests, mc, mf, snap, clock, next_nid):
    """The state of a replay of ``n_requests`` from a restored snapshot (or an empty cache).

    ``snap`` rows: parent (an index into ``snap``, -1 for the root), base,
    depth, length, state, last access, creation id, state hit, one column per node,
    parents first (the order ``restore`` of the tests' oracle, ``tests/marconi_oracle.py``,
    rebuilds every node's children in).
    """
    restored = snap.shape[1]
    size = restored + 3 * n_requests + 2  # an insert adds at most a split and two chain nodes
    nd = np.zeros((state.N_FIELDS, size), np.int64)
    nd[state.FIRST, 0] = nd[state.LAST, 0] = nd[state.NXT, 0] = nd[state.PRV, 0] = nd[
        state.PAR, 0
    ] = nd[state.SLOT, 0] = -1
    sc = np.zeros(state.N_SCALARS, np.int64)
    sc[state.S_NEXT], sc[state.S_CLOCK], sc[state.S_NID], sc[state.S_FIRST_EVICTION] = (
        1,
        clock,
        next_nid,
        -1,
    )
    table = 1
    while table < 2 * size:  # a key per node ever made: never half full
        table *= 2
    kids = np.full((table, 2), tree.EMPTY, np.int64)
    st = (
        nd,
        sc,
        mc,
        mf.copy(),
        np.zeros(size),
        np.zeros(size),
        np.zeros(size, np.bool_),
        np.zeros(size, np.int64),
        kids,
        buf,
        np.zeros(size, np.int64),
        np.zeros(size),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int32),
        np.zeros((2, 0), np.int64),
    )
    for i in range(restored):  # fill: the tree first, then the policy hears every node
        v = tree.new_node(nd, i + 1, snap[1, i], snap[2, i], snap[3, i])
        parent = snap[0, i] + 1
        tree.append_child(nd, parent, v)
        tree.put(kids, tree.key(parent, tree.first_token(nd, buf, v)), v)
        nd[state.CKPT, v], nd[state.T, v], nd[state.NID, v] = snap[4, i], snap[5, i], snap[6, i]
        nd[state.CKHIT, v] = snap[7, i]
        sc[state.S_KV] += nd[state.LEN, v]
        sc[state.S_SWA] += scores.tail(mc, nd[state.LEN, v])
        sc[state.S_CKPTS] += nd[state.CKPT, v]
    sc[state.S_NEXT] = restored + 1
    for i in range(restored):
        edits._added(st, i + 1)
    return st


@jit
def copy(st, alpha: float):
    """An independent copy of ``st`` that goes on at ``alpha`` (the model and tokens shared).

    Only what the replay has written is copied: node columns below ``S_NEXT``, candidate
    rows below ``S_NCAND``, victims below ``S_EVICTIONS`` (a replay writes each column and
    row before it reads it: ``tree.new_node`` clears a new node's column, the candidate
    table and the victim list are appended to, the victim pass writes its scratch before
    reading it). The rest is left uninitialised, so a copy made at the first eviction
    touches the memory its replay will use, not its whole bound (``start``'s ``size``).
    """
    nd, sc = st[0], st[1]
    used, ncand, gone = sc[state.S_NEXT], sc[state.S_NCAND], sc[state.S_EVICTIONS]
    size = nd.shape[1]
    nd2 = np.empty((state.N_FIELDS, size), np.int64)
    nd2[:, :used] = nd[:, :used]
    cr, cf = np.empty(size), np.empty(size)
    ch, cn = np.empty(size, np.bool_), np.empty(size, np.int64)
    cr[:ncand], cf[:ncand], ch[:ncand], cn[:ncand] = (
        st[4][:ncand],
        st[5][:ncand],
        st[6][:ncand],
        st[7][:ncand],
    )
    evicted = np.empty(len(st[10]), np.int64)
    evicted[:gone] = st[10][:gone]
    mf = st[3].copy()
    mf[state.F_ALPHA] = alpha
    return (
        nd2,
        sc.copy(),
        st[2],
        mf,
        cr,
        cf,
        ch,
        cn,
        st[8].copy(),
        st[9],
        evicted,
        np.empty(len(st[11])),
        st[12],
        st[13],
        st[14],
        st[15],
    )


@jit
def serve_range(st, starts, plens, flens, i0: int, i1: int, hits, hit_nids, known, learn) -> None:
    """Serve requests ``i0`` to ``i1 - 1``: their hit tokens and hit nodes' creation ids (-1).
    ``known[i]``: request ``i``'s agreements with creators (:func:`_agreement`), which this
    replay adds to if ``learn`` (one replay at a time: the others only read them)."""
    st = state.borrow(st)
    nd, sc = st[0], st[1]
    pos = np.zeros(2, np.int64)
    path = np.zeros(nd.shape[1], np.int64)
    first = sc[state.S_CLOCK] - i0  # the cache clock of request 0
    for i in range(i0, i1):
        sc[state.S_CLOCK] = first + i  # RequestCache: the admission's clock
        node, hit = request._serve(st, starts[i], plens[i], flens[i], pos, path, known[i], learn)
        hits[i] = hit
        hit_nids[i] = nd[state.NID, node] if node != 0 else -1
    sc[state.S_CLOCK] = first + i1


@jit
def victims(st) -> np.ndarray:
    """The creation ids of the nodes evicted so far, in order."""
    return st[10][: st[1][state.S_EVICTIONS]].copy()
