"""A package's re-exports imported on first use (PEP 562), so importing one of its
submodules does not import them all.

A package lists its re-exports once, as imports under ``if TYPE_CHECKING:`` (what mypy
reads), and binds ``__getattr__ = lazy_exports(__name__)`` under ``if not TYPE_CHECKING:``
(so mypy still rejects a name the package does not export). On the first lookup of a name
the block is read from the package's source with :mod:`ast` and the name imported from
the module it names, then bound on the package. ``twin simulate --help`` imports
``twin.engine.modes`` and ``twin.costmodel.kernel_layout``, not the whole engine and cost
model behind ``twin/engine/__init__.py`` and ``twin/costmodel/__init__.py`` (issue 33).

A registry of classes in several modules (the cache policies) is a :class:`Registry`: its
names listed without importing the classes, each imported when looked up.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def exported(package: str) -> dict[str, tuple[str, str]]:
    """``package``'s re-exports: name -> (module, name there), from the imports in the
    ``if TYPE_CHECKING:`` block of its ``__init__``."""
    path = sys.modules[package].__file__
    if path is None:
        raise ImportError(f"{package}: no source to read its re-exports from")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    table: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    for alias in statement.names:
                        table[alias.asname or alias.name] = (statement.module, alias.name)
    return table


def lazy_exports(package: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: its re-exports (:func:`exported`) on first use."""
    table: dict[str, tuple[str, str]] = {}

    def __getattr__(name: str) -> Any:
        if not table:
            table.update(exported(package))
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = table[name]
        value = getattr(importlib.import_module(module), attribute)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


class Registry(Mapping[str, T]):
    """A registry found by name whose entries are imported on lookup: ``name ->
    "module:attribute"``, in the order it lists them. Iterating (``", ".join(registry)``,
    a help's choices) imports nothing; ``registry[name]`` imports that entry's module."""

    def __init__(self, table: Mapping[str, str]) -> None:
        self.table = dict(table)
        self.loaded: dict[str, T] = {}

    def __getitem__(self, name: str) -> T:
        if name not in self.loaded:
            module, _, attribute = self.table[name].partition(":")
            self.loaded[name] = getattr(importlib.import_module(module), attribute)
        return self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)

    def __contains__(self, name: object) -> bool:
        return name in self.table
