"""What each of Marconi's rules scores a node by: its FLOP efficiency.

``REFERENCE`` rules (``marconi``, ``oracle``): ``ReferenceFlops``' efficiency, the
FLOPs a hit on the node saves over the bytes its path holds (every count in float64,
one division). ``TWIN`` rules (``marconi-twin``): ``PrefillFlops``' FLOPs of the
node's own tokens over its own bytes (``KindBytes.node_bytes``; :func:`tail`, the
sliding-window tokens a node keeps, counts bytes for the cache too).
"""

from __future__ import annotations

import numpy as np

from twin import mixers
from twin.policies.compiled.kernel import state
from twin.policies.compiled.kernel.compiling import jit

# ``twin.mixers``' rule of a chunk's keys, compiled here (after the ``keys_upto`` it calls)
# and inlined; the package's stamp covers ``twin/mixers.py`` (``compiling.PACKAGE_STAMP``).
jit(mixers.keys_upto, inline="always")
_chunk_keys = jit(mixers.chunk_keys, inline="always")


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
    d, n, parent = float(mc[state.M_D]), float(own), float(depth - own)
    t = float(depth)
    mamba = 12.0 * n * d * d + 16.0 * n * d * float(mc[state.M_NSTATE]) + 10.0 * n * d
    saved = (
        float(mc[state.M_SSM]) * mamba
        + float(mc[state.M_ATTN]) * (_attn(t, d) - _attn(parent, d))
        + float(mc[state.M_MLP]) * (16.0 * t * d * d - _attn(parent, d))
    )
    # The state's bytes, then all ``depth`` tokens' KV.
    held = float(mc[state.M_CKB]) + float(mc[state.M_KVPT]) * t
    if held == 0.0:
        return 0.0
    return saved / held


@jit
def twin_efficiency(depth: int, own: int, ckpt: int, mc: np.ndarray, mf: np.ndarray) -> float:
    """``FlopAwareEviction``'s: ``PrefillFlops.total(own, depth - own)`` over the node's bytes."""
    c, n, w = depth - own, own, mc[state.M_WINDOW]
    saved = mf[state.F_LINEAR] * n
    if mf[state.F_QUAD]:  # ``PrefillFlops._formula``: keys attended (``chunk_keys``)
        saved += mf[state.F_QUAD] * _chunk_keys(n, c, None)
    if mf[state.F_QUADW]:  # sliding-window layers: their window ``w`` is set (not 0)
        saved += mf[state.F_QUADW] * _chunk_keys(n, c, w)
    held = own * mc[state.M_FULLKV] + tail(mc, own) * mc[state.M_SWAKV]  # ``KindBytes.node_bytes``
    held += mc[state.M_CKB] if ckpt else 0
    if held == 0:
        return 0.0
    return saved / held


@jit(inline="always")
def tail(mc: np.ndarray, n: int) -> int:
    """``KindBytes.tail``: the sliding-window tokens a node of ``n`` tokens keeps."""
    w = mc[state.M_WINDOW]
    return n if w == 0 or n < w else w
