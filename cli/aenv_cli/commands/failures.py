"""The edge of every people-facing command: a typed error becomes one line on stderr and a
non-zero exit code, never a traceback."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup

from aenv_cli.commands import guests
from aenv_common.errors import AenvError, InvalidArgument

P = ParamSpec("P")
R = TypeVar("R")

# 2 is Click's own exit code for bad usage; bad input found later reads the same.
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def exit_code_of(err: AenvError) -> int:
    return EXIT_USAGE if isinstance(err, InvalidArgument) else EXIT_FAILURE


def fail(err: AenvError) -> typer.Exit:
    """Prints `err` as one line on stderr; the Exit to raise."""
    stderr.print(f"[red]error:[/] {escape(' '.join(err.message.split()))}")
    return typer.Exit(exit_code_of(err))


def clean_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Wraps a command: typed errors and Ctrl-C end it with one line and an exit code.
    (Typer reads the wrapped function's signature through `functools.wraps`.)"""

    @functools.wraps(command)
    def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            result = _typed(command, *args, **kwargs)
        except typer.Exit as ended:
            _leave_if_sdk_used(ended.exit_code)
            raise
        _leave_if_sdk_used(0)
        return result

    return wrapped


def _typed(command: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    try:
        return command(*args, **kwargs)
    except AenvError as err:
        raise fail(err) from None
    except KeyboardInterrupt:
        stderr.print("[red]interrupted[/]")
        raise typer.Exit(EXIT_INTERRUPTED) from None


def _leave_if_sdk_used(code: int) -> None:
    """After the e2b SDK ran, the process ends here, skipping the interpreter's finalization:
    the SDK's HTTP pools run on a Rust runtime whose threads, still up at finalization, aborted
    the process now and then (SIGABRT in place of the command's exit code)."""
    if not guests.sdk_used():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class OneLineUsageErrors(TyperGroup):
    """`aenv`'s command group: bad usage (a missing argument, an unknown option or command, a
    value out of range) is one line on stderr and exit code 2, like every other error, in place
    of Click's usage block and boxed message."""

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, prog_name: str | None = None,
        complete_var: str | None = None, standalone_mode: bool = True, **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except typer.TyperException as err:  # Click's (vendored by Typer) usage errors
            if type(err).__name__ == "NoArgsIsHelpError":
                sys.exit(EXIT_USAGE)  # the help is printed already
            ctx = getattr(err, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            shown = err.format_message() if hasattr(err, "format_message") else str(err)
            stderr.print(f"[red]error:[/] {escape(' '.join(shown.split()) + hint)}")
            sys.exit(getattr(err, "exit_code", EXIT_USAGE))
        except typer.Abort:
            stderr.print("[red]aborted[/]")
            sys.exit(EXIT_FAILURE)
        sys.exit(code if isinstance(code, int) else 0)
