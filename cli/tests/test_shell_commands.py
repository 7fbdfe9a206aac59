"""`aenv start|connect|exec` over the fake server, a fake SDK sandbox and a fake terminal."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator
from typing import Any, cast

import pytest
from aenv_cli_fake_guest import FakeGuest, FakeTerminal
from aenv_cli_fake_server import FakeServer, fake_clients, invoke, sandbox
from e2b import AsyncSandbox
from e2b.envd.process import process_pb
from e2b.sandbox_async.commands.command_handle import AsyncCommandHandle
from protobuf import Oneof

from aenv_cli.commands import guests
from aenv_cli.commands.context import Clients
from aenv_cli.commands.session import command_line
from aenv_common.errors import NotFound


@pytest.fixture
def server() -> FakeServer:
    made = FakeServer()
    made.add(sandbox("sb1"))
    return made


def clients_with(server: FakeServer, guest: FakeGuest, terminal: FakeTerminal) -> Clients:
    opened: list[str] = []

    async def open_guest(sandbox_id: str) -> AsyncSandbox:
        opened.append(sandbox_id)
        if sandbox_id not in server.sandboxes:
            raise NotFound(f"sandbox \"{sandbox_id}\" not found")
        return cast(AsyncSandbox, guest)

    made: Clients = fake_clients(server, open_guest=open_guest, terminal=terminal)
    return made


def test_start_attaches_a_raw_pty_resizes_and_exits_with_the_shell(server: FakeServer) -> None:
    guest = FakeGuest()
    terminal = FakeTerminal([b"ls\r", (120, 40), b"\x03", b"exit 3\r"], eof=False)
    result = invoke(clients_with(server, guest, terminal), "start", "base", "-e", "A=1",
                    "-w", "/tmp", "-u", "root", "--timeout", "10m")
    assert result.exit_code == 3, result.output
    assert terminal.raw_entered == 1 and not terminal.raw_now
    created = guest.pty.created[0]
    assert created["size"] == (80, 24) and created["timeout"] == 0
    assert (created["user"], created["cwd"], created["envs"]) == ("root", "/tmp", {"A": "1"})
    assert guest.pty.sizes == [(120, 40)]
    assert b"^C" in terminal.out and terminal.out.startswith(b"$ ls\r")
    made = next(body for method, path, _, body in server.requests
                if (method, path) == ("POST", "/sandboxes"))
    assert made["timeout"] == 600 and made["envVars"] == {"A": "1"}
    assert list(server.sandboxes) == ["sb1"]  # the new one was killed at the end


def test_start_keep_leaves_the_sandbox(server: FakeServer) -> None:
    terminal = FakeTerminal([b"exit 0\r"], eof=False)
    result = invoke(clients_with(server, FakeGuest(), terminal), "start", "--keep")
    assert result.exit_code == 0 and "kept sandbox sbx2" in result.stderr
    assert "sbx2" in server.sandboxes


def test_start_detach_prints_only_the_id(server: FakeServer) -> None:
    terminal = FakeTerminal(tty=False)
    result = invoke(clients_with(server, FakeGuest(), terminal), "start", "base", "-d")
    assert result.exit_code == 0 and result.stdout == "sbx2\n"


def test_start_without_a_terminal_is_refused_before_creating(server: FakeServer) -> None:
    result = invoke(clients_with(server, FakeGuest(), FakeTerminal(tty=False)), "start")
    assert result.exit_code == 2 and "start needs a terminal" in result.stderr
    assert list(server.sandboxes) == ["sb1"]


def test_connect_attaches_and_leaves_the_sandbox(server: FakeServer) -> None:
    terminal = FakeTerminal([b"exit 4\r"], eof=False)
    result = invoke(clients_with(server, FakeGuest(), terminal), "connect", "sb1")
    assert result.exit_code == 4 and "sb1" in server.sandboxes


def test_connect_to_an_unknown_sandbox_is_one_line(server: FakeServer) -> None:
    result = invoke(clients_with(server, FakeGuest(), FakeTerminal()), "connect", "nope")
    assert result.exit_code == 1 and result.stderr == 'error: sandbox "nope" not found\n'


def test_exec_streams_stdout_and_stderr_apart_and_returns_the_code(server: FakeServer) -> None:
    guest, terminal = FakeGuest(), FakeTerminal(tty=False)
    result = invoke(clients_with(server, guest, terminal), "exec", "-e", "K=V", "-w", "/w",
                    "-u", "user", "sb1", "out hello err oops exit 5")
    assert result.exit_code == 5
    assert (terminal.out, terminal.err) == (b"hello\n", b"oops\n")
    run = guest.commands.runs[0]
    assert run["cmd"] == "out hello err oops exit 5" and run["stdin"] is False
    assert (run["envs"], run["cwd"], run["user"], run["timeout"]) == ({"K": "V"}, "/w", "user", 0)


def test_exec_i_forwards_stdin_then_closes_it(server: FakeServer) -> None:
    guest, terminal = FakeGuest(), FakeTerminal([b"line 1\n", b"line 2\n"], tty=False)
    result = invoke(clients_with(server, guest, terminal), "exec", "-i", "sb1", "cat")
    assert result.exit_code == 0 and terminal.out == b"line 1\nline 2\n"
    assert guest.commands.process is not None and guest.commands.process.stdin_closed


def test_exec_t_runs_the_command_in_place_of_the_pty_shell(server: FakeServer) -> None:
    guest = FakeGuest()
    terminal = FakeTerminal([b"exit 2\r"], eof=False)
    result = invoke(clients_with(server, guest, terminal), "exec", "-t", "sb1", "--", "top", "-b")
    assert result.exit_code == 2 and terminal.raw_entered == 1
    assert guest.pty.created[0]["envs"]["PROMPT_COMMAND"] == (
        "unset PROMPT_COMMAND; exec /bin/bash -c 'top -b'")


def test_exec_t_without_a_terminal_is_refused(server: FakeServer) -> None:
    result = invoke(clients_with(server, FakeGuest(), FakeTerminal(tty=False)),
                    "exec", "-t", "sb1", "sh")
    assert result.exit_code == 2 and "exec -t needs a terminal" in result.stderr


@pytest.mark.parametrize(("argv", "line"), [
    (["ls -la | wc -l"], "ls -la | wc -l"),
    (["python3", "-c", "print('a b')"], "python3 -c 'print('\"'\"'a b'\"'\"')'"),
])
def test_command_lines(argv: list[str], line: Any) -> None:
    assert command_line(argv) == line


def test_after_the_sdk_ran_the_process_ends_with_the_code_at_once(
        server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """No interpreter finalization under the SDK's Rust HTTP runtime (it aborted at times)."""
    ended: list[int] = []
    monkeypatch.setattr(guests, "_used", True)
    monkeypatch.setattr(os, "_exit", ended.append)
    invoke(clients_with(server, FakeGuest(), FakeTerminal(tty=False)), "exec", "sb1", "exit 5")
    assert ended == [5]


