"""numba's ``njit`` with this project's options, for compiled hot loops outside ``policies``.

Compiled eagerly for one signature when the module defining the function is
imported, and cached on disk where numba finds a writable place (beside the
source file, or the user's cache folder; compiled once per process where it
finds none), so a run pays neither the compile nor numba's first-call dispatch
inside its timed loop. No ``fastmath``: floating-point operations keep their
order and rounding (no contraction to FMA, no reassociation), so compiled code
can equal the Python it transliterates to the bit. ``policies.compiled.kernel``
has its own lazy ``jit`` (many signatures, cached under the whole package's sources).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

import numba

F = TypeVar("F", bound=Callable[..., object])


def jit(signature: str) -> Callable[[F], F]:
    """``@jit("void(f8[::1], i8)")``: the function compiled now for ``signature``."""

    def compile_now(fn: F) -> F:
        try:
            compiled = numba.njit(signature, cache=True, error_model="numpy", nogil=True)(fn)
        except RuntimeError:  # numba: "cannot cache function ...: no locator available"
            compiled = numba.njit(signature, error_model="numpy", nogil=True)(fn)
        return cast(F, compiled)

    return compile_now
