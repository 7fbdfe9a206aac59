"""What every `aenv` command keeps to: `--help` with an example, and for bad input,
an unknown id, a wrong key and an unreachable server one line on stderr (no traceback) and a
non-zero exit. The server is a real HTTP server on loopback answering every request with one
error, so the REST client, the e2b SDK (exec, cp, connect, template pull) and the template API
client all meet it through their own transports."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from aenv_cli_fake_guest import FakeTerminal
from typer.testing import CliRunner

from aenv_cli.commands import guests
from aenv_cli.commands.context import Clients
from aenv_cli.main import app
from aenv_cli.server import Server
from aenv_testing.ports import free_port

KEY = "e2b_" + "cd" * 18
ID = "sbxnope"


def _leaves(command: typer.core.TyperGroup | typer.core.TyperCommand,
            path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield path
        return
    for name, sub in subcommands.items():
        yield from _leaves(sub, (*path, name))


COMMANDS = sorted(_leaves(typer.main.get_command(app)))  # type: ignore[arg-type]


def test_the_issues_commands_all_exist() -> None:
    wanted = {
        ("auth", "login"), ("auth", "status"), ("template", "pull"), ("template", "build"),
        ("template", "ls"), ("template", "rm"), ("template", "inspect"), ("start",), ("exec",),
        ("connect",), ("ls",), ("inspect",), ("pause",), ("resume",), ("rm",), ("timeout",),
        ("snapshot", "create"), ("snapshot", "ls"), ("snapshot", "rm"), ("fork",), ("reset",),
        ("cp",), ("logs",), ("top",), ("up",), ("status",), ("trace",),
    }
    assert wanted <= set(COMMANDS), wanted - set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_an_example(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Example: aenv " in result.stdout


class _Answering(http.server.BaseHTTPRequestHandler):
    status = 404
    message = "sandbox not found"

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"code": self.status, "message": self.message}).encode()
        self.send_response(self.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = do_PUT = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(params=[(404, "not found"), (401, "Invalid API key")], ids=["unknown", "key"])
def answering(request: pytest.FixtureRequest) -> Iterator[str]:
    status, message = request.param
    handler = type("Handler", (_Answering,), {"status": status, "message": message})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# Every command that talks to the server, with an id where it takes one.
SERVER_COMMANDS = [
    ["ls"], ["inspect", ID], ["pause", ID], ["resume", ID], ["rm", ID], ["timeout", ID, "30s"],
    ["fork", ID], ["reset", ID, "snap1"], ["logs", ID], ["snapshot", "create", ID],
    ["snapshot", "ls"], ["snapshot", "rm", "snap1"], ["top", "--once"], ["start", "nope"],
    ["start", "--detach", "nope"], ["exec", ID, "true"], ["connect", ID],
    ["cp", f"{ID}:/etc/hosts", "."], ["template", "inspect", "nope"], ["template", "ls"],
    ["template", "rm", "nope"], ["template", "pull", "alpine:3", "--name", "a"],
    ["auth", "status"], ["leases"],
]


def _run(url: str, args: list[str], tmp_path: Path,
         monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    exits: list[int] = []
    # After the e2b SDK ran, commands leave through os._exit (failures.py): record it instead.
    monkeypatch.setattr(os, "_exit", exits.append)
    monkeypatch.setattr(guests, "_used", False)  # restored after: later tests exit normally
    monkeypatch.chdir(tmp_path)
    clients = Clients(lambda: Server(url, KEY, "test"), terminal=FakeTerminal(eof=False))
    result = CliRunner().invoke(app, args, obj=clients,
                                env={"AENV_URL": url, "AENV_API_KEY": KEY, "COLUMNS": "300"})
    assert "Traceback" not in result.output, result.output
    return (exits[0] if exits else result.exit_code), result.stderr.splitlines()


@pytest.mark.parametrize("args", SERVER_COMMANDS, ids=" ".join)
def test_an_unknown_id_or_a_wrong_key_is_one_line(
    args: list[str], answering: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, lines = _run(answering, args, tmp_path, monkeypatch)
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), lines


@pytest.mark.parametrize("args", SERVER_COMMANDS, ids=" ".join)
def test_an_unreachable_server_is_one_line(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, lines = _run(f"http://127.0.0.1:{free_port()}", args, tmp_path, monkeypatch)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("error: ") and "reach" in lines[0], lines


@pytest.mark.parametrize("args", [
    ["fork"], ["fork", ID, "-n", "0"], ["frob"], ["ls", "--bogus"], ["ls", "-o", "bad"],
    ["timeout", ID, "soon"], ["ls", "-m", "novalue"], ["cp", "a", "b"], ["exec", ID],
    ["resume", ID, "--timeout", "x"], ["auth", "login", "--url", "ftp://x", "--key", "k"],
], ids=" ".join)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, lines = _run(f"http://127.0.0.1:{free_port()}", args, tmp_path, monkeypatch)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines


def test_shell_completion_completes_commands() -> None:
    script = Path(sys.executable).parent / "aenv"
    completed = subprocess.run(
        [str(script)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "_AENV_COMPLETE": "complete_bash", "COMP_WORDS": "aenv fo",
             "COMP_CWORD": "1"})
    assert completed.returncode == 0 and completed.stdout.split() == ["fork"]
