"""`aenv start` (a new sandbox with a shell attached), `aenv connect` (a shell in a running
one), `aenv exec` (a command, its streams apart, its exit code ours)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer

from aenv_cli.commands.context import Clients, clients
from aenv_cli.commands.failures import clean_errors, stderr
from aenv_cli.commands.sandboxes import IdArgument, parse_duration, parse_pairs
from aenv_cli.commands.session import ProcessSpec, attach_pty, command_line, run_command
from aenv_common.errors import AenvError, InvalidArgument

EnvOption = Annotated[list[str] | None, typer.Option(
    "--env", "-e", help="KEY=VALUE in the guest process's environment (repeatable).")]
WorkdirOption = Annotated[str | None, typer.Option(
    "--workdir", "-w", help="The guest process's working directory.")]
UserOption = Annotated[str | None, typer.Option(
    "--user", "-u", help="The guest user to run as (else the template's).")]


@clean_errors
def start(
    ctx: typer.Context,
    template: Annotated[str, typer.Argument(help="Template name or id.")] = "base",
    detach: Annotated[bool, typer.Option(
        "--detach", "-d", help="Only create it and print its id.")] = False,
    keep: Annotated[bool, typer.Option(
        "--keep", help="Keep the sandbox when the shell exits.")] = False,
    timeout: Annotated[str, typer.Option(help="Its time to live, e.g. 30m.")] = "1h",
    metadata: Annotated[list[str] | None, typer.Option(
        "--metadata", "-m", help="KEY=VALUE metadata (repeatable).")] = None,
    env: EnvOption = None,
    workdir: WorkdirOption = None,
    user: UserOption = None,
) -> None:
    """Create a sandbox and attach a shell to it; the shell's exit code is aenv's. The sandbox
    is killed when the shell exits, unless --keep.

    Example: aenv start base   |   aenv start python-dev --detach
    """
    given = clients(ctx)
    envs = parse_pairs(env or [], "--env")
    if not detach:
        _need_terminal(given, "start", "use --detach, or `aenv exec`")
    made = given.api.create(template, timeout_s=parse_duration(timeout),
                            metadata=parse_pairs(metadata or [], "--metadata"), envs=envs)
    sandbox_id = str(made.get("sandboxID", ""))
    if detach:
        given.out.print(sandbox_id)
        return
    try:
        code = _shell(given, sandbox_id, ProcessSpec(user, workdir, envs))
    finally:
        _end(given, sandbox_id, keep)
    raise typer.Exit(code)


@clean_errors
def connect(
    ctx: typer.Context, sandbox_id: IdArgument,
    env: EnvOption = None, workdir: WorkdirOption = None, user: UserOption = None,
) -> None:
    """Attach a shell to a running sandbox (a paused one is resumed); it lives on after.

    Example: aenv connect ib0rbwk8ypuqz3fj8pk4x
    """
    given = clients(ctx)
    _need_terminal(given, "connect", "use `aenv exec`")
    spec = ProcessSpec(user, workdir, parse_pairs(env or [], "--env"))
    raise typer.Exit(_shell(given, sandbox_id, spec))


@clean_errors
def exec_(
    ctx: typer.Context, sandbox_id: IdArgument,
    command: Annotated[list[str], typer.Argument(
        help="The command: one argument is a shell line, several an argv.",
        show_default=False)],
    interactive: Annotated[bool, typer.Option(
        "--interactive", "-i", help="Send our stdin to the command.")] = False,
    tty: Annotated[bool, typer.Option(
        "--tty", "-t", help="Run it on a PTY (one stream, raw terminal).")] = False,
    env: EnvOption = None, workdir: WorkdirOption = None, user: UserOption = None,
) -> None:
    """Run a command in a sandbox: its stdout and stderr stream to ours, its exit code is ours.

    Example: aenv exec ib0rbwk8ypuqz3fj8pk4x -- python3 -c 'print(1)'
    """
    given = clients(ctx)
    spec = ProcessSpec(user, workdir, parse_pairs(env or [], "--env"))
    # Options end at the id; a `--` after it (docker's habit) is not part of the command.
    line = command_line(command[1:] if command[:1] == ["--"] else command)
    if tty:
        _need_terminal(given, "exec -t", "leave out -t")

    async def run() -> int:
        guest = await given.guest(sandbox_id)
        if tty:
            return await attach_pty(given.server, guest, given.terminal, spec, line)
        return await run_command(given.server, guest, given.terminal, spec, line,
                                 stdin=interactive)

    raise typer.Exit(asyncio.run(run()))


def _shell(given: Clients, sandbox_id: str, spec: ProcessSpec) -> int:
    async def run() -> int:
        guest = await given.guest(sandbox_id)
        return await attach_pty(given.server, guest, given.terminal, spec)

    return asyncio.run(run())


def _need_terminal(given: Clients, what: str, instead: str) -> None:
    if not given.terminal.interactive():
        raise InvalidArgument(f"{what} needs a terminal on stdin and stdout: {instead}")


def _end(given: Clients, sandbox_id: str, keep: bool) -> None:
    if keep:
        stderr.print(f"kept sandbox {sandbox_id}", highlight=False)
        return
    with contextlib.suppress(AenvError):  # already gone: nothing to kill
        given.api.kill(sandbox_id)
