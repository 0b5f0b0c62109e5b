"""Every example printed by a command's ``--help`` parses as printed (issue 17).

The examples are read from the help text of every command and sub-command of
the ``twin`` app (paragraphs after ``Example:``/``Examples:``, a wrapped line
continuing the one above), and each is handed to the command's own parser:
an unknown flag, a missing value, a value of the wrong type or a wrong
sub-command fails here. Whether the files an example names exist is the
reader's business, so nothing is run.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from twin.cli import app


def _is_group(cmd: Any) -> bool:
    """A command with sub-commands (typer's groups; typer vendors its click)."""
    return bool(getattr(cmd, "commands", None))


def _commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    if _is_group(group):
        for name, sub in group.commands.items():
            yield from _commands(sub, (*path, name))


def _resolve(root: Any, path: tuple[str, ...]) -> Any:
    cmd = root
    for name in path:
        assert _is_group(cmd)
        cmd = cmd.commands[name]
    return cmd


def _examples(text: str) -> list[str]:
    """The example command lines of a help text (wrapped lines joined)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() in ("Example:", "Examples:")]
    if not starts:
        return []
    out: list[str] = []
    for line in lines[starts[0] + 1 :]:
        s = line.strip()
        if not s:
            continue
        if s.startswith("twin "):
            out.append(s)
        elif out:
            out[-1] += " " + s
    return out


ROOT = typer.main.get_command(app)
COMMANDS = list(_commands(ROOT))
CASES = [
    (path, example) for path in COMMANDS for example in _examples(_resolve(ROOT, path).help or "")
]


def test_every_leaf_command_prints_examples():
    leaves = [p for p in COMMANDS if not _is_group(_resolve(ROOT, p))]
    missing = [" ".join(p) for p in leaves if not _examples(_resolve(ROOT, p).help or "")]
    assert not missing, f"commands without examples in --help: {missing}"


@pytest.mark.parametrize(("path", "example"), CASES, ids=[e for _, e in CASES])
def test_each_help_example_parses_as_printed(path, example):
    argv = shlex.split(example)
    assert argv[0] == "twin"
    args = argv[1:]
    cmd: Any = ROOT
    # Walk the sub-commands the example names, then parse the rest with the leaf.
    while _is_group(cmd) and args and args[0] in cmd.commands:
        cmd = cmd.commands[args[0]]
        args = args[1:]
    assert not _is_group(cmd), f"{example!r} names no command"
    ctx = cmd.make_context(cmd.name or "", list(args))
    assert ctx.params is not None


def test_a_wrong_example_would_fail_to_parse():
    simulate = _resolve(ROOT, ("simulate",))
    with pytest.raises(Exception, match="No such option"):
        simulate.make_context("simulate", ["--cache-gigabytes", "40"])
    with pytest.raises(Exception, match="valid number"):
        simulate.make_context("simulate", ["--cache-gb", "forty"])
    assert len(CASES) >= 20  # every command's examples were found
