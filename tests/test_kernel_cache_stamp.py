"""The compiled kernel's disk cache follows every module of its package (``kernel.compiling``).

numba stamps a cached function with its own file only; a caller cached with a callee of
another file inlined would survive the callee's change. Each kernel function's cache is
stamped with the package's hash too, so any module's change recompiles them all."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher

from twin.policies.compiled import kernel
from twin.policies.compiled.kernel.compiling import PACKAGE_STAMP, PackageCache, package_stamp


def test_the_stamp_changes_with_any_module_of_the_folder(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    before = package_stamp(tmp_path)
    assert package_stamp(tmp_path) == before
    (tmp_path / "b.py").write_text("y = 3\n")
    changed = package_stamp(tmp_path)
    assert changed != before
    (tmp_path / "c.py").write_text("")
    assert package_stamp(tmp_path) != changed
    assert package_stamp(Path(kernel.__file__).parent) == PACKAGE_STAMP


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
    for d in dispatchers:
        cache = d._cache
        if isinstance(cache, NullCache):  # no writable place: compiled once a process
            continue
        assert isinstance(cache, PackageCache), d
        assert cache._cache_file._source_stamp[1] == PACKAGE_STAMP, d
