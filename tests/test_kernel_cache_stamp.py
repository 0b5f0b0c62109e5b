"""Compiled code's disk cache follows every source it is compiled from (``twin.jit``).

numba stamps a cached function with its own file only; a caller cached with a callee of
another file inlined would survive the callee's change. ``twin.jit`` stamps each cache
with a hash of the sources its caller names too: the policies kernel's package
(``kernel.compiling``) and the cost model's modules (``costmodel.compiled.SOURCES``), so
any module's change recompiles them all."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import numba
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher

from twin import mixers
from twin.costmodel import compiled
from twin.jit import compile_fn, source_stamp
from twin.policies.compiled import kernel
from twin.policies.compiled.kernel import scores
from twin.policies.compiled.kernel.compiling import PACKAGE_STAMP


def test_the_stamp_changes_with_any_module_of_a_folder(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    before = source_stamp(tmp_path)
    assert source_stamp(tmp_path) == before
    (tmp_path / "b.py").write_text("y = 3\n")
    changed = source_stamp(tmp_path)
    assert changed != before
    (tmp_path / "c.py").write_text("")
    assert source_stamp(tmp_path) != changed
    # The kernel's package and ``twin/mixers.py``, whose rule ``scores`` compiles.
    assert source_stamp(Path(kernel.__file__).parent, Path(mixers.__file__)) == PACKAGE_STAMP


def test_the_stamp_changes_with_a_stamped_file(tmp_path: Path) -> None:
    folder, single = tmp_path / "pkg", tmp_path / "rules.py"
    folder.mkdir()
    (folder / "a.py").write_text("x = 1\n")
    single.write_text("def f(a):\n    return a\n")
    before = source_stamp(folder, single)
    assert before not in (source_stamp(folder), source_stamp(single), "")
    single.write_text("def f(a):\n    return a + 1\n")
    assert source_stamp(folder, single) != before
    assert source_stamp() == ""


def _cached_stamp(d: CPUDispatcher) -> object:
    """The stamp ``d``'s disk cache is kept under (None where numba found no place)."""
    cache = d._cache
    if isinstance(cache, NullCache):  # no writable place: compiled once a process
        return None
    return cache._cache_file._source_stamp[1]


def test_every_kernel_function_is_cached_under_the_package_stamp() -> None:
    dispatchers = []
    for info in pkgutil.iter_modules(kernel.__path__):
        module = importlib.import_module(f"{kernel.__name__}.{info.name}")
        dispatchers += [
            d
            for d in vars(module).values()
            if isinstance(d, CPUDispatcher) and d.py_func.__module__ == module.__name__
        ]
    sources = Path(kernel.__file__).parent.glob("*.py")
    assert len(dispatchers) == sum(p.read_text().count("\n@jit") for p in sources)
    # ``twin.mixers``' rule compiled in the package: its stamp too.
    dispatchers.append(scores._chunk_keys)
    callee = scores._chunk_keys.py_func.__globals__["keys_upto"]  # the package's, inlined
    assert callee.py_func is mixers.keys_upto and callee.targetoptions["inline"] == "always"
    for d in dispatchers:
        assert _cached_stamp(d) in (None, PACKAGE_STAMP), d


def test_the_compiled_pricing_is_cached_under_the_cost_model_sources() -> None:
    stamp = source_stamp(*compiled.SOURCES)
    folder = Path(compiled.__file__).parent
    # Every module a compiled rule comes from is stamped.
    assert set(compiled.SOURCES) == {folder, Path(compiled.mixers.__file__)}
    dispatchers = [d for d in vars(compiled).values() if isinstance(d, CPUDispatcher)]
    assert {d.py_func.__module__ for d in dispatchers} >= {
        "twin.mixers",
        "twin.costmodel.compiled",
        "twin.costmodel.features",
        "twin.costmodel.latency",
        "twin.costmodel.mixer_kernels",
        "twin.costmodel.ssm_features",
        "twin.costmodel.step_features",
    }
    for d in dispatchers:
        assert Path(d.py_func.__code__.co_filename).parent in (folder, folder.parent), d
        assert _cached_stamp(d) in (None, stamp), d


def _twice(a: int) -> int:
    return 2 * a


def _calls_twice(a: int) -> int:
    return _twice(a) + 1


def test_a_rule_compiled_after_its_callee_calls_the_compiled_callee() -> None:
    callee = compile_fn(_twice, "i8(i8)")
    caller = compile_fn(_calls_twice, "i8(i8)")
    assert caller(20) == 41 == _calls_twice(20)
    # The Python function itself is left as it was: it calls the Python callee.
    assert _calls_twice.__globals__["_twice"] is _twice
    assert caller.py_func.__globals__["_twice"] is callee
    assert isinstance(callee, numba.core.registry.CPUDispatcher)
