"""Typer's help formatter imported without the two rich modules twin's help never uses.

``typer.rich_utils`` (typer 0.29) formats every ``--help``; at its top it imports
``rich.markdown`` (the markdown parser ``markdown_it`` and ``rich.syntax`` with pygments),
used only by ``rich_markup_mode="markdown"``, and ``rich.traceback``, used only by typer's
pretty exceptions. Twin's apps use the default ``"rich"`` markup mode and turn pretty
exceptions off, so neither is ever called, yet importing them was about a third of the
CPU of ``twin --help`` (70 of 220 ms of ``import typer.rich_utils``, issue 33).

:func:`defer_unused_rich` installs a finder that, when ``typer.rich_utils`` is imported,
lends it stand-ins for those two modules: classes named as typer imports them that load
the real module the first time they are called or read (``Markdown(...)``,
``Traceback.from_exception(...)``, ``isinstance``), so a markdown help string or a pretty
traceback still works and renders as before. The stand-ins are removed from
``sys.modules`` once ``typer.rich_utils`` has run: any other import of ``rich.markdown``
gets the real module. (While it runs, another thread's ``import rich.markdown`` would find
the stand-in; a stand-in used then raises ``ImportError`` rather than loading itself.)
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Sequence
from typing import Any

FORMATTER = "typer.rich_utils"
# module -> the name typer.rich_utils imports from it (``from rich.markdown import Markdown``)
DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}


class Deferred(type):
    """A stand-in class: calling it, reading an attribute of it or an ``isinstance`` with
    it imports ``cls.module`` and uses its class of the same name."""

    module: str

    def real(cls) -> Any:
        found = getattr(importlib.import_module(cls.module), cls.__name__)
        if found is cls:  # the stand-in is still lent: typer.rich_utils is running
            raise ImportError(f"{cls.module} is a stand-in while {FORMATTER} is imported")
        return found

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        try:
            real = cls.real()
        except ImportError:
            raise AttributeError(name) from None
        return getattr(real, name)

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, cls.real())

    def __subclasscheck__(cls, subclass: Any) -> bool:
        return issubclass(subclass, cls.real())


def stand_in(module: str, name: str) -> types.ModuleType:
    """A module holding only ``name``, a :class:`Deferred` class for ``module.name``."""
    stub = types.ModuleType(module, f"Stand-in for {module} (twin.cli.rich_help).")
    setattr(stub, name, Deferred(name, (), {"module": module}))
    return stub


class LendingLoader:
    """(An ``importlib.abc.Loader``, not subclassed: importing that module costs CPU too.)
    Runs ``loader`` with the stand-ins in ``sys.modules`` for modules not yet imported."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        lent = {
            name: stand_in(name, attribute)
            for name, attribute in DEFERRED.items()
            if name not in sys.modules
        }
        sys.modules.update(lent)
        try:
            self.loader.exec_module(module)
        finally:
            for name, stub in lent.items():
                if sys.modules.get(name) is stub:
                    del sys.modules[name]

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ... for tracebacks
        return getattr(self.loader, name)


class FormatterFinder:
    """Finds ``typer.rich_utils`` as the other finders do, with a :class:`LendingLoader`."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> Any:
        if fullname != FORMATTER:
            return None
        for finder in sys.meta_path:
            find_spec = getattr(finder, "find_spec", None)
            if finder is self or find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = LendingLoader(spec.loader)
                return spec
        return None


def defer_unused_rich() -> None:
    """Install :class:`FormatterFinder` first on ``sys.meta_path`` (once; a no-op once
    ``typer.rich_utils`` is imported)."""
    if FORMATTER in sys.modules or any(isinstance(f, FormatterFinder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, FormatterFinder())
