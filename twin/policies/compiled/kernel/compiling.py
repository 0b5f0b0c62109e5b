"""numba's ``njit`` for the kernel, each function cached on disk under the package's sources.

The kernel's functions call each other across the package's modules, and a cached
function carries the code of everything it calls, so each is cached under the stamp
numba gives its own file together with a hash of every module of the package and of
``twin/mixers.py``, whose rule of a chunk's keys the kernel compiles (``scores``)
(:data:`PACKAGE_STAMP`, ``twin.jit.source_stamp``): a change to any of them recompiles
all of them, as when the kernel was one file. The cache itself is ``twin.jit``'s.
"""

from __future__ import annotations

from pathlib import Path

from twin import mixers
from twin.jit import compile_fn, source_stamp

PACKAGE_STAMP = source_stamp(Path(__file__).parent, Path(mixers.__file__))


def jit(fn=None, **options):
    """numba's ``njit``, compiled lazily (a signature a call) and cached on disk where numba
    finds a writable place (beside this file, or the user's cache folder) under the
    package's stamp; compiled once per process where it finds none. ``@jit`` or
    ``@jit(**more njit options)``.

    The small helpers that take the state tuple are inlined (``inline="always"``):
    a call binds its tuple argument, and numba counts a reference to each of its
    arrays on the way in and out (atomic operations: about a third of a replay's
    time went to them; inlining them made a chat window's replay 1.25 times faster).
    """
    if fn is None:
        return lambda f: jit(f, **options)
    return compile_fn(fn, None, PACKAGE_STAMP, **options)
