"""Flag and path checks the commands run before any work starts.

Each check raises a ``TwinError`` naming the flag and what is wrong with its
value, so a bad command line fails in milliseconds with one line instead of
after the simulation (or with a traceback from deep inside it).
"""

from __future__ import annotations

import inspect
import math
import os
import typing
from pathlib import Path
from typing import Any

from twin.atomic import not_an_input as not_an_input  # the one check, re-exported here
from twin.errors import TwinError
from twin.limits import MAX_CACHE_GB


def number(
    flag: str,
    value: float | None,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> None:
    """A finite number within [low, high] (``low_open``: strictly above ``low``)."""
    if value is None:
        return
    if not math.isfinite(value):
        raise TwinError(f"{flag} {value}: must be a finite number")
    if low is not None and (value <= low if low_open else value < low):
        raise TwinError(f"{flag} {value:g}: must be {'>' if low_open else '>='} {low:g}")
    if high is not None and value > high:
        raise TwinError(f"{flag} {value:g}: must be <= {high:g}")


def _existing_ancestor(path: Path) -> Path:
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def _writable_parent(flag: str, path: Path) -> None:
    """``path`` can be created: its nearest existing ancestor is a writable folder."""
    base = _existing_ancestor(path if path.is_dir() else path.parent)
    if not base.is_dir():
        raise TwinError(f"{flag} {path}: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise TwinError(f"{flag} {path}: folder {base} is not writable")


def out_dir(flag: str, path: Path) -> None:
    """An output folder: a folder (or creatable), never an existing file."""
    if path.exists() and not path.is_dir():
        raise TwinError(f"{flag} {path}: is a file; expected a folder for the outputs")
    _writable_parent(flag, path)


def out_file(flag: str, path: Path) -> None:
    """An output file: not a folder, and its folder is writable (or creatable)."""
    if path.is_dir():
        raise TwinError(f"{flag} {path}: is a folder; expected a file name")
    _writable_parent(flag, path)


def in_file(flag: str, path: Path, what: str = "file") -> None:
    """An input file that exists and can be read."""
    if not path.exists():
        raise TwinError(f"{flag} {path}: no such {what}")
    if not path.is_file():
        raise TwinError(f"{flag} {path}: is a folder; expected a {what}")
    if not os.access(path, os.R_OK):
        raise TwinError(f"{flag} {path}: not readable")


def claim_out(flag: str, path: Path) -> None:
    """Hold the output folder ``path`` until the command ends (``twin.atomic.claim``): a second
    command into it meanwhile is refused at once, and this command's existing-output check
    and its commit see no other writer in between. Call it after the flag checks, before the
    existing-output check."""
    from typer._click.globals import get_current_context  # typer's bundled click

    from twin.atomic import claim

    ctx = get_current_context(silent=True)
    if ctx is None:  # not under the CLI (a direct call): nothing would release it
        raise RuntimeError("claim_out runs inside a twin command")
    ctx.with_resource(claim(path, flag))


def no_other_run(flag: str, path: Path, names: list[str], force: bool) -> None:
    """Refuse to replace another run's outputs in ``path`` unless ``force``."""
    from twin.atomic import has_outputs

    if not force and path.is_dir() and has_outputs(path, names):
        raise TwinError(
            f"{flag} {path}: already holds the outputs of another run; "
            "pass --force to replace them, or choose another folder"
        )


def _option_type(policy_classes: list[type[Any]], key: str) -> Any:
    """The annotated type of ``key`` in the first policy constructor that takes it."""
    for cls in policy_classes:
        if key in inspect.signature(cls).parameters:  # a class's signature is its __init__'s
            hints = typing.get_type_hints(cls.__init__)  # type: ignore[misc]
            return hints.get(key, Any)
    return Any


def policy_options(policies: list[str], options: dict[str, str]) -> dict[str, Any]:
    """``--policy-option`` values typed as the policies' constructors declare, then tried.

    Numbers must be finite (``alpha=nan`` would silently act as 0 and
    ``bootstrap_multiplier=nan`` crash at the first eviction); the policy is
    then built once so its own range checks run before the simulation does.
    """
    from twin.policies import POLICIES, get_policy

    known = [p for p in policies if p in POLICIES]  # the --policy check names the others
    classes = [POLICIES[p] for p in known]
    classes += [c for c in POLICIES.values() if c not in classes]
    typed: dict[str, Any] = {}
    for key, text in options.items():
        want = _option_type(classes, key)
        args = set(typing.get_args(want)) or {want}
        flag = f"--policy-option {key}={text}"
        if int in args:
            try:
                typed[key] = int(text)
            except ValueError:
                raise TwinError(f"{flag}: expected a whole number") from None
        elif float in args:
            try:
                value = float(text)
            except ValueError:
                raise TwinError(f"{flag}: expected a number") from None
            if not math.isfinite(value):
                raise TwinError(f"{flag}: must be a finite number")
            typed[key] = value
        else:
            typed[key] = text
    for policy in known:
        # Each policy is tried with the options it declares; an option none of
        # the named policies takes is the command's own error to report.
        mine = {k: v for k, v in typed.items() if k in POLICIES[policy].OPTIONS}
        try:
            get_policy(policy, **mine)
        except TwinError as err:
            raise TwinError(f"--policy-option: {err}") from None
    return typed


def cache_gb(flag: str, value: str) -> float | str:
    """``--cache-gb``: ``auto`` (the shared KV pool) or GB >= 0 (a dedicated cache)."""
    if value.strip().lower() == "auto":
        return "auto"
    try:
        gb = float(value)
    except ValueError:
        raise TwinError(f"{flag} {value!r}: expected auto or a number of GB") from None
    number(flag, gb, low=0, high=MAX_CACHE_GB)
    return gb
