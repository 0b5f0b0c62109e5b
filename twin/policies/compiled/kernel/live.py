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

from twin.policies.compiled.kernel import cache, edits, request, state, tree
from twin.policies.compiled.kernel.compiling import jit


@jit
def live_start(mc, mf, nodes: int, tokens: int):
    """An empty live cache with room for ``nodes`` nodes and ``tokens`` tokens."""
    nd = np.zeros((state.N_FIELDS, nodes), np.int64)
    nd[state.FIRST, 0] = nd[state.LAST, 0] = nd[state.NXT, 0] = nd[state.PRV, 0] = nd[
        state.PAR, 0
    ] = nd[state.SLOT, 0] = -1
    sc = np.zeros(state.N_SCALARS, np.int64)
    sc[state.S_NEXT], sc[state.S_NID], sc[state.S_FIRST_EVICTION] = 1, 1, -1
    return (
        nd,
        sc,
        mc,
        mf,
        np.zeros(nodes),
        np.zeros(nodes),
        np.zeros(nodes, np.bool_),
        np.zeros(nodes, np.int64),
        np.full((8 * nodes, 2), tree.EMPTY, np.int64),
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
    nd2 = np.zeros((state.N_FIELDS, nodes), np.int64)
    nd2[:, :have] = nd
    cr, cf, ch, cn = (
        np.zeros(nodes),
        np.zeros(nodes),
        np.zeros(nodes, np.bool_),
        np.zeros(nodes, np.int64),
    )
    n = sc[state.S_NCAND]
    cr[:n], cf[:n], ch[:n], cn[:n] = st[4][:n], st[5][:n], st[6][:n], st[7][:n]
    kids = st[8]
    if kids.shape[0] < 8 * nodes:
        kids = np.full((8 * nodes, 2), tree.EMPTY, np.int64)
        tree.rehash(kids, st[8])
        sc[state.S_GONE] = 0
    buf = st[9]
    if tokens > len(buf):
        buf = np.zeros(tokens, np.int32)
        buf[: sc[state.S_BUFEND]] = st[9][: sc[state.S_BUFEND]]
    free = np.zeros(nodes, np.int64)
    free[: sc[state.S_FREE]] = st[13][: sc[state.S_FREE]]
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
    cache._evict_until(state.borrow(st), 0)


@jit
def live_admit(st, q: np.ndarray, plen: int, flen: int, clock: int, pos: np.ndarray):
    """``RequestCache.admit`` of prompt ``q[:plen]``, input + output ``q[:flen]`` at cache
    clock ``clock``: the hit node (0: none; pinned), its tokens and how many checkpoint
    positions ``pos`` got (``_serve`` up to its insert)."""
    st = state.borrow(st)
    st[1][state.S_CLOCK] = clock
    node, hit, npos, _, _, _ = request._admit(st, q, 0, plen, flen, pos, st[12], pos[:0], False)
    return node, hit, npos


@jit
def live_room(st, tokens: int) -> bool:
    """Room for an insert of up to ``tokens`` tokens: ``LIVE_NODE_SLACK`` free node ids
    (an insert makes at most seven: splits at three checkpoints, the third a prefix
    loaded back from a host tier, and at the attach point, a chain of three) and a token
    buffer of twice what the cache and the insert may hold
    (packing it then always frees enough for a fold's copy or the insert's tokens)."""
    nd, sc = st[0], st[1]
    free_ids = nd.shape[1] - sc[state.S_NEXT] + sc[state.S_FREE]
    return free_ids >= state.LIVE_NODE_SLACK and len(st[9]) >= live_tokens_needed(
        sc[state.S_KV], tokens
    )


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
    and call again). With SSM layers the walk starts at ``unpin``, the pinned hit: whole on
    ``q``'s path, its end kept (splits and folds move its edge's start only)."""
    st = state.borrow(st)
    nd, sc = st[0], st[1]
    added, before = 0, sc[state.S_ADMITTED]
    if npos > 0:
        upto = pos[npos - 1]
        if not live_room(st, upto):
            return -1, 0
        path = st[12]
        start = unpin if st[2][state.M_SSM] > 0 and nd[state.DEP, unpin] <= upto else 0
        count, length, partial = tree.walk(
            nd, st[8], st[9], q, 0, upto, path, path[:0], False, start
        )
        added = cache._insert(st, q, 0, pos, npos, path[count - 1], length, partial)
    if unpin:
        edits._unpin(st, unpin)
    return added, sc[state.S_ADMITTED] - before


@jit
def live_lookup(st, q: np.ndarray, plen: int) -> tuple[int, int]:
    """``PrefixCache.lookup`` of ``q[:plen]`` without a pin (a host tier's, whose policy
    hears no request: no clock ticks): the hit node (0: none) and its tokens."""
    st = state.borrow(st)
    nd, mc, path = st[0], st[2], st[12]
    count, length, partial = tree.walk(nd, st[8], st[9], q, 0, plen, path, path[:0], False)
    mnode, p, part = tree.prefix(nd, path, count, length, partial, plen)
    node, hit = cache._usable(nd, mc[state.M_SSM] > 0, mc[state.M_WINDOW], mnode, p, part)
    if node != 0:
        cache._hit(st, node)
    return node, hit


@jit
def live_release(st, node: int) -> None:
    """``RequestCache.release``: unpin the hit node."""
    edits._unpin(state.borrow(st), node)


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
    count, length, partial = tree.walk(nd, kids, buf, q, 0, plen, path, path[:0], False)
    mnode, p, part = tree.prefix(nd, path, count, length, partial, plen)
    return cache._usable(nd, ssm, window, mnode, p, part)[1]
