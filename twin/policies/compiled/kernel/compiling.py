"""numba's ``njit`` for the kernel, each function cached on disk under the package's sources.

numba keys a cached function on its own source file, and a cached function carries
the code of everything it calls, inlined or not: a callee changed in another file
would leave its callers' caches stale (numba's documented limit: "changes in other
files are not detected"). The kernel's functions call each other across the
package's modules, so each is cached under the stamp numba gives its own file
together with a hash of every module of the package (:data:`PACKAGE_STAMP`): a
change to any of them recompiles all of them, as when the kernel was one file.
"""

from __future__ import annotations

import contextlib
import hashlib
from pathlib import Path
from typing import Any

import numba
from numba.core import caching


def package_stamp(folder: Path) -> str:
    """A hash of every module in ``folder`` (names and bytes, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


PACKAGE_STAMP = package_stamp(Path(__file__).parent)


def _stamped(locator: type[Any]) -> type[Any]:
    """numba's ``locator`` (where a function's cache lies, its source's freshness), its
    freshness the file's own stamp and the package's."""

    class Stamped(locator):  # type: ignore[misc]
        def get_source_stamp(self) -> object:
            return super().get_source_stamp(), PACKAGE_STAMP

    Stamped.__name__ = f"PackageStamped{locator.__name__}"
    return Stamped


class _StampedImpl(caching.CompileResultCacheImpl):
    """numba's cache of a compiled function, found by its own locators, stamped."""

    # numba's own attribute, a list (not a ClassVar there).
    _locator_classes = list(map(_stamped, caching.CompileResultCacheImpl._locator_classes))  # noqa: RUF012


class PackageCache(caching.FunctionCache):
    """numba's ``FunctionCache`` (``cache=True``) with the package's stamp."""

    _impl_class = _StampedImpl


def jit(fn=None, **options):
    """numba's ``njit``, cached on disk where numba finds a writable place (beside this
    file, or the user's cache folder) under the package's stamp; compiled once per
    process where it finds none. ``@jit`` or ``@jit(**more njit options)``.

    The small helpers that take the state tuple are inlined (``inline="always"``):
    a call binds its tuple argument, and numba counts a reference to each of its
    arrays on the way in and out (atomic operations: about a third of a replay's
    time went to them; inlining them made a chat window's replay 1.25 times faster).
    """
    if fn is None:
        return lambda f: jit(f, **options)
    options = {"error_model": "numpy", "nogil": True, **options}
    compiled = numba.njit(**options)(fn)
    # What ``cache=True`` does (``Dispatcher.enable_caching``), with the stamped cache;
    # numba: "cannot cache function ...: no locator available" leaves it uncached.
    with contextlib.suppress(RuntimeError):
        compiled._cache = PackageCache(fn)
    return compiled
