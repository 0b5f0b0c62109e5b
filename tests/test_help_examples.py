"""Every example in every ``--help`` is a whole command that parses as printed.

A wrapped example must end its lines with ``\\`` (a shell continuation), else a
user pasting it runs the first line alone and the rest as a second command.
The ``-m slow`` test runs each example as printed in a scratch folder.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
import typer

from twin.cli import app
from twin.cli.main import run

DATA = Path(__file__).parent / "data"


def _commands() -> list[tuple[str, object]]:
    """(path, click command) for the root and every group and command under it."""
    root = typer.main.get_command(app)
    out: list[tuple[str, object]] = []

    def walk(path: str, cmd) -> None:
        out.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(f"{path} {name}", sub)

    walk("twin", root)
    return out


def _examples(help_text: str) -> list[str]:
    """The example commands of one help text, continuation lines joined, as ``--help``
    prints them (rich markup's escaped bracket ``\\[`` shows as ``[``)."""
    lines = help_text.replace("\\[", "[").splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() in ("Example:", "Examples:")]
    found: list[str] = []
    for i in starts:
        pending = ""
        for line in lines[i + 1 :]:
            text = line.strip()
            if not text:
                if pending:
                    raise AssertionError(f"example ends in a continuation: {pending!r}")
                continue
            if not line.startswith(" ") and not pending:
                break  # the example block ended
            joined = f"{pending} {text}".strip()
            if joined.endswith("\\"):
                pending = joined[:-1].strip()
                continue
            found.append(joined)
            pending = ""
    return found


def all_examples() -> list[str]:
    seen: list[str] = []
    for _, cmd in _commands():
        for ex in _examples(getattr(cmd, "help", None) or ""):
            if ex not in seen:
                seen.append(ex)
    return seen


def test_every_command_with_work_to_do_shows_examples() -> None:
    examples = all_examples()
    assert len(examples) >= 15
    for path, cmd in _commands():
        if not hasattr(cmd, "commands") and not getattr(cmd, "hidden", False):
            assert _examples(cmd.help or ""), f"{path} --help has no example"


@pytest.mark.parametrize("example", all_examples())
def test_example_is_one_whole_command_that_parses(example: str) -> None:
    words = shlex.split(example)
    assert words[0] == "twin", f"not a twin command (a wrapped line without '\\'?): {example}"
    cmd = typer.main.get_command(app)
    args = words[1:]
    while hasattr(cmd, "commands") and args and args[0] in cmd.commands:
        cmd = cmd.commands[args.pop(0)]
    assert not hasattr(cmd, "commands"), f"{example}: names no command"
    # Parses every flag and value (types, ranges, required ones) without running.
    cmd.make_context(" ".join(words[: len(words) - len(args)]), list(args))


# Examples that need what a scratch folder cannot have: a GPU, or a profile
# measured on one (`twin calibrate` is its own issue's business).
_NEEDS_MORE = ("--device cuda", "twin calibrate --gpu h100", "--transfer-from")


@pytest.mark.slow
def test_every_example_runs_as_printed(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(DATA / "mooncake_small.jsonl", "mooncake_synthetic_trace.jsonl")
    Path("path/to").mkdir(parents=True)
    shutil.copy(DATA / "hf_configs" / "llama-3-8b.json", "path/to/config.json")
    assert run(["workload", "generate", "chat", "-n", "20", "-o", "chat.parquet"]) == 0
    shutil.copy("chat.parquet", "trace.parquet")
    # A profile file standing in for one calibrated on an A100.
    profiles = Path(__file__).parents[1] / "twin/calibration/profiles"
    shutil.copy(profiles / "a100-80gb-vllm.json", "my-a100.json")
    failed = []
    for example in all_examples():
        if any(s in example for s in _NEEDS_MORE):
            continue
        rc = run(shlex.split(example)[1:])
        err = capsys.readouterr().err
        if rc != 0:
            failed.append(f"{example}: exit {rc}: {err.strip()[-300:]}")
    assert not failed, "\n".join(failed)
