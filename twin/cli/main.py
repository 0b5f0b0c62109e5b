"""The console entry point: every failure a user can cause is one line on stderr.

The command modules are imported here, inside the handler, so even a Ctrl-C
during start-up (importing numpy, pyarrow, ...) ends with one line. Typer runs
with ``standalone_mode=False`` so that its usage errors (a bad flag value) come
back as exceptions and are printed on one line like every other error, instead
of a multi-line box.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

USAGE_EXIT = 2  # bad input: a flag, a file, a value (click uses 2 for usage errors too)
INTERRUPTED_EXIT = 130  # 128 + SIGINT, as shells report a Ctrl-C
TERMINATED_EXIT = 143  # 128 + SIGTERM, as shells report a process that SIGTERM ended


def _say(text: str) -> None:
    # Plain text, not rich markup: a message such as pip install 'twin[ray]'
    # must keep its square brackets, and must not be wrapped onto several lines.
    print(" ".join(text.split()), file=sys.stderr)


def run(argv: list[str] | None = None) -> int:
    """Run the ``twin`` command line on ``argv`` (default: ``sys.argv[1:]``); return the status."""
    if argv is None:
        argv = sys.argv[1:]
    empty = _empty_argument(argv)
    if empty is not None:
        _say(f"error: {empty}: an empty value (give one, or leave the flag out)")
        return USAGE_EXIT
    from twin.errors import Terminated

    with _sigterm_raises():
        try:
            return _run(argv)
        except Terminated:  # during start-up, or escaping a command's own handling
            _say("terminated")
            return TERMINATED_EXIT


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While a command runs, SIGTERM raises ``twin.errors.Terminated`` in the main thread
    (held back while an output set is being renamed into place, ``twin.atomic.interrupt``),
    so every ``finally`` runs: pool workers are killed, temporaries removed, a half-made
    output set dropped and the output folder's claim released; the command then exits
    with 143. Python's default for SIGTERM is to die at once, leaving all of them behind
    (issue 32). A second SIGTERM during that clean-up ends the process at once."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread (a test calling run from a thread)
        return

    def on_term(signum: int, frame: object) -> None:
        from twin.atomic import interrupt
        from twin.errors import Terminated

        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        interrupt(Terminated())

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(argv: list[str]) -> int:
    try:
        from typer.exceptions import TyperException

        from twin.errors import TwinError
    except KeyboardInterrupt:
        _say("interrupted")
        return INTERRUPTED_EXIT
    try:
        from twin.cli.root import app

        rv = app(args=argv, prog_name="twin", standalone_mode=False)
    except TwinError as err:
        _say(f"error: {err}")
        return USAGE_EXIT
    except KeyboardInterrupt:
        _say("interrupted")
        return INTERRUPTED_EXIT
    except TyperException as err:  # typer's click: usage errors, Abort, NoArgsIsHelp
        return _usage(err)
    except BrokenPipeError:
        # The reader of our output went away (``| head``): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as err:  # a disk filled, a folder vanished: say which file, no traceback
        name = f"{err.filename}: " if err.filename else ""
        _say(f"error: {name}{err.strerror or err}")
        return USAGE_EXIT
    if rv == INTERRUPTED_EXIT:  # typer turns a Ctrl-C inside a command into Exit(130)
        _say("interrupted")
    return rv if isinstance(rv, int) else 0


def _empty_argument(argv: list[str]) -> str | None:
    """The flag given an empty value (``--out ''``, ``--out=``), or None.

    No flag or argument of twin means anything when empty, and a path flag would
    otherwise read it as the current folder (``Path('') == Path('.')``): ``--out ''``
    wrote a run's outputs into the working directory (issue 32).
    """
    for i, arg in enumerate(argv):
        if arg == "--":
            return None
        if arg.startswith("--") and arg.endswith("=") and len(arg) > 3:
            return arg[:-1]
        if not arg.strip():
            before = argv[i - 1] if i and argv[i - 1].startswith("-") else None
            return f"{before} {arg!r}" if before else f"argument {i + 1} ({arg!r})"
    return None


def _usage(err: BaseException) -> int:
    from typer._click import exceptions as click_exc  # typer's bundled click

    if isinstance(err, click_exc.NoArgsIsHelpError):
        print(err.ctx.get_help() if err.ctx else err.format_message())
        return USAGE_EXIT
    if isinstance(err, click_exc.ClickException):
        ctx = getattr(err, "ctx", None)
        command = ctx.command_path if ctx is not None else "twin"
        _say(f"error: {command}: {err.format_message()} (see {command} --help)")
        return err.exit_code
    _say("interrupted")  # click's Abort (Ctrl-C or end of input at a prompt)
    return INTERRUPTED_EXIT


def main() -> None:
    """``twin`` console script."""
    sys.exit(run())