# Not UTF-8 (a lone continuation byte, 0xff, a NUL), a 2-byte character split over two chunks.
BINARY_OUT = [b"\x89PNG\r\n\x1a\n\x00\xff\x80", b"caf\xc3", b"\xa9\xfe"]
BINARY_ERR = [b"\xc0\x00err"]


class _SdkHandleCommands:
    """`commands.run` answering the SDK's own handle over a scripted envd event stream."""

    async def run(self, cmd: str, *, on_stdout: Any, on_stderr: Any,
                  **options: Any) -> AsyncCommandHandle[Any]:
        return AsyncCommandHandle(pid=9, handle_kill=_killed, events=_events(),
                                  on_stdout=on_stdout, on_stderr=on_stderr,
                                  retain_output=options["retain_output"])


def _event(kind: str, payload: Any) -> process_pb.StartResponse:
    return process_pb.StartResponse(event=process_pb.ProcessEvent(event=cast(Any, Oneof(
        kind, payload))))


async def _events() -> AsyncGenerator[process_pb.StartResponse | process_pb.ConnectResponse]:
    for stream, chunks in (("stdout", BINARY_OUT), ("stderr", BINARY_ERR)):
        for chunk in chunks:
            yield _event("data", process_pb.ProcessEvent.DataEvent(
                output=cast(Any, Oneof(stream, chunk))))
    yield _event("end", process_pb.ProcessEvent.EndEvent(exit_code=3, exited=True,
                                                         status="exit 3"))


async def _killed() -> bool:
    return True


def test_exec_passes_binary_output_through_byte_for_byte(server: FakeServer) -> None:
    guest, terminal = FakeGuest(), FakeTerminal(tty=False)
    guest.commands = cast(Any, _SdkHandleCommands())
    result = invoke(clients_with(server, guest, terminal), "exec", "sb1", "cat image.png")
    assert result.exit_code == 3, result.output
    assert bytes(terminal.out) == b"".join(BINARY_OUT)
    assert bytes(terminal.err) == b"".join(BINARY_ERR)
