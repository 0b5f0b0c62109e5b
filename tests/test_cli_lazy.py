"""The root command list is lazy: ``twin --help`` imports no command module, and each
line it prints is the help typer shows once the command is imported."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer

from twin.cli.lazy import COMMANDS, LazyCommands, load_command, source_help
from twin.cli.main import run


def test_help_imports_no_command_module() -> None:
    code = (
        "import contextlib, io, sys\n"
        "from twin.cli.main import run\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    assert run(['--help']) == 0\n"
        "assert 'simulate' in out.getvalue()\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('twin'))))\n"
        "print('numpy' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    modules, numpy = done.stdout.split("\n")[:2]
    assert set(modules.split()) == {
        "twin",
        "twin.cli",
        "twin.cli.lazy",
        "twin.cli.main",
        "twin.cli.root",
        "twin.errors",
    }
    assert numpy == "False"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_listed_help_is_the_commands_own(name: str) -> None:
    command = load_command(name, *COMMANDS[name])
    assert command.name == name
    assert source_help(*COMMANDS[name]) == (command.help or "")


def test_sub_apps_stay_groups() -> None:
    # A sub-app of one command (``report``) must not collapse into that command.
    for name in ("models", "workload", "report"):
        assert isinstance(load_command(name, *COMMANDS[name]), typer.core.TyperGroup)


def test_root_help_lists_every_command(capsys) -> None:
    assert run(["--help"]) == 0
    listed = capsys.readouterr().out
    for name in COMMANDS:
        assert f" {name} " in listed


def test_lazy_commands_load_once_and_take_additions() -> None:
    table = {"cost": COMMANDS["cost"]}
    commands = LazyCommands(table, {"extra": "added"})
    assert list(commands) == ["cost", "extra"] and len(commands) == 2
    assert commands.loaded.keys() == {"extra"}
    first = commands["cost"]
    assert commands["cost"] is first  # imported and built once
    with pytest.raises(KeyError):
        commands["nope"]
    del commands["extra"]
    assert list(commands) == ["cost"]


def test_source_help_refuses_what_it_cannot_read() -> None:
    with pytest.raises(LookupError):
        source_help("twin.cli.cost", "COST_NOT_THERE")
    with pytest.raises(LookupError):
        source_help("twin.no_such_module", "x")
