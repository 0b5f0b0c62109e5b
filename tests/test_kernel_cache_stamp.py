"""Compiled code's disk cache follows every source it is compiled from (``twin.jit``).

numba stamps a cached function with its own file only; a caller cached with a callee of
another file inlined would survive the callee's change. ``twin.jit`` stamps each cache
with a hash of the sources its caller names too: the policies kernel's package
(``kernel.compiling``) and the cost model's modules (``costmodel.compiled.SOURCES``), so
any module's change recompiles them all."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import types
from pathlib import Path

import numba
import pytest
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher

from twin import jit as twin_jit
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


def _stamped(path: Path, sources: tuple[Path, ...]) -> bool:
    """Whether ``source_stamp(*sources)`` reads file ``path`` (a folder's own modules, not
    its subfolders', or a named file)."""
    return any(path == s or (s.is_dir() and path.parent == s) for s in sources)


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _own_names(path: Path, sources: tuple[Path, ...]) -> set[str]:
    """The names ``path`` assigns or defines at its top level, or imports by name from a
    module ``sources`` stamp too."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        if isinstance(node, ast.ImportFrom) and node.module:
            spec = importlib.util.find_spec(node.module)
            if spec and spec.origin and _stamped(Path(spec.origin), sources):
                names |= {a.asname or a.name for a in node.names}
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            elts = target.elts if isinstance(target, ast.Tuple) else [target]
            names |= {e.id for e in elts if isinstance(e, ast.Name)}
    return names


def _dispatchers() -> list[CPUDispatcher]:
    """Every function compiled through ``twin.jit``: the last form of each
    (``_COMPILED``) and the cost model's and the policies kernel's named ones."""
    found = {id(d): d for d in twin_jit._COMPILED.values()}
    modules = [compiled] + [
        importlib.import_module(f"{kernel.__name__}.{info.name}")
        for info in pkgutil.iter_modules(kernel.__path__)
    ]
    for module in modules:
        found |= {id(d): d for d in vars(module).values() if isinstance(d, CPUDispatcher)}
    return list(found.values())


@pytest.mark.parametrize("which", ["cost model", "policies kernel"])
def test_what_compiled_code_reads_is_stamped(which: str) -> None:
    """Every function compiled under the cost model's (or the policies kernel's) stamp, a
    callee only too, comes from a stamped file, and every global it reads is a compiled
    callee, a module, or a name its own module assigns or imports from a stamped one: a
    constant imported from an unstamped module would be frozen into the cache and left
    stale by its change."""
    if which == "cost model":
        sources = compiled.SOURCES
    else:
        sources = (Path(kernel.__file__).parent, Path(mixers.__file__))
        assert source_stamp(*sources) == PACKAGE_STAMP
    stamp = source_stamp(*sources)
    rules = [d for d in _dispatchers() if _cached_stamp(d) == stamp]
    if not rules:
        pytest.skip("numba found no writable cache place: nothing is cached, nothing stale")
    assert len(rules) >= 20
    for d in rules:
        fn = d.py_func  # (a copy whose globals name its compiled callees)
        path = Path(fn.__code__.co_filename)
        assert _stamped(path, sources), fn
        own = _own_names(path, sources)
        for name in _global_names(fn.__code__):
            value = fn.__globals__.get(name)
            if value is None or isinstance(value, (types.ModuleType, CPUDispatcher)):
                continue
            if isinstance(value, types.FunctionType):
                assert value in twin_jit._COMPILED, (fn, name)
            else:
                assert name in own, (fn, name, "read from an unstamped module?")


LAZY_MODULE = """
from twin.jit import compile_fn


def thrice(a):
    return 3 * a


thrice_compiled = compile_fn(thrice, "i8(i8)")


def plus_later(a):
    return thrice(a) + LATER


# Lazily, as the policies kernel's ``jit`` decorates: its module is half run here.
plus_later_compiled = compile_fn(plus_later, None, "")
LATER = 2
"""


def test_a_lazy_rule_calling_a_compiled_one_sees_its_modules_later_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function compiled lazily where it is defined, calling a rule compiled here, reads
    the names its module defines below it (its globals are taken at each compile), its
    callee the compiled form it was decorated with."""
    (tmp_path / "r40_lazy_rule.py").write_text(LAZY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("r40_lazy_rule")
    # The callee compiled again before the first call: the caller keeps the form it was
    # decorated with (a rule compiled twice, each caller's own).
    again = compile_fn(module.thrice, "i8(i8)")
    assert module.plus_later_compiled(5) == 17 == module.plus_later(5)
    callee = module.plus_later_compiled.py_func.__globals__["thrice"]
    assert callee is module.thrice_compiled and callee is not again


def test_every_cache_is_stamped_with_the_options_module() -> None:
    """``twin.jit``'s own hash is in every stamp: its options (``error_model``) are compiled
    into each function, and numba's cache key holds the function's bytecode only."""
    assert source_stamp(Path(twin_jit.__file__)) == twin_jit.JIT_STAMP
    caches = [d._cache for d in twin_jit._COMPILED.values()]
    stamps = [c._cache_file._source_stamp for c in caches if not isinstance(c, NullCache)]
    if not stamps:
        pytest.skip("numba found no writable cache place: nothing is cached, nothing stale")
    assert all(s[2] == twin_jit.JIT_STAMP for s in stamps)
