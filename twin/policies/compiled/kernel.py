"""Marconi's replay as compiled code (numba): the tree, the candidates and victims, the cache.

Why one module: numba caches each compiled function on disk keyed by its own
source file, and a cached function carries the code of everything it calls;
a change to a callee in another file would leave callers stale. Everything
compiled lives here, so any change recompiles all of it.

The state of one replay is one tuple ``st = (nd, sc, mc, mf, cr, cf, ch, cn,
kids, buf, victims, score, path, free, handed, ends)`` of flat arrays:

- ``nd``: node fields, rows named below (node 0 is the root; nodes are never
  reused, so a node's index is its creation order);
- ``sc``: the replay's scalars (clocks, counters, the candidate count);
- ``mc`` / ``mf``: the model's and the capacity's integer / float constants;
- ``cr``, ``cf``, ``ch``, ``cn``: the candidate table
  (the oracle's ``CandidateTable``, ``tests/marconi_oracle.py``: recency, FLOP efficiency,
  held, node; swap-removed rows);
- ``kids``: the children's keys (below), a (key, child) row per slot: a probe reads
  one cache line, not two;
- ``buf``: every token the replay reads (the trace's, then a restored snapshot's);
- ``victims``: the creation id of each node evicted, in order;
- ``score``: scratch for the victim pass;
- ``path``: scratch for a walk's nodes; ``free``: a live cache's free node ids;
- ``handed``, ``ends``: a live cache's victims for a write-back hook since the
  caller last took them (``mc[M_HOOK]``): their token paths one after another, and
  per victim where its path ends and whether its state went with it
  (``PrefixCache._tell_evict``).

Sections, each the transliteration of one Python piece (the same operations in
the same order; each function names what it follows). The Marconi rules' Python
pieces (their hooks on the radix tree, the candidate table) live in the tests'
oracle (``tests/marconi_oracle.py``): this module is their one production
implementation. The sections:

1. the radix tree (``twin.cache.radix.RadixTree``). A node's tokens are never
   copied: the sequence that created a node holds the node's whole path at the
   same positions (the path above a node never changes its tokens, only where
   it is cut), so a node is ``(base, depth, length)``, its edge
   ``buf[base + depth - length : base + depth]``. Splitting keeps the creator
   for both halves; folding a node into its child keeps the child's creator,
   which holds the longer edge too. Children are kept twice: in a key table
   (parent and first token to child, open addressing) for the walk, and as a
   sibling list in insertion order for the tie-break (a Python dict keeps a
   replaced key's position, so an edge replaced in place, by a split or a
   fold, keeps its place among its siblings);
2. candidates and victims, both Marconi scores. ``REFERENCE`` rules (``marconi``,
   ``oracle``; the oracle's ``ReferenceFlopAwareEviction``): every
   node with at most one child is a candidate, pinned ones held (scored, never
   the victim); recency ``1 / (now - stamp)`` on the logical clock;
   ``ReferenceFlops``' efficiency; ties to the first in pre-order. ``TWIN`` rules
   (``marconi-twin``; the oracle's ``FlopAwareEviction``): unpinned
   candidates only; recency is the last access on the cache clock; the
   efficiency is ``PrefillFlops``' FLOPs of the node's own tokens over its own
   bytes; ties to the older, then the first created;
3. the cache (``twin.cache.prefix_cache.PrefixCache`` on a model with SSM layers
   and no sliding-window layers: ``insert`` with its room making, truncation and
   tidying, ``evict``, splits and folds, pins; the edits are in
   ``twin.cache.tree_edits.TreeEdits``, an insert's bytes in
   ``twin.cache.admission_cost.AdmissionCost``) and one request
   (``twin.cache.requests.RequestCache.serve`` with Marconi's judicious admission,
   ``policies.admissions.Judicious``, and under the reference rules
   ``marconi``'s clock ticks and insert refresh).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic

# Node fields, rows of ``nd``.
(PAR, FIRST, LAST, NXT, PRV, NCH, BASE, DEP, LEN, CKPT, LOCK, STAMP, SLOT, T, NID, CKHIT) = range(
    16
)
N_FIELDS = 16
# Scalars, entries of ``sc``: the reference's logical clock and its evict tick, the next
# node, KV tokens, states, candidates, held candidates, evictions, the cache clock, the
# next creation id; then the counters of ``twin.cache.base.COUNTERS`` and the request
# during which the first eviction came (-1: none yet).
(S_NOW, S_TICKED, S_NEXT, S_KV, S_CKPTS, S_NCAND, S_NHELD, S_EVICTIONS, S_CLOCK, S_NID) = range(10)
S_PEAK, S_PEAK_KV, S_PEAK_SSM, S_ADMITTED, S_CKHIT, S_FIRST_EVICTION = range(10, 16)
# A live cache's (section 4): the end of the tokens written to ``buf``, the free node
# ids stacked, the key table's deleted slots, and the victim choices made.
S_BUFEND, S_FREE, S_GONE, S_CHOSE = range(16, 20)
S_SWA = 20  # sliding-window KV tokens held: every node's tail (``PrefixCache.swa_tokens``)
# A live cache's write-back log (``_hand``): victims and tokens in it, and the sum of every
# node's depth (a bound on one call's victims' paths: the caller sizes ``handed`` by it).
S_HANDED, S_HANDED_TOKENS, S_DEPTHS = 21, 22, 23
N_SCALARS = 24
# Integer constants, entries of ``mc``: capacity, bytes (KV per token of every layer,
# of the full-attention layers, one state), the reference's FLOP terms, the rules.
M_CAP, M_KVPT, M_FULLKV, M_CKB, M_D, M_NSTATE, M_SSM, M_ATTN, M_MLP, M_RULES = range(10)
M_LIVE = 10  # 1: a live cache (section 4), 0: a replay over one trace buffer
# Sliding-window layers (``twin.cache.kinds.KindBytes``): their KV per token (within
# ``M_KVPT``) and the window (0: none); a node keeps the last ``window`` tokens' of it.
M_SWAKV, M_WINDOW = 11, 12
# 1: each victim's path and whether its state goes are handed to a write-back hook
# (``st[14]``, ``st[15]``: a host tier's ``on_evict``, ``twin.cache.requests``).
M_HOOK = 13
LIVE_NODE_SLACK = 16  # free node ids a live cache keeps before an insert
N_CONSTANTS = 14
# Float constants, entries of ``mf``: alpha, then ``PrefillFlops``'s linear,
# full-attention and sliding-window quadratic coefficients (``marconi-twin``'s efficiency).
F_ALPHA, F_LINEAR, F_QUAD, F_QUADW = range(4)
# The rules, ``mc[M_RULES]``: the authors' (marconi, oracle) or the twin's (marconi-twin).
REFERENCE, TWIN = 0, 1


def jit(fn=None, **options):
    """numba's ``njit``, cached on disk where numba finds a writable place (beside this
    file, or the user's cache folder); compiled once per process where it finds none.
    ``@jit`` or ``@jit(**more njit options)``.

    The small helpers that take the state tuple are inlined (``inline="always"``):
    a call binds its tuple argument, and numba counts a reference to each of its
    arrays on the way in and out (atomic operations: about a third of a replay's
    time went to them; inlining them made a chat window's replay 1.25 times faster).
    """
    if fn is None:
        return lambda f: jit(f, **options)
    options = {"error_model": "numpy", "nogil": True, **options}
    try:
        return numba.njit(cache=True, **options)(fn)
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return numba.njit(**options)(fn)


def _uncounted_typing(typingctx, arr):
    """``_uncounted(arr)``: ``arr`` without its reference count: the same data, no owner.

    numba counts a reference to every array of a tuple argument on each call
    (atomic increments and decrements, a third of a replay's time); a state tuple
    of uncounted views (:func:`borrow`) makes those no-ops. Only for the length of
    one call from Python, which holds the arrays meanwhile; never returned.
    """
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(arr)(context, builder, value=args[0])
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        return ary._getvalue()

    return arr(arr), codegen


_uncounted: Any = intrinsic(_uncounted_typing)


@jit
def borrow(st):
    """``st`` as uncounted views (:func:`_uncounted`), for the calls inside one entry."""
    return (
        _uncounted(st[0]),
        _uncounted(st[1]),
        _uncounted(st[2]),
        _uncounted(st[3]),
        _uncounted(st[4]),
        _uncounted(st[5]),
        _uncounted(st[6]),
        _uncounted(st[7]),
        _uncounted(st[8]),
        _uncounted(st[9]),
        _uncounted(st[10]),
        _uncounted(st[11]),
        _uncounted(st[12]),
        _uncounted(st[13]),
        _uncounted(st[14]),
        _uncounted(st[15]),
    )


# ----- 1. the radix tree ---------------------------------------------------------------------
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
    return buf[nd[BASE, v] + nd[DEP, v] - nd[LEN, v]]


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
):
    """``RadixTree.match`` of ``q[s0:s0 + n]``: (nodes on ``path``, length, partial or -1);
    the edges' tokens are in ``buf`` (a replay's ``q`` is ``buf`` itself).

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
    node, pos, count = 0, 0, 1
    path[0] = 0
    while pos < n:
        child = get(kids, key(node, q[s0 + pos]))
        if child < 0:
            return count, pos, -1
        m = nd[LEN, child]
        es = nd[BASE, child] + nd[DEP, child] - m
        lim = min(m, n - pos)
        if len(known):
            k = _agreement(known, learn, nd[BASE, child], buf, q, s0, pos, lim)
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
    while nd[DEP, path[j]] > n:
        j -= 1
    node = path[j]
    if nd[DEP, node] == n:
        return node, n, -1
    if j + 1 < count:  # the next whole node runs past ``n``
        return node, n, path[j + 1]
    return node, min(n, length), partial


@jit
def _bridge(nd: np.ndarray, p: int, a: int, b: int, after_a: int, before_b: int) -> None:
    """Among ``p``'s children, ``after_a`` follows ``a`` and ``before_b`` precedes ``b``
    (-1: the list's ends, ``p``'s first and last child)."""
    if a >= 0:
        nd[NXT, a] = after_a
    else:
        nd[FIRST, p] = after_a
    if b >= 0:
        nd[PRV, b] = before_b
    else:
        nd[LAST, p] = before_b


@jit
def replace_sibling(nd: np.ndarray, old: int, new: int) -> None:
    """``parent.children[key] = new`` over ``old``: the key keeps its position."""
    p, a, b = nd[PAR, old], nd[PRV, old], nd[NXT, old]
    nd[PRV, new], nd[NXT, new] = a, b
    _bridge(nd, p, a, b, new, new)


@jit
def append_child(nd: np.ndarray, p: int, v: int) -> None:
    """A new key: last among ``p``'s children."""
    last = nd[LAST, p]
    nd[PRV, v], nd[NXT, v] = last, -1
    if last >= 0:
        nd[NXT, last] = v
    else:
        nd[FIRST, p] = v
    nd[LAST, p] = v
    nd[NCH, p] += 1
    nd[PAR, v] = p


@jit
def unlink_child(nd: np.ndarray, v: int) -> None:
    """``del parent.children[key]``."""
    p, a, b = nd[PAR, v], nd[PRV, v], nd[NXT, v]
    _bridge(nd, p, a, b, b, a)
    nd[NCH, p] -= 1


@jit
def new_node(nd: np.ndarray, next_index: int, base: int, depth: int, length: int) -> int:
    """Clear column ``next_index`` for a node of ``length`` tokens ending at ``depth``."""
    v = next_index
    nd[:, v] = 0
    nd[FIRST, v] = nd[LAST, v] = nd[NXT, v] = nd[PRV, v] = -1
    nd[SLOT, v] = -1
    nd[BASE, v], nd[DEP, v], nd[LEN, v] = base, depth, length
    return v


@jit
def preorder_before(nd: np.ndarray, a: int, b: int) -> bool:
    """Is ``a`` before ``b`` in the tree's pre-order (the oracle's ``preorder_key``)?"""
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


# ----- 2. candidates and victims -------------------------------------------------------------


@jit(inline="always")
def _attn(n: float, d: float) -> float:
    return 8.0 * n * d * d + 4.0 * n * n * d  # utils.get_attn_flops


@jit
def reference_efficiency(depth: int, own: int, mc: np.ndarray) -> float:
    """``ReferenceFlops._efficiency``, its definition: every count in float64, in this
    order, then one division. While every count stays below 2**53 (every preset model
    below tens of thousands of tokens) each step is exact, so this is the reference's
    exact integers divided once; past it each step rounds as IEEE 754 says, never
    overflowing (the reference's Python ints do not round; the authors' numbers never
    leave the exact range)."""
    d, n, parent = float(mc[M_D]), float(own), float(depth - own)
    t = float(depth)
    mamba = 12.0 * n * d * d + 16.0 * n * d * float(mc[M_NSTATE]) + 10.0 * n * d
    saved = (
        float(mc[M_SSM]) * mamba
        + float(mc[M_ATTN]) * (_attn(t, d) - _attn(parent, d))
        + float(mc[M_MLP]) * (16.0 * t * d * d - _attn(parent, d))
    )
    # The state's bytes, then all ``depth`` tokens' KV.
    held = float(mc[M_CKB]) + float(mc[M_KVPT]) * t
    if held == 0.0:
        return 0.0
    return saved / held


@jit
def twin_efficiency(depth: int, own: int, ckpt: int, mc: np.ndarray, mf: np.ndarray) -> float:
    """``FlopAwareEviction``'s: ``PrefillFlops.total(own, depth - own)`` over the node's bytes."""
    c, n, w = depth - own, own, mc[M_WINDOW]
    saved = mf[F_LINEAR] * n
    if mf[F_QUAD]:  # ``PrefillFlops._formula``: keys attended (``keys_upto``)
        saved += mf[F_QUAD] * (keys_upto(c + n, 0) - keys_upto(c, 0))
    if mf[F_QUADW]:
        saved += mf[F_QUADW] * (keys_upto(c + n, w) - keys_upto(c, w))
    held = own * mc[M_FULLKV] + tail(mc, own) * mc[M_SWAKV]  # ``KindBytes.node_bytes``
    held += mc[M_CKB] if ckpt else 0
    if held == 0:
        return 0.0
    return saved / held


@jit(inline="always")
def keys_upto(m: int, window: int) -> int:
    """``twin.mixers.keys_upto``: keys attended by the first ``m`` causal tokens (window 0:
    none)."""
    if window == 0 or m <= window:
        return m * (m + 1) // 2
    return window * (window + 1) // 2 + (m - window) * window


@jit(inline="always")
def tail(mc: np.ndarray, n: int) -> int:
    """``KindBytes.tail``: the sliding-window tokens a node of ``n`` tokens keeps."""
    w = mc[M_WINDOW]
    return n if w == 0 or n < w else w


# ----- the candidate table (the oracle's CandidateTable) -------------------------------------
@jit(inline="always")
def _table_set(st, v: int, r: float, f: float, held: bool) -> None:
    nd, sc, cr, cf, ch, cn = st[0], st[1], st[4], st[5], st[6], st[7]
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


@jit(inline="always")
def table_drop(st, v: int) -> None:
    nd, sc, cr, cf, ch, cn = st[0], st[1], st[4], st[5], st[6], st[7]
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


@jit(inline="always")
def changed(st, v: int) -> None:
    """The policy's ``on_node_changed``: a candidate gets its row, any other node none.

    A candidate (``PrefixCache.candidate``) is a node with no child, or one
    child and a state that frees bytes; the twin's rules also leave out pinned
    ones (``PrefixCache.evictable``).
    """
    nd, mc, mf = st[0], st[2], st[3]
    n = nd[NCH, v]
    candidate = v != 0 and (n == 0 or (n == 1 and nd[CKPT, v] != 0 and mc[M_CKB] > 0))
    if mc[M_RULES] == REFERENCE and candidate:
        eff = reference_efficiency(nd[DEP, v], nd[LEN, v], mc)
        _table_set(st, v, float(nd[STAMP, v]), eff, nd[LOCK, v] > 0)
    elif mc[M_RULES] == TWIN and candidate and nd[LOCK, v] == 0:
        eff = twin_efficiency(nd[DEP, v], nd[LEN, v], nd[CKPT, v], mc, mf)
        _table_set(st, v, float(nd[T, v]), eff, False)
    else:
        table_drop(st, v)


# ----- victims -------------------------------------------------------------------------------
@jit(fastmath={"nnan", "ninf", "nsz"})
def _ranges(cr: np.ndarray, cf: np.ndarray, n: int) -> tuple[float, float, float, float]:
    """Least and greatest of ``cr[:n]`` and ``cf[:n]``: exact at any order, so the
    reductions may be vectorised (finite values, no signed zeros among them)."""
    rmin = rmax = cr[0]
    fmin = fmax = cf[0]
    for i in range(1, n):
        rmin = min(rmin, cr[i])
        rmax = max(rmax, cr[i])
        fmin = min(fmin, cf[i])
        fmax = max(fmax, cf[i])
    return rmin, rmax, fmin, fmax


# The two rules are written once, over a candidate table's columns, for both trees: the
# compiled one below and the tests' Python oracle on the radix tree (``tests/marconi_oracle.py``
# calls them on its ``CandidateTable``). What stays with each
# tree is its own order (the reference's ties go to the first node in pre-order).
@jit
def reference_victim_row(
    cr: np.ndarray,
    cf: np.ndarray,
    ch: np.ndarray,
    n: int,
    n_held: int,
    now: int,
    ticked: int,
    alpha: float,
    score: np.ndarray,
) -> tuple[int, bool, int]:
    """``evict_v2``'s victim among rows ``[:n]`` (stamp ``cr``, efficiency ``cf``, held
    ``ch``, ``n_held`` of them): ``(row, tied, now)``; row -1 if every row is held.

    ``now`` is the logical clock; ``ticked`` 0 or 1: has ``evict`` ticked it during this
    insert (it ticks once per insert that makes room, and again when a stamp reached
    it); -1: score at ``now`` as given. Every row is scored, the held ones too (they
    count in both normalisations); they get an infinite score in ``score[:n]`` and are
    never the row. Recency ``1 / (now - stamp)`` is monotone in the stamp (a correctly
    rounded division is), so its extremes are those of the stamps: one pass finds the
    ranges; the scores go into ``score`` by loops without branches (the same operations
    per element, so vectorising them changes no bit); a last pass takes the first
    minimum. ``tied``: another row after it scores the same (the caller's tree breaks
    the tie: the first in pre-order).
    """
    if n == n_held:
        return -1, False, now
    rmin, rmax, fmin, fmax = _ranges(cr, cf, n)
    if ticked == 0 or (ticked > 0 and rmax >= now):
        now += 1  # ``evict``'s tick (once per insert that makes room)
    lo, hi = 1.0 / (now - rmin), 1.0 / (now - rmax)
    if n > 1 and lo != hi:  # ``utils._normalize``: (x - lo) / (hi - lo), or ones
        span = hi - lo
        for i in range(n):
            score[i] = (1.0 / (now - cr[i]) - lo) / span
    else:
        score[:n] = 1.0
    if alpha != 0.0:  # IEEE addition commutes: ``alpha x eff + recency`` to the bit
        if n > 1 and fmin != fmax:
            fspan = fmax - fmin
            for i in range(n):
                score[i] += ((cf[i] - fmin) / fspan) * alpha
        else:
            score[:n] += alpha  # ones times alpha
    best, low, tied = -1, 0.0, False
    for i in range(n):
        if ch[i]:
            score[i] = np.inf
            continue
        x = score[i]
        if best < 0 or x < low:
            best, low, tied = i, x, False
        elif x == low:
            tied = True
    return best, tied, now


@jit
def twin_victim_row(
    cr: np.ndarray, cf: np.ndarray, cn: np.ndarray, nid: np.ndarray, n: int, alpha: float
) -> int:
    """``marconi-twin``'s victim among rows ``[:n]`` (last access ``cr``, efficiency
    ``cf``; row ``i``'s creation id ``nid[cn[i]]``), -1 if none: the least
    ``r_norm + alpha x f_norm``, an exact tie to the older, then the first created.
    Recency alone (``alpha`` 0, or all efficiencies equal) is not scaled: the oldest."""
    if n == 0:
        return -1
    rmin = rmax = cr[0]
    fmin = fmax = cf[0]
    for i in range(1, n):
        r, f = cr[i], cf[i]
        rmin, rmax = min(rmin, r), max(rmax, r)
        fmin, fmax = min(fmin, f), max(fmax, f)
    a = 1.0 / (rmax - rmin) if rmax > rmin else 0.0
    b = 0.0
    if alpha > 0:
        b = alpha / (fmax - fmin) if fmax > fmin else 0.0
    best, low, tied = -1, 0.0, False
    for i in range(n):
        x = cr[i] if b == 0.0 else (cr[i] - rmin) * a + (cf[i] - fmin) * b
        if best < 0 or x < low:
            best, low, tied = i, x, False
        elif x == low:
            tied = True
    if tied:  # an exact tie: the older, then the first created
        for i in range(best + 1, n):
            x = cr[i] if b == 0.0 else (cr[i] - rmin) * a + (cf[i] - fmin) * b
            if x != low:
                continue
            if cr[i] < cr[best] or (cr[i] == cr[best] and nid[cn[i]] < nid[cn[best]]):
                best = i
    return best


@jit
def _reference_victim(st) -> int:
    """``ReferenceFlopAwareEviction.choose_victim`` on this tree (-1 if none)."""
    nd, sc, mf, cn, score = st[0], st[1], st[3], st[7], st[11]
    n = sc[S_NCAND]
    best, tied, now = reference_victim_row(
        st[4], st[5], st[6], n, sc[S_NHELD], sc[S_NOW], sc[S_TICKED], mf[F_ALPHA], score
    )
    if best < 0:
        return -1
    sc[S_NOW] = now
    sc[S_TICKED] = 1
    victim = cn[best]
    if tied:  # the first in pre-order among the minima (held rows score infinity)
        low = score[best]
        for i in range(best + 1, n):
            if score[i] == low and preorder_before(nd, cn[i], victim):
                victim = cn[i]
    return victim


@jit
def _twin_victim(st) -> int:
    """``FlopAwareEviction.choose_victim`` on this tree (-1 if none)."""
    nd, sc, mf, cn = st[0], st[1], st[3], st[7]
    best = twin_victim_row(st[4], st[5], cn, nd[NID], sc[S_NCAND], mf[F_ALPHA])
    return -1 if best < 0 else cn[best]


@jit(inline="always")
def choose_victim(st) -> int:
    if st[2][M_RULES] == REFERENCE:
        return _reference_victim(st)
    return _twin_victim(st)


# ----- 3. the cache and one request ----------------------------------------------------------
@jit(inline="always")
def _used(st) -> int:
    sc, mc = st[1], st[2]
    return _kv_bytes(sc, mc) + sc[S_CKPTS] * mc[M_CKB]


@jit(inline="always")
def _kv_bytes(sc: np.ndarray, mc: np.ndarray) -> int:
    """``PrefixCache.kv_bytes``: every token's full-attention KV, every node's window tail."""
    return sc[S_KV] * (mc[M_KVPT] - mc[M_SWAKV]) + sc[S_SWA] * mc[M_SWAKV]


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
def _missing(st, base: int, pos: np.ndarray, npos: int, covered: int) -> np.ndarray:
    """``AdmissionCost._missing_ckpts``: positions on the cached path whose node has no state
    (none on a Transformer: no states to place)."""
    nd = st[0]
    out = np.empty(npos, np.int64)
    m = 0
    if st[2][M_SSM] == 0:
        return out[:0]
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


@jit
def _cost(mc: np.ndarray, pos: np.ndarray, npos: int, covered: int, n_missing: int) -> int:
    """``AdmissionCost._cost``: the new tokens' KV, their window tails (and at most one
    more tail per edge split), the states placed."""
    n_new = 0
    for j in range(npos):
        if pos[j] > covered:
            n_new += 1
    last = pos[npos - 1]
    kv = (last - covered) * (mc[M_KVPT] - mc[M_SWAKV]) if last > covered else 0
    if mc[M_SWAKV]:
        swa, prev = 0, covered
        if mc[M_SSM]:  # a chain node per position past the cached path
            for j in range(npos):
                if pos[j] > covered:
                    swa += tail(mc, pos[j] - prev)
                    prev = pos[j]
        else:  # one node to the end
            swa += tail(mc, last - covered)
        swa += (n_missing + 1) * tail(mc, last)
        kv += swa * mc[M_SWAKV]
    return kv + (n_missing + n_new) * mc[M_CKB]


@jit
def _truncate(mc, pos, npos, covered, missing, free) -> int:
    """``AdmissionCost._truncate``: how many positions of ``pos`` fit in ``free``. On a
    Transformer (one position, ``pos[0]``) the tokens that fit: ``pos[0]`` is cut to them."""
    if mc[M_SSM] == 0:
        per = mc[M_KVPT]  # a bound: tails cost at most this
        split = tail(mc, pos[npos - 1]) * mc[M_SWAKV] if covered else 0  # an edge split's tail
        end = covered + (max(free - split, 0) // per if per else 0)
        end = min(end, pos[npos - 1])
        if end <= 0:
            return 0
        pos[0] = end
        return 1
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


@jit(inline="always")
def _admit(st, q, s0: int, plen: int, flen: int, pos, path, known: np.ndarray, learn: bool):
    """``RequestCache``'s admission of prompt ``q[s0:s0 + plen]`` with input + output
    ``q[s0:s0 + flen]``: lookup and pin, the policy's refresh, judicious admission's
    positions in ``pos``. Returns (hit node or 0, its tokens, positions, and the walk of the
    input + output: nodes on ``path``, length, partial) for the insert that follows."""
    nd, sc, mc = st[0], st[1], st[2]
    reference = mc[M_RULES] == REFERENCE
    ssm = mc[M_SSM] > 0
    count, length, partial = walk(nd, st[8], st[9], q, s0, flen, path, known, learn)
    if reference:
        sc[S_NOW] += 1  # on_request: the lookup's tick
    mnode, p, part = prefix(nd, path, count, length, partial, plen)
    node, hit = _usable(nd, ssm, mc[M_WINDOW], mnode, p, part)  # lookup
    if node != 0:
        _hit(st, node)
        _pin(st, node)
    if reference:
        # marconi's admit: the insert's refresh (two ticks; the deepest whole node of the full)
        sc[S_NOW] += 2
        sc[S_TICKED] = 0
        whole = path[count - 1]
        if whole != 0:
            nd[STAMP, whole] = sc[S_NOW]
            changed(st, whole)
    # judicious admission: speculative insertion of the prompt (PrefixCache.speculative_insert),
    # on the lookup's match (pins and stamps change no edge)
    npos = 0
    if p > 0 and (part >= 0 or (nd[CKPT, mnode] == 0 and (p == plen or nd[NCH, mnode] > 0))):
        pos[0] = p
        npos = 1
    # Sorted and unique, as ``insert`` makes them; an empty request caches nothing.
    if flen > 0 and (npos == 0 or pos[0] != flen):
        pos[npos] = flen
        npos += 1
    return node, hit, npos, count, length, partial


@jit
def _serve(st, s0: int, plen: int, flen: int, pos, path, known: np.ndarray, learn: bool):
    """``RequestCache.serve``: lookup and pin, admission, one insert, unpin; the hit node
    (0: none) and its tokens."""
    node, hit, npos, count, length, partial = _admit(
        st, st[9], s0, plen, flen, pos, path, known, learn
    )
    # The insert of the whole input + output: the walk's own match.
    _insert(st, st[9], s0, pos, npos, path[count - 1], length, partial)
    if node != 0:
        _unpin(st, node)
    return node, hit


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
    nd = np.zeros((N_FIELDS, size), np.int64)
    nd[FIRST, 0] = nd[LAST, 0] = nd[NXT, 0] = nd[PRV, 0] = nd[PAR, 0] = nd[SLOT, 0] = -1
    sc = np.zeros(N_SCALARS, np.int64)
    sc[S_NEXT], sc[S_CLOCK], sc[S_NID], sc[S_FIRST_EVICTION] = 1, clock, next_nid, -1
    table = 1
    while table < 8 * size:  # a key per node ever made: never a quarter full
        table *= 2
    kids = np.full((table, 2), EMPTY, np.int64)
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
        v = new_node(nd, i + 1, snap[1, i], snap[2, i], snap[3, i])
        parent = snap[0, i] + 1
        append_child(nd, parent, v)
        put(kids, key(parent, first_token(nd, buf, v)), v)
        nd[CKPT, v], nd[T, v], nd[NID, v] = snap[4, i], snap[5, i], snap[6, i]
        nd[CKHIT, v] = snap[7, i]
        sc[S_KV] += nd[LEN, v]
        sc[S_SWA] += tail(mc, nd[LEN, v])
        sc[S_CKPTS] += nd[CKPT, v]
    sc[S_NEXT] = restored + 1
    for i in range(restored):
        _added(st, i + 1)
    return st


@jit
def copy(st, alpha: float):
    """An independent copy of ``st`` that goes on at ``alpha`` (the model and tokens shared)."""
    mf = st[3].copy()
    mf[F_ALPHA] = alpha
    return (
        st[0].copy(),
        st[1].copy(),
        st[2],
        mf,
        st[4].copy(),
        st[5].copy(),
        st[6].copy(),
        st[7].copy(),
        st[8].copy(),
        st[9],
        st[10].copy(),
        np.zeros(len(st[11])),
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
    st = borrow(st)
    nd, sc = st[0], st[1]
    pos = np.zeros(2, np.int64)
    path = np.zeros(nd.shape[1], np.int64)
    first = sc[S_CLOCK] - i0  # the cache clock of request 0
    for i in range(i0, i1):
        sc[S_CLOCK] = first + i  # RequestCache: the admission's clock
        node, hit = _serve(st, starts[i], plens[i], flens[i], pos, path, known[i], learn)
        hits[i] = hit
        hit_nids[i] = nd[NID, node] if node != 0 else -1
    sc[S_CLOCK] = first + i1


@jit
def counters(st) -> np.ndarray:
    """Evictions, KV tokens, states, nodes (the root not counted), the peaks (bytes, KV,
    states), states admitted, states hit, the first evicting request's clock (-1), and the
    sliding-window tokens held."""
    nd, sc = st[0], st[1]
    live = 0
    for v in range(1, sc[S_NEXT]):
        if nd[PAR, v] >= 0:
            live += 1
    out = np.empty(11, np.int64)
    out[0], out[1], out[2], out[3] = sc[S_EVICTIONS], sc[S_KV], sc[S_CKPTS], live
    out[4], out[5], out[6] = sc[S_PEAK], sc[S_PEAK_KV], sc[S_PEAK_SSM]
    out[7], out[8], out[9] = sc[S_ADMITTED], sc[S_CKHIT], sc[S_FIRST_EVICTION]
    out[10] = sc[S_SWA]
    return out


@jit
def victims(st) -> np.ndarray:
    """The creation ids of the nodes evicted so far, in order."""
    return st[10][: st[1][S_EVICTIONS]].copy()


# ----- 4. a live cache: the engine's, request by request ------------------------------------
# The engine's replicas hold one cache each for a whole run and call the request protocol
# (``twin.cache.requests.RequestCache``) step by step: admission, the inserts at the
# prefill's end and at completion, the release, each at its own time. The tree, the
# candidates and the cache above run unchanged, with three differences (``mc[M_LIVE]``):
#
# - tokens: ``buf`` holds each node's own edge, not a trace: an insert copies its new
#   tokens once (the chain's nodes cut from them), a split keeps both halves in place,
#   a fold keeps the child's edge where the two lie side by side, else copies both;
#   when ``buf`` runs out, live edges are packed to its front (in order, so edges side
#   by side stay so). A node's ``BASE`` is its edge's start less ``DEP - LEN``, so
#   ``first_token`` and ``walk`` read it as before;
# - node ids of nodes gone are reused (``S_FREE``), and the key table is cleared of
#   deleted slots once they fill a quarter of it: memory follows what is cached, not
#   the requests served;
# - no victim list (a replay's test output).
#
# The Python side (``policies.compiled.live``) grows the arrays between calls.


@jit
def rehash(kids: np.ndarray, old: np.ndarray) -> None:
    """Put every key of ``old`` into ``kids`` (cleared first; deleted slots dropped)."""
    kids[:] = EMPTY
    for h in range(old.shape[0]):
        k = old[h, 0]
        if k != EMPTY and k != GONE:
            put(kids, k, old[h, 1])


@jit
def _pack(st) -> None:
    """Move every live edge to the front of ``buf``, in order."""
    nd, sc, buf = st[0], st[1], st[9]
    top = sc[S_NEXT]
    ids = np.empty(top, np.int64)
    at = np.empty(top, np.int64)
    m = 0
    for v in range(1, top):
        if nd[PAR, v] >= 0:
            ids[m] = v
            at[m] = nd[BASE, v] + nd[DEP, v] - nd[LEN, v]
            m += 1
    order = np.argsort(at[:m])
    w = 0
    for j in order:
        v, s, n = ids[j], at[j], nd[LEN, ids[j]]
        if s != w:
            for i in range(n):  # w < s: forward copies never overwrite what is still read
                buf[w + i] = buf[s + i]
        nd[BASE, v] = w - nd[DEP, v] + n
        w += n
    sc[S_BUFEND] = w


@jit
def _reserve(st, n: int) -> int:
    """Room for ``n`` more tokens at the end of ``buf`` (packing it if needed): where they go."""
    sc, buf = st[1], st[9]
    if sc[S_BUFEND] + n > len(buf):
        _pack(st)
        if sc[S_BUFEND] + n > len(buf):
            raise MemoryError("live cache: token buffer too small (grow it between calls)")
    return sc[S_BUFEND]


@jit
def _write(st, q: np.ndarray, s: int, n: int) -> int:
    """Copy ``q[s:s + n]`` to the end of ``buf``; return where it starts."""
    w = _reserve(st, n)
    st[9][w : w + n] = q[s : s + n]
    st[1][S_BUFEND] = w + n
    return w


@jit
def _join_edges(st, v: int, child: int) -> None:
    """Before ``child`` takes ``v``'s edge in front of its own: make them adjacent."""
    nd, buf = st[0], st[9]
    lv, lc = nd[LEN, v], nd[LEN, child]
    if nd[BASE, v] + nd[DEP, v] == nd[BASE, child] + nd[DEP, child] - lc:
        return  # side by side already: the child's base reads the joined edge
    w = _reserve(st, lv + lc)  # may pack: read the edges' places after it
    sv = nd[BASE, v] + nd[DEP, v] - lv
    buf[w : w + lv] = buf[sv : sv + lv]
    sc_ = nd[BASE, child] + nd[DEP, child] - lc
    buf[w + lv : w + lv + lc] = buf[sc_ : sc_ + lc]
    st[1][S_BUFEND] = w + lv + lc
    nd[BASE, child] = w - nd[DEP, child] + lv + lc


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
