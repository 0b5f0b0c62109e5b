"""One request (``twin.cache.requests.RequestCache.serve``) on the cache.

Lookup and pin, Marconi's judicious admission (``policies.admissions.Judicious``: the
speculative insertion's positions) and, under the reference rules, ``marconi``'s clock
ticks and insert refresh; then one insert of the input + output and the unpin.
"""

from __future__ import annotations

import numpy as np

from twin.policies.compiled.kernel import cache, edits, state, tree, victims
from twin.policies.compiled.kernel.compiling import jit


@jit(inline="always")
def _admit(st, q, s0: int, plen: int, flen: int, pos, path, known: np.ndarray, learn: bool):
    """``RequestCache``'s admission of prompt ``q[s0:s0 + plen]`` with input + output
    ``q[s0:s0 + flen]``: lookup and pin, the policy's refresh, judicious admission's
    positions in ``pos``. Returns (hit node or 0, its tokens, positions, and the walk of the
    input + output: nodes on ``path``, length, partial) for the insert that follows."""
    nd, sc, mc = st[0], st[1], st[2]
    reference = mc[state.M_RULES] == state.REFERENCE
    ssm = mc[state.M_SSM] > 0
    count, length, partial = tree.walk(nd, st[8], st[9], q, s0, flen, path, known, learn)
    if reference:
        sc[state.S_NOW] += 1  # on_request: the lookup's tick
    mnode, p, part = tree.prefix(nd, path, count, length, partial, plen)
    node, hit = cache._usable(nd, ssm, mc[state.M_WINDOW], mnode, p, part)  # lookup
    if node != 0:
        cache._hit(st, node)
        edits._pin(st, node)
    if reference:
        # marconi's admit: the insert's refresh (two ticks; the deepest whole node of the full)
        sc[state.S_NOW] += 2
        sc[state.S_TICKED] = 0
        whole = path[count - 1]
        if whole != 0:
            nd[state.STAMP, whole] = sc[state.S_NOW]
            victims.changed(st, whole)
    # judicious admission: speculative insertion of the prompt (PrefixCache.speculative_insert),
    # on the lookup's match (pins and stamps change no edge)
    npos = 0
    if p > 0 and (
        part >= 0 or (nd[state.CKPT, mnode] == 0 and (p == plen or nd[state.NCH, mnode] > 0))
    ):
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
    cache._insert(st, st[9], s0, pos, npos, path[count - 1], length, partial)
    if node != 0:
        edits._unpin(st, node)
    return node, hit
