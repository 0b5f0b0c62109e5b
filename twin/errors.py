"""The one error type users see: a clear sentence, never a traceback."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TypeVar

T = TypeVar("T")


class TwinError(Exception):
    """Bad input or an impossible request, described for the user.

    The message names what is wrong and where (file, row, column, flag); the
    CLI prints it on one line and exits with status 2.
    """


def lookup(table: Mapping[str, T], name: str, what: str, listed: str = "valid") -> T:
    """``table[name]``; else a ``TwinError``, one line naming the unknown ``what`` and, after
    ``listed``, the names ``table`` knows in its order (a registry's ``--help`` order)."""
    if name not in table:
        raise TwinError(f"unknown {what} {name!r}; {listed}: {', '.join(table)}")
    return table[name]


def expect_one_of(value: str, choices: Collection[str], what: str) -> None:
    """A ``TwinError`` unless ``value`` is one of ``choices``: one line naming ``what`` (the
    flag or setting) and the choices in their order."""
    if value not in choices:
        raise TwinError(f"{what} {value!r}: expected one of {', '.join(choices)}")


def where(path: object, row: int | None = None, column: str | None = None) -> str:
    """Format a location such as ``trace.parquet, row 12, column 'turn'``."""
    parts = [str(path)]
    if row is not None:
        parts.append(f"row {row}")
    if column is not None:
        parts.append(f"column {column!r}")
    return ", ".join(parts)


class Terminated(BaseException):
    """The process was asked to stop (SIGTERM): raised in the main thread so that every
    ``finally`` and ``except BaseException`` cleans up (workers killed, temporaries removed,
    a half-made output set dropped) before the command exits with 143 (128 + 15).

    A ``BaseException``, like ``KeyboardInterrupt``: no ``except Exception`` swallows it.
    """
