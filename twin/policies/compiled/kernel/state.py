"""The state of one replay or live cache: the layout of its tuple of flat arrays.

``st = (nd, sc, mc, mf, cr, cf, ch, cn, kids, buf, victims, score, path, free, handed,
ends)`` (the package's docstring says what each holds); here the rows of ``nd``
(node fields), the entries of ``sc`` (scalars), ``mc`` and ``mf`` (the model's and the
capacity's constants), the rules' codes; the tuple as uncounted views for the calls
inside one entry (:func:`borrow`) and the counters a caller reads (:func:`counters`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba.core import cgutils, types
from numba.extending import intrinsic

from twin.policies.compiled.kernel.compiling import jit

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


# Float constants, entries of ``mf``: alpha, then ``PrefillFlops``'s linear,
# full-attention and sliding-window quadratic coefficients (``marconi-twin``'s efficiency).
F_ALPHA, F_LINEAR, F_QUAD, F_QUADW = range(4)


# The rules, ``mc[M_RULES]``: the authors' (marconi, oracle) or the twin's (marconi-twin).
REFERENCE, TWIN = 0, 1


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
