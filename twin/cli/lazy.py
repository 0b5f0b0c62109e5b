"""Commands registered by name and imported on first use, so ``twin --help`` imports none.

The root group lists every command from a table of ``name -> (module, attribute)``.
Running a command imports its module; printing the root's help does not: each line
of the command list is read from the module's source (the command function's
docstring, or a sub-app's ``typer.Typer(help=...)``) with :mod:`ast`, the same text
typer would show after importing it. Click documents this pattern ("Lazily Loading
Subcommands", click 8 docs); typer builds each command the way ``app.command`` and
``app.add_typer`` do (``typer.main.get_command``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import typer
from typer import _click as click  # typer's bundled click
from typer.core import TyperGroup

# What ``twin`` runs, in the order ``twin --help`` lists them: (module, attribute), where
# the attribute is a command function or a sub-app (``typer.Typer``). A command module may
# define ``<attribute>_epilog()``: the text its ``--help`` ends with, built when it loads.
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("twin.cli.simulate", "simulate"),
    "replay": ("twin.cli.replay", "replay"),
    "calibrate": ("twin.cli.calibrate", "calibrate"),
    "cost": ("twin.cli.cost", "cost"),
    "validate": ("twin.cli.validate", "validate"),
    "reproduce": ("twin.cli.reproduce", "reproduce_cmd"),
    "plan": ("twin.cli.plan", "plan_cmd"),
    "models": ("twin.cli.models", "app"),
    "workload": ("twin.cli.workload", "app"),
    "report": ("twin.cli.report", "app"),
}


def load_command(name: str, module: str, attribute: str) -> Any:
    """The click command ``name`` built from ``module.attribute`` (imported now)."""
    loaded = importlib.import_module(module)
    target = getattr(loaded, attribute)
    command: click.Command
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        epilog = getattr(loaded, f"{attribute}_epilog", None)
        single = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        single.command(name, epilog=None if epilog is None else epilog())(target)
        command = typer.main.get_command(single)
    command.name = name
    return command


def source_help(module: str, attribute: str) -> str:
    """The help typer shows for ``module.attribute``, read from the source without importing
    the module: the function's docstring, or the ``help=`` of ``attribute = typer.Typer(...)``."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise LookupError(f"{module}: no source")
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read(), spec.origin)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == attribute:
            return ast.get_docstring(node) or ""
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == attribute for t in node.targets)
            and isinstance(node.value, ast.Call)
        ):
            for keyword in node.value.keywords:
                if keyword.arg == "help":
                    return str(ast.literal_eval(keyword.value))
            return ""
    raise LookupError(f"{module}.{attribute}: not a function or an assignment in its source")


class LazyCommands(MutableMapping[str, Any]):
    """A group's commands: the table's, imported when looked up, plus any added directly."""

    def __init__(self, table: Mapping[str, tuple[str, str]], added: Mapping[str, Any]) -> None:
        self.table = dict(table)
        self.loaded: dict[str, Any] = dict(added)

    def __getitem__(self, name: str) -> Any:
        if name not in self.loaded:
            if name not in self.table:
                raise KeyError(name)
            self.loaded[name] = load_command(name, *self.table[name])
        return self.loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self.table.pop(name, None)
        del self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.table
        yield from (name for name in self.loaded if name not in self.table)

    def __len__(self) -> int:
        return len(self.table) + sum(name not in self.table for name in self.loaded)


class LazyGroup(TyperGroup):
    """The root group: :data:`COMMANDS` imported on first use; its help lists them from
    their source (:func:`source_help`) without importing any."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(COMMANDS, self.commands)
        self._listing = False

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        commands = self.commands
        if (
            self._listing
            and isinstance(commands, LazyCommands)
            and cmd_name in commands.table
            and cmd_name not in commands.loaded
        ):
            return typer.core.TyperCommand(cmd_name, help=source_help(*commands.table[cmd_name]))
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # names only (TyperGroup's reads every item: an import)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
