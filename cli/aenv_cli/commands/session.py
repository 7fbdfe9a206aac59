"""Processes in a sandbox wired to the local terminal, through the official SDK: a PTY (raw
terminal, window resizes, every key — Ctrl-C included — to the guest) or a command whose stdout
and stderr stay apart. Both end with the guest process's exit code."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from e2b import AsyncSandbox, CommandExitException, PtySize, SandboxException
from e2b.sandbox_async.commands.command_handle import AsyncCommandHandle

from aenv_cli.commands.guests import sdk_errors
from aenv_cli.commands.terminal import Terminal
from aenv_cli.server import Server
from aenv_common.errors import AenvError

# Ctrl-D: a PTY's end of input, sent when local stdin ends (it is not a terminal then).
END_OF_INPUT = b"\x04"
# The text encoding that is each byte as it is (see bytes_through).
BYTE_TEXT = "latin-1"
# An exit code the guest could not give (the process ended by a signal, or was lost).
EXIT_UNKNOWN = 255


@dataclass(frozen=True)
class ProcessSpec:
    """How the guest process runs: as whom, where, with which variables."""

    user: str | None = None
    cwd: str | None = None
    envs: dict[str, str] = field(default_factory=dict)


def command_line(argv: Sequence[str]) -> str:
    """One argument is a shell command line (`aenv exec ID 'ls | wc -l'`); several are an argv,
    quoted so each reaches the program as given (`aenv exec ID ls -la /tmp`)."""
    return argv[0] if len(argv) == 1 else shlex.join(argv)


async def attach_pty(server: Server, guest: AsyncSandbox, terminal: Terminal,
                     spec: ProcessSpec, command: str | None = None) -> int:
    """A login shell (or `command`, in place of the shell) on a PTY the size of the terminal,
    until it exits: its exit code."""
    envs = dict(spec.envs)
    if command is not None:
        # The SDK's PTY is always a login bash: it runs PROMPT_COMMAND before its first prompt,
        # and `exec` puts the command in its place, so the command's exit code is the PTY's.
        envs["PROMPT_COMMAND"] = f"unset PROMPT_COMMAND; exec /bin/bash -c {shlex.quote(command)}"
    columns, rows = terminal.size()
    async with sdk_errors(server):
        handle = await guest.pty.create(
            PtySize(rows=rows, cols=columns), on_data=terminal.write, user=spec.user,
            cwd=spec.cwd, envs=envs, timeout=0)
        resizes: set[asyncio.Task[Any]] = set()

        def resized() -> None:
            columns, rows = terminal.size()
            task = asyncio.create_task(guest.pty.resize(handle.pid, PtySize(rows=rows,
                                                                            cols=columns)))
            resizes.add(task)
            task.add_done_callback(resizes.discard)

        with terminal.raw():
            undo = terminal.on_resize(resized)
            pump = asyncio.create_task(_pty_input(guest, handle.pid, terminal))
            try:
                return await exit_code(handle)
            finally:
                undo()
                await _stop(pump, *resizes)


async def run_command(server: Server, guest: AsyncSandbox, terminal: Terminal,
                      spec: ProcessSpec, command: str, *, stdin: bool) -> int:
    """`command` with its stdout and stderr streamed to ours, apart and byte for byte; stdin
    forwarded (then closed at its end) when asked."""
    async with sdk_errors(server):
        handle = await guest.commands.run(
            command, background=True, envs=spec.envs, user=spec.user, cwd=spec.cwd,
            stdin=stdin, timeout=0, retain_output=False,
            on_stdout=lambda text: terminal.write(text.encode(BYTE_TEXT)),
            on_stderr=lambda text: terminal.write_err(text.encode(BYTE_TEXT)))
        bytes_through(handle)
        pump = asyncio.create_task(_command_input(guest, handle.pid, terminal)) if stdin else None
        try:
            return await exit_code(handle)
        finally:
            if pump is not None:
                await _stop(pump)


def bytes_through(handle: object) -> None:
    """Makes the SDK's handle hand its callbacks the output's bytes as latin-1 text (one code
    point per byte, encoded back by them) instead of UTF-8 text, which replaces what is not
    UTF-8: binary output (an archive, an image) passes unchanged. Called right after
    `commands.run` returns: the handle reads no event before this coroutine next yields."""
    for stream in ("_stdout_decoder", "_stderr_decoder"):
        if hasattr(handle, stream):
            setattr(handle, stream, codecs.getincrementaldecoder(BYTE_TEXT)())


async def exit_code(handle: AsyncCommandHandle[Any]) -> int:
    try:
        result = await handle.wait()
    except CommandExitException as ended:
        code = ended.exit_code
    except SandboxException:
        raise
    except Exception as err:  # the SDK's own: its stream ended without the process's end
        raise AenvError(f"the connection to the sandbox ended: {err}") from None
    else:
        code = result.exit_code
    return code if 0 <= code <= 255 else EXIT_UNKNOWN


async def _pty_input(guest: AsyncSandbox, pid: int, terminal: Terminal) -> None:
    with contextlib.suppress(SandboxException):  # the shell is gone: its end says the rest
        async for chunk in terminal.read_input():
            await guest.pty.send_stdin(pid, chunk)
        await guest.pty.send_stdin(pid, END_OF_INPUT)


async def _command_input(guest: AsyncSandbox, pid: int, terminal: Terminal) -> None:
    with contextlib.suppress(SandboxException):
        async for chunk in terminal.read_input():
            await guest.commands.send_stdin(pid, chunk)
        await guest.commands.close_stdin(pid)


async def _stop(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
