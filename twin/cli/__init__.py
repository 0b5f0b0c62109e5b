"""The ``twin`` command line.

This package's ``__init__`` stays light: the typer app and every command
module are imported inside :func:`main`'s error handling (``twin.cli.root``),
so a Ctrl-C while Python is still importing prints one line, not a traceback,
and importing ``twin.cli.checks`` does not pull in every command.
"""

from __future__ import annotations

from typing import Any

from twin.cli.main import main


def __getattr__(name: str) -> Any:
    """``twin.cli.root.app`` on first use (the typer app with every command registered)."""
    if name == "app":
        from twin.cli.root import app

        return app
    raise AttributeError(name)


__all__ = ["app", "main"]
