"""A live cache: the engine's, request by request (``mc[M_LIVE]`` 1); its entries.

The engine's replicas hold one cache each for a whole run and call the request protocol
(``twin.cache.requests.RequestCache``) step by step: admission, the inserts at the
prefill's end and at completion, the release, each at its own time. The tree, the
candidates and the cache run unchanged, with three differences:

- tokens: ``buf`` holds each node's own edge, not a trace (``buffer``);
- node ids of nodes gone are reused (``S_FREE``), and the key table is cleared of
  deleted slots once they fill a quarter of it: memory follows what is cached, not
  the requests served;
- no victim list (a replay's test output).

The Python side (``policies.compiled.live.LiveCache``) grows the arrays between calls.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel.cache import _evict_until, _hit, _insert, _usable
from twin.policies.compiled.kernel.compiling import jit
from twin.policies.compiled.kernel.edits import _unpin
from twin.policies.compiled.kernel.request import _admit
from twin.policies.compiled.kernel.state import (
    FIRST,
    LAST,
    LIVE_NODE_SLACK,
    M_SSM,
    M_WINDOW,
    N_FIELDS,
    N_SCALARS,
    NXT,
    PAR,
    PRV,
    S_ADMITTED,
    S_BUFEND,
    S_CLOCK,
    S_FIRST_EVICTION,
    S_FREE,
    S_GONE,
    S_KV,
    S_NCAND,
    S_NEXT,
    S_NID,
    SLOT,
    borrow,
)
from twin.policies.compiled.kernel.tree import EMPTY, prefix, rehash, walk


@jit
def live_start(mc, mf, nodes: int, tokens: int):
    """An empty live cache with room for ``nodes`` nodes and ``tokens`` tokens."""
    nd = np.zeros((N_FIELDS, nodes), np.int64)
    nd[FIRST, 0] = nd[LAST, 0] = nd[NXT, 0] = nd[PRV, 0] = nd[PAR, 0] = nd[SLOT, 0] = -1
    sc = np.zeros(N_SCALARS, np.int64)
    sc[S_NEXT], sc[S_NID], sc[S_FIRST_EVICTION] = 1, 1, -1
    return (
        nd,
        sc,
        mc,
        mf,
        np.zeros(nodes),
        np.zeros(nodes),
        np.zeros(nodes, np.bool_),
        np.zeros(nodes, np.int64),
        np.full((8 * nodes, 2), EMPTY, np.int64),
        np.zeros(tokens, np.int32),
        np.zeros(0, np.int64),
        np.zeros(nodes),
        np.zeros(nodes, np.int64),
        np.zeros(nodes, np.int64),
        np.zeros(0, np.int32),
        np.zeros((2, nodes), np.int64),
    )


@jit
def live_grow(st, nodes: int, tokens: int):
    """``st`` with room for ``nodes`` nodes and ``tokens`` tokens (at least what it has)."""
    nd, sc = st[0], st[1]
    have = nd.shape[1]
    nodes = max(nodes, have)
    nd2 = np.zeros((N_FIELDS, nodes), np.int64)
    nd2[:, :have] = nd
    cr, cf, ch, cn = (
        np.zeros(nodes),
        np.zeros(nodes),
        np.zeros(nodes, np.bool_),
        np.zeros(nodes, np.int64),
    )
    n = sc[S_NCAND]
    cr[:n], cf[:n], ch[:n], cn[:n] = st[4][:n], st[5][:n], st[6][:n], st[7][:n]
    kids = st[8]
    if kids.shape[0] < 8 * nodes:
        kids = np.full((8 * nodes, 2), EMPTY, np.int64)
        rehash(kids, st[8])
        sc[S_GONE] = 0
    buf = st[9]
    if tokens > len(buf):
        buf = np.zeros(tokens, np.int32)
        buf[: sc[S_BUFEND]] = st[9][: sc[S_BUFEND]]
    free = np.zeros(nodes, np.int64)
    free[: sc[S_FREE]] = st[13][: sc[S_FREE]]
    return (
        nd2,
        sc,
        st[2],
        st[3],
        cr,
        cf,
        ch,
        cn,
        kids,
        buf,
        st[10],
        np.zeros(nodes),
        np.zeros(nodes, np.int64),
        free,
        st[14],
        np.zeros((2, nodes), np.int64),
    )


@jit
def live_shrink(st) -> None:
    """``PrefixCache.shrink_to``'s evictions: victims go until the cache holds at most its
    capacity (``mc[M_CAP]``, which the caller set: a shared pool's room) or none is left."""
    _evict_until(borrow(st), 0)


@jit
def live_admit(st, q: np.ndarray, plen: int, flen: int, clock: int, pos: np.ndarray):
    """``RequestCache.admit`` of prompt ``q[:plen]``, input + output ``q[:flen]`` at cache
    clock ``clock``: the hit node (0: none; pinned), its tokens and how many checkpoint
    positions ``pos`` got (``_serve`` up to its insert)."""
    st = borrow(st)
    st[1][S_CLOCK] = clock
    node, hit, npos, _, _, _ = _admit(st, q, 0, plen, flen, pos, st[12], pos[:0], False)
    return node, hit, npos


@jit
def live_room(st, tokens: int) -> bool:
    """Room for an insert of up to ``tokens`` tokens: ``LIVE_NODE_SLACK`` free node ids
    (an insert makes at most seven: splits at three checkpoints, the third a prefix
    loaded back from a host tier, and at the attach point, a chain of three) and a token
    buffer of twice what the cache and the insert may hold
    (packing it then always frees enough for a fold's copy or the insert's tokens)."""
    nd, sc = st[0], st[1]
    free_ids = nd.shape[1] - sc[S_NEXT] + sc[S_FREE]
    return free_ids >= LIVE_NODE_SLACK and len(st[9]) >= live_tokens_needed(sc[S_KV], tokens)


@jit
def live_tokens_needed(held: int, tokens: int) -> int:
    return 2 * (held + tokens) + 64


@jit
def live_insert(st, q: np.ndarray, pos: np.ndarray, npos: int, unpin: int) -> tuple[int, int]:
    """``PrefixCache.insert`` of ``q`` up to ``pos[npos - 1]`` with checkpoints ``pos[:npos]``
    (sorted, unique, positive), then ``RequestCache.release``'s unpin of node ``unpin``
    (0: none; a request's last insert and its release in one call, which saves a call's
    dispatch of the state's 16 arrays): (tokens newly cached, states admitted);
    ``(-1, 0)`` without doing anything where ``st`` lacks room (:func:`live_room`: grow it
    and call again)."""
    st = borrow(st)
    nd, sc = st[0], st[1]
    added, before = 0, sc[S_ADMITTED]
    if npos > 0:
        if not live_room(st, pos[npos - 1]):
            return -1, 0
        path = st[12]
        count, length, partial = walk(nd, st[8], st[9], q, 0, pos[npos - 1], path, path[:0], False)
        added = _insert(st, q, 0, pos, npos, path[count - 1], length, partial)
    if unpin:
        _unpin(st, unpin)
    return added, sc[S_ADMITTED] - before


@jit
def live_lookup(st, q: np.ndarray, plen: int) -> tuple[int, int]:
    """``PrefixCache.lookup`` of ``q[:plen]`` without a pin (a host tier's, whose policy
    hears no request: no clock ticks): the hit node (0: none) and its tokens."""
    st = borrow(st)
    nd, mc, path = st[0], st[2], st[12]
    count, length, partial = walk(nd, st[8], st[9], q, 0, plen, path, path[:0], False)
    mnode, p, part = prefix(nd, path, count, length, partial, plen)
    node, hit = _usable(nd, mc[M_SSM] > 0, mc[M_WINDOW], mnode, p, part)
    if node != 0:
        _hit(st, node)
    return node, hit


@jit
def live_release(st, node: int) -> None:
    """``RequestCache.release``: unpin the hit node."""
    _unpin(borrow(st), node)


@jit
def live_peek(
    nd: np.ndarray,
    kids: np.ndarray,
    buf: np.ndarray,
    path: np.ndarray,
    q: np.ndarray,
    plen: int,
    ssm: bool,
    window: int,
) -> int:
    """``PrefixCache.peek``: the tokens a lookup of ``q[:plen]`` would hit (changes nothing).

    Given the four arrays it reads (``st[0]``, ``st[8]``, ``st[9]``, ``st[12]``) rather than
    the state tuple: a router probes every replica for every request, and numba's dispatch
    of the 14-array tuple cost about 1 us of a probe's 3."""
    count, length, partial = walk(nd, kids, buf, q, 0, plen, path, path[:0], False)
    mnode, p, part = prefix(nd, path, count, length, partial, plen)
    return _usable(nd, ssm, window, mnode, p, part)[1]
