"""numba's ``njit`` with this project's options, each function's disk cache stamped with
the sources it compiles from.

numba caches a compiled function on disk keyed by its own source file only, and a cached
function carries the code of everything it calls, inlined or not: a callee changed in
another file would leave its callers' caches stale (numba's documented limit: "changes in
other files are not detected"). So each function compiled here is cached under the stamp
numba gives its own file together with :func:`source_stamp` of the sources it is compiled
from (the folders and files its caller names) and of this module (:data:`JIT_STAMP`, whose
options it is compiled with): a change to any of them recompiles it.

Cached where numba finds a writable place (beside the source file, or the user's cache
folder); compiled once per process where it finds none. No ``fastmath``: floating-point
operations keep their order and rounding (no contraction to FMA, no reassociation), so
compiled code equals the Python it is compiled from to the bit.

A plain Python function may be compiled as it is, the same function object the Python
path calls (``twin.costmodel.compiled`` compiles the cost model's scalar rules so): where
it calls another plain function already compiled here (:func:`compile_fn`), the compiled
form calls that one's compiled form (numba compiles only what it can resolve to compiled
code), so each rule is compiled after the rules it calls.

Two decorators: :func:`jit` compiles now, for one signature, when the defining module is
imported (a run pays neither the compile nor numba's first-call dispatch inside its timed
loop); ``policies.compiled.kernel.compiling.jit`` compiles lazily, a signature a call,
under its whole package's sources. Both are :func:`compile_fn`.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import numba
from numba.core import caching

F = TypeVar("F", bound=Callable[..., object])

# Each plain function compiled here, to its compiled form (what its callers compiled
# later call in its place).
_COMPILED: dict[Callable[..., Any], Any] = {}


def source_stamp(*sources: Path) -> str:
    """A hash of ``sources`` in order: a file's name and bytes, or of a folder every module
    (``*.py``) in it in name order. ``""`` for none."""
    if not sources:
        return ""
    digest = hashlib.sha256()
    for source in sources:
        paths = sorted(source.glob("*.py")) if source.is_dir() else [source]
        for path in paths:
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


# This module's own hash: the options every function here is compiled with (``compile_fn``:
# ``error_model`` decides what an integer division by zero gives) are in no caller's
# sources, and numba's cache key holds the function's bytecode, not its options.
JIT_STAMP = source_stamp(Path(__file__))


@functools.cache
def stamped_cache(stamp: str) -> type[caching.FunctionCache]:
    """numba's ``FunctionCache`` (``cache=True``) whose source stamp is numba's own (the
    function's file) together with ``stamp`` and :data:`JIT_STAMP`: a change to any
    recompiles."""

    def stamped(locator: type[Any]) -> type[Any]:
        class Stamped(locator):  # type: ignore[misc,valid-type]
            def get_source_stamp(self) -> object:
                return super().get_source_stamp(), stamp, JIT_STAMP

        Stamped.__name__ = f"Stamped{locator.__name__}"
        return Stamped

    class Impl(caching.CompileResultCacheImpl):
        # numba's own attribute, a list (not a ClassVar there).
        _locator_classes = list(map(stamped, caching.CompileResultCacheImpl._locator_classes))  # noqa: RUF012

    class StampedCache(caching.FunctionCache):
        _impl_class = Impl

    return StampedCache


def _compiled_calls(fn: types.FunctionType) -> dict[str, Any]:
    """The compiled forms of the plain functions ``fn`` calls that are compiled here, by
    the names ``fn`` calls them."""
    return {
        name: _COMPILED[g]
        for name in fn.__code__.co_names
        if isinstance(g := fn.__globals__.get(name), types.FunctionType) and g in _COMPILED
    }


def _calling_compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, or a copy of it whose globals name the compiled forms of the plain functions
    it calls that are compiled here (the same code, file and name: numba caches it as
    ``fn``)."""
    if not isinstance(fn, types.FunctionType):
        return fn
    calls = _compiled_calls(fn)
    if not calls:
        return fn
    copy = types.FunctionType(
        fn.__code__, {**fn.__globals__, **calls}, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__qualname__, copy.__module__, copy.__doc__ = fn.__qualname__, fn.__module__, fn.__doc__
    return copy


def compile_fn(
    fn: Callable[..., Any], signature: str | None = None, stamp: str = "", **options: Any
) -> Any:
    """``fn`` compiled by numba (``njit`` with ``options`` over this project's), cached on
    disk under ``stamp`` (:func:`source_stamp`) where numba finds a writable place; now for
    ``signature`` (and no other), else lazily a signature a call."""
    options = {"error_model": "numpy", "nogil": True, **options}
    py = _calling_compiled(fn)
    compiled = numba.njit(**options)(py)
    if signature is None and py is not fn:
        assert isinstance(fn, types.FunctionType) and isinstance(py, types.FunctionType)
        # Lazily compiled, a signature a call: the copy's globals are those of ``fn``'s
        # module when each compile starts, not when it was decorated (its module then half
        # run: a name defined below it, or rebound since, would be missing or stale); its
        # callees stay the compiled forms they were then (a rule compiled twice, as the
        # policies kernel's inlined ``mixers.keys_upto``, keeps each caller's own).
        compile_then = compiled.compile
        callees = {name: py.__globals__[name] for name in _compiled_calls(fn)}

        def compile_now(sig: Any) -> Any:
            py.__globals__.update(fn.__globals__)
            py.__globals__.update(callees)
            return compile_then(sig)

        compiled.compile = compile_now
    # What ``cache=True`` does (``Dispatcher.enable_caching``), with the stamped cache;
    # numba: "cannot cache function ...: no locator available" leaves it uncached.
    with contextlib.suppress(RuntimeError):
        compiled._cache = stamped_cache(stamp)(compiled.py_func)
    if signature is not None:
        compiled.compile(signature)
        compiled.disable_compile()
    _COMPILED[fn] = compiled
    return compiled


def jit(signature: str, *sources: Path) -> Callable[[F], F]:
    """``@jit("void(f8[::1], i8)")`` or ``jit(signature, *sources)(rule)``: the function
    compiled now for ``signature``, cached under ``sources`` (:func:`source_stamp`: every
    file its compiled code comes from besides its own)."""
    stamp = source_stamp(*sources)

    def compile_now(fn: F) -> F:
        return cast(F, compile_fn(fn, signature, stamp))

    return compile_now
