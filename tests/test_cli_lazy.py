"""The root command list is lazy: ``twin --help`` imports no command module, and each
line it prints is the help typer shows once the command is imported."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer

from twin.cli.lazy import COMMANDS, LazyCommands, load_command, source_help
from twin.cli.main import run

HEAVY = ("numpy", "pyarrow", "markdown_it", "pygments")


def _help_imports(argv: list[str]) -> tuple[set[str], set[str]]:
    """The ``twin`` modules and the :data:`HEAVY` packages' modules that ``twin ARGV``
    (a help) imports, in a fresh interpreter."""
    code = (
        "import contextlib, io, sys\n"
        "from twin.cli.main import run\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    assert run({argv!r}) == 0\n"
        "assert 'Usage' in out.getvalue()\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('twin'))))\n"
        f"print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    modules, heavy = done.stdout.split("\n")[:2]
    return set(modules.split()), set(heavy.split())


def test_help_imports_no_command_module() -> None:
    modules, heavy = _help_imports(["--help"])
    assert modules == {
        "twin",
        "twin.cli",
        "twin.cli.lazy",
        "twin.cli.main",
        "twin.cli.rich_help",
        "twin.cli.root",
        "twin.errors",
    }
    # No numpy or pyarrow; and typer's formatter imports rich.markdown (markdown_it,
    # pygments) for markdown markup only: twin.cli.rich_help defers it, a third of the
    # help's CPU (issue 33)
    assert heavy == set()


@pytest.mark.parametrize("argv", [["models", "--help"], ["models", "show", "--help"]])
def test_models_help_imports_no_engine(argv: list[str]) -> None:
    # What these helps show (presets, precisions) needs neither the engine nor numpy.
    modules, heavy = _help_imports(argv)
    assert "twin.cli.models" in modules
    assert not any(
        m.split(".")[1] in ("engine", "costmodel", "policies") for m in modules if "." in m
    )
    assert heavy == set()


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


def _markdown_help(defer: bool) -> str:
    """The help of a ``rich_markup_mode="markdown"`` app, in a fresh interpreter."""
    deferring = "from twin.cli.rich_help import defer_unused_rich\ndefer_unused_rich()\n"
    code = (
        "import typer\n"
        + (deferring if defer else "")
        + "app = typer.Typer(rich_markup_mode='markdown', add_completion=False)\n"
        "@app.command()\n"
        "def go(n: int = typer.Option(1, help='How **many**: `n` times.')) -> None:\n"
        "    'Do *it*: **now**.'\n"
        "app(['--help'], prog_name='x')\n"
    )
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_deferred_markdown_renders_as_the_real_one() -> None:
    # An app that does use markdown markup gets the real rich.markdown on first use.
    shown = _markdown_help(defer=True)
    assert "many" in shown and "**" not in shown  # parsed as markdown, not printed raw
    assert shown == _markdown_help(defer=False)


def test_stand_ins_reach_the_real_classes() -> None:
    import rich.markdown
    import rich.traceback

    from twin.cli.rich_help import DEFERRED, stand_in

    markdown = stand_in("rich.markdown", DEFERRED["rich.markdown"]).Markdown
    made = markdown("# title")
    assert isinstance(made, rich.markdown.Markdown) and isinstance(made, markdown)
    traceback = stand_in("rich.traceback", DEFERRED["rich.traceback"]).Traceback
    assert traceback.from_exception == rich.traceback.Traceback.from_exception


def test_a_stand_in_read_while_it_is_lent_fails_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    # While typer.rich_utils runs (or from another thread meanwhile) the stand-in module
    # is what ``import rich.markdown`` finds: a missing attribute reads as missing and a
    # call says why, instead of each stand-in loading itself again without end.
    from twin.cli.rich_help import DEFERRED, stand_in

    lent = stand_in("rich.markdown", DEFERRED["rich.markdown"])
    monkeypatch.setitem(sys.modules, "rich.markdown", lent)
    markdown = lent.Markdown
    assert getattr(markdown, "__origin__", None) is None
    assert "Markdown" in repr(markdown | int)  # a union's repr reads __origin__
    with pytest.raises(ImportError, match="stand-in"):
        markdown("# title")
