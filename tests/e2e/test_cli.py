"""The people-facing `aenv` CLI against the running single node, as a person runs it —
a subprocess for the scripted commands, a pseudo-terminal for `aenv start` (raw mode, a window
resize, Ctrl-C to the guest, the shell's exit code). Lean: three sandboxes, two fork children."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path

import pytest
import pytest_asyncio

from aenv_cli.platform import Platform
from aenv_testing.oci_layouts import busybox_layout
from aenv_testing.ports import free_port
from aenv_testing.registry import docker_registry, push

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

# Commands in a guest under TCG, and pause, resume, fork and reset, take seconds each.
COMMAND_TIMEOUT_S = 300
EXPECT_TIMEOUT_S = 120


@pytest.fixture
def cli_env(platform: Platform, tmp_path: Path) -> dict[str, str]:
    """The CLI pointed at the platform by AENV_URL/AENV_API_KEY, with a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "AENV_"))}
    return env | {"AENV_HOME": str(tmp_path / "aenv-home"), "AENV_URL": platform.api_url,
                  "AENV_API_KEY": platform.api_key, "COLUMNS": "200"}


def aenv(env: dict[str, str], *args: str, stdin: str | None = None,
         ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "aenv_cli", *args], env=env, input=stdin,
                          capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if ok:
        assert done.returncode == 0, f"aenv {' '.join(args)}: {done.stderr}"
    return done


@pytest.fixture
def detached(cli_env: dict[str, str]) -> Iterator[list[str]]:
    """Sandboxes a test started; all removed afterwards."""
    made: list[str] = []
    yield made
    if made:
        aenv(cli_env, "rm", *made, ok=False)


def listed(env: dict[str, str], *args: str) -> dict[str, dict[str, object]]:
    return {s["sandboxID"]: s for s in json.loads(aenv(env, "ls", *args, "-o", "json").stdout)}


def test_wrong_key_unreachable_server_and_unknown_ids_are_one_line(
        cli_env: dict[str, str], tmp_path: Path) -> None:
    wrong = aenv(cli_env | {"AENV_API_KEY": "e2b_" + "0" * 40}, "ls", ok=False)
    assert wrong.returncode == 1 and wrong.stdout == ""
    assert wrong.stderr.count("\n") == 1 and wrong.stderr.startswith("error: ")
    gone = aenv(cli_env | {"AENV_URL": f"http://127.0.0.1:{free_port()}"}, "ls", ok=False)
    assert gone.returncode == 1 and gone.stderr.startswith("error: cannot reach the aenv server")
    assert gone.stderr.count("\n") == 1
    unknown = aenv(cli_env, "exec", "nosuchsandbox", "true", ok=False)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert "Traceback" not in wrong.stderr + gone.stderr + unknown.stderr


def test_login_stores_the_key_private_and_status_checks_it(
        cli_env: dict[str, str], platform: Platform) -> None:
    env = {k: v for k, v in cli_env.items() if k not in ("AENV_URL", "AENV_API_KEY")}
    refused = aenv(env, "auth", "login", "--url", platform.api_url, "--api-key", "e2b_bad",
                   ok=False)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
    aenv(env, "auth", "login", "--url", platform.api_url, "--api-key", platform.api_key)
    stored = Path(env["AENV_HOME"]) / "config.json"
    assert stored.stat().st_mode & 0o777 == 0o600
    status = aenv(env, "auth", "status").stdout
    assert platform.api_url in status and platform.api_key not in status


def test_exec_ls_cp_pause_resume(cli_env: dict[str, str], detached: list[str],
                                 tmp_path: Path) -> None:
    started = aenv(cli_env, "start", "base", "--detach", "-m", "suite=cli")
    sandbox_id = started.stdout.strip()
    detached.append(sandbox_id)
    assert started.stdout == sandbox_id + "\n"

    ran = aenv(cli_env, "exec", sandbox_id, "echo out; echo err >&2; exit 3", ok=False)
    assert (ran.returncode, ran.stdout, ran.stderr) == (3, "out\n", "err\n")
    piped = aenv(cli_env, "exec", "-i", "-e", "X=1", "-w", "/tmp", sandbox_id, "--",
                 "sh", "-c", 'cat; echo "$X $(pwd)"', stdin="from stdin\n")
    assert piped.stdout == "from stdin\n1 /tmp\n"

    shown = listed(cli_env, "-m", "suite=cli")
    assert list(shown) == [sandbox_id] and shown[sandbox_id]["state"] == "running"

    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "data.bin").write_bytes(os.urandom(300_000))
    (tree / "note.txt").write_text("note\n")
    aenv(cli_env, "cp", str(tree), f"{sandbox_id}:/tmp/")
    assert aenv(cli_env, "exec", sandbox_id, "cat /tmp/tree/note.txt").stdout == "note\n"
    aenv(cli_env, "cp", f"{sandbox_id}:/tmp/tree", str(tmp_path / "back"))
    assert (tmp_path / "back" / "sub" / "data.bin").read_bytes() == (
        tree / "sub" / "data.bin").read_bytes()
    # Binary output passes through exec byte for byte (300 kB of random bytes: not UTF-8).
    catted = subprocess.run(
        [sys.executable, "-m", "aenv_cli", "exec", sandbox_id, "cat /tmp/tree/sub/data.bin"],
        env=cli_env, capture_output=True, timeout=COMMAND_TIMEOUT_S)
    assert catted.returncode == 0, catted.stderr
    assert catted.stdout == (tree / "sub" / "data.bin").read_bytes()

    aenv(cli_env, "pause", sandbox_id)
    assert listed(cli_env, "--state", "paused")[sandbox_id]["state"] == "paused"
    aenv(cli_env, "resume", sandbox_id)
    assert aenv(cli_env, "exec", sandbox_id, "cat /tmp/tree/note.txt").stdout == "note\n"
    aenv(cli_env, "timeout", sandbox_id, "20m")
    assert isinstance(json.loads(aenv(cli_env, "logs", sandbox_id, "-o", "json").stdout), list)
    top = {s["sandboxID"]: s for s in json.loads(aenv(cli_env, "top", "--once", "-o",
                                                      "json").stdout)}
    assert top[sandbox_id]["state"] == "running"
    inspected = json.loads(aenv(cli_env, "inspect", sandbox_id).stdout)[0]
    assert inspected["sandboxID"] == sandbox_id and "envdAccessToken" not in inspected
    _logs_follow_until_removed(cli_env, sandbox_id)


def _logs_follow_until_removed(env: dict[str, str], sandbox_id: str) -> None:
    """`aenv logs --follow` prints the log so far, then new entries (a command's envd lines)
    as they come, each once, and ends (exit 0) when the sandbox is removed."""
    follow = subprocess.Popen(
        [sys.executable, "-m", "aenv_cli", "logs", sandbox_id, "--follow", "-o", "json"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        first = json.loads(follow.stdout.readline())
        time.sleep(3)  # it has printed the log so far, and polls
        ran_at = time.time()
        aenv(env, "exec", sandbox_id, "echo followed")
        aenv(env, "rm", sandbox_id)
        out, err = follow.communicate(timeout=EXPECT_TIMEOUT_S)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    entries = [first, *(json.loads(line) for line in out.splitlines())]
    assert follow.returncode == 0 and err == f"sandbox {sandbox_id} ended\n", err
    keys = [(e["timestamp"], e["message"]) for e in entries]
    assert len(keys) == len(set(keys))  # none printed twice
    assert any(datetime.fromisoformat(e["timestamp"]).timestamp() >= ran_at for e in entries), \
        f"no entry after the command ran: {entries[-3:]}"


def test_snapshot_fork_reset(cli_env: dict[str, str], detached: list[str]) -> None:
    sandbox_id = aenv(cli_env, "start", "base", "-d").stdout.strip()
    detached.append(sandbox_id)
    aenv(cli_env, "exec", sandbox_id, "echo before > /tmp/state")
    snapshot_id = aenv(cli_env, "snapshot", sandbox_id).stdout.strip()
    snapshots = json.loads(aenv(cli_env, "snapshot", "ls", "-o", "json").stdout)
    assert snapshot_id in [s["snapshotID"] for s in snapshots]

    children = aenv(cli_env, "fork", sandbox_id, "-n", "2").stdout.split()
    detached.extend(children)
    assert len(children) == 2 and set(children) <= set(listed(cli_env))
    for child in children:
        assert aenv(cli_env, "exec", child, "cat /tmp/state").stdout == "before\n"

    aenv(cli_env, "exec", sandbox_id, "echo after > /tmp/state")
    aenv(cli_env, "reset", sandbox_id, snapshot_id)
    assert aenv(cli_env, "exec", sandbox_id, "cat /tmp/state").stdout == "before\n"
    aenv(cli_env, "rm", *children)
    detached[1:] = []
    assert not set(children) & set(listed(cli_env))
    aenv(cli_env, "snapshot", "rm", snapshot_id)


class Terminal:
    """The parent side of a pseudo-terminal a child runs on, as its controlling terminal."""

    def __init__(self, columns: int, rows: int) -> None:
        self.master, self.slave = os.openpty()
        self.resize(columns, rows)
        self.seen = b""

    def resize(self, columns: int, rows: int) -> None:
        # The kernel sends SIGWINCH to the terminal's foreground process group.
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def spawn(self, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        def controlling_terminal() -> None:
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        child = subprocess.Popen(
            [sys.executable, "-m", "aenv_cli", *args], env=env, stdin=self.slave,
            stdout=self.slave, stderr=self.slave, start_new_session=True,
            preexec_fn=controlling_terminal)
        return child

    def raw(self) -> bool:
        return not termios.tcgetattr(self.slave)[3] & termios.ICANON

    def until_raw(self, timeout_s: float) -> None:
        """Keys typed before the CLI takes the terminal raw are flushed by it (TCSAFLUSH)."""
        deadline = time.monotonic() + timeout_s
        while not self.raw():
            assert time.monotonic() < deadline, f"not raw within {timeout_s} s: {self.seen!r}"
            time.sleep(0.1)

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def expect(self, pattern: bytes, timeout_s: float = EXPECT_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while pattern not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} within {timeout_s} s; seen: {self.seen[-2000:]!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                self.seen += os.read(self.master, 65536)

    def until_exit(self, child: subprocess.Popen[bytes], timeout_s: float) -> int:
        """Reads what the child writes until it exits: its exit code."""
        deadline = time.monotonic() + timeout_s
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                self.seen += os.read(self.master, 65536)
            elif child.poll() is not None:
                return child.returncode
            assert time.monotonic() < deadline, f"still running; seen: {self.seen[-2000:]!r}"

    def close(self) -> None:
        os.close(self.master)
        os.close(self.slave)


def test_start_attaches_a_raw_shell_that_follows_resizes_and_ctrl_c(
        cli_env: dict[str, str]) -> None:
    terminal = Terminal(columns=100, rows=30)
    child = terminal.spawn(cli_env, "start", "base", "-m", "suite=cli-pty")
    try:
        terminal.until_raw(timeout_s=300)
        terminal.send(b"stty size; echo READY-$((40+2))\r")
        terminal.expect(b"READY-42", timeout_s=300)
        assert b"30 100" in terminal.seen and terminal.raw()
        terminal.resize(columns=132, rows=43)
        time.sleep(1)  # the resize travels: CLI, gateway, envd
        terminal.send(b"stty size\r")
        terminal.expect(b"43 132")
        terminal.send(b"sleep 600\r")
        time.sleep(2)
        terminal.send(b"\x03")  # to the guest's foreground job, not to the CLI
        terminal.send(b"echo ALIVE-$((6*7))\r")
        terminal.expect(b"ALIVE-42")
        terminal.send(b"exit 7\r")
        assert child.wait(timeout=COMMAND_TIMEOUT_S) == 7
        assert not terminal.raw()  # the terminal's mode is given back
    finally:
        if child.poll() is None:
            child.kill()
        terminal.close()
    assert listed(cli_env, "-m", "suite=cli-pty") == {}  # killed on exit (no --keep)


def test_connect_and_exec_t_on_a_running_sandbox(cli_env: dict[str, str],
                                                 detached: list[str]) -> None:
    sandbox_id = aenv(cli_env, "start", "base", "-d").stdout.strip()
    detached.append(sandbox_id)
    terminal = Terminal(columns=90, rows=20)
    try:
        connected = terminal.spawn(cli_env, "connect", sandbox_id)
        terminal.until_raw(timeout_s=300)
        terminal.send(b"echo CONNECTED-$((2+3)); exit 5\r")
        terminal.expect(b"CONNECTED-5")
        assert connected.wait(timeout=COMMAND_TIMEOUT_S) == 5
        ran = terminal.spawn(cli_env, "exec", "-t", sandbox_id, "stty size; exit 4")
        assert ran.wait(timeout=COMMAND_TIMEOUT_S) == 4
        terminal.expect(b"20 90")  # the PTY has the terminal's size
    finally:
        terminal.close()
    assert sandbox_id in listed(cli_env)  # connect leaves it running


@pytest_asyncio.fixture(loop_scope="session")
async def registry_image(tmp_path: Path) -> AsyncIterator[str]:
    """A busybox image in a registry of its own (Debian's docker-registry on loopback)."""
    layout = busybox_layout(tmp_path / "layout")
    async with docker_registry(tmp_path / "registry") as registry:
        await push(f"oci:{layout}:1", registry, "cli/busybox:1")
        yield f"{registry.host}/cli/busybox:1"


@pytest.mark.registry
@pytest.mark.asyncio(loop_scope="session")
async def test_template_pull_draws_a_bar_per_layer_on_a_terminal(
        cli_env: dict[str, str], registry_image: str) -> None:
    terminal = Terminal(columns=160, rows=40)
    try:
        child = terminal.spawn(cli_env, "template", "pull", registry_image, "--name",
                               "cli-pulled")
        code = await asyncio.to_thread(terminal.until_exit, child, COMMAND_TIMEOUT_S * 2)
        # What a person reads: the terminal's colours and cursor moves left out.
        screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.seen.decode(errors="replace"))
        assert code == 0, screen[-3000:]
        layers = re.findall(r"layer (\d+)/(\d+) sha256:[0-9a-f]{12}", screen)
        assert layers and {n for n, _ in layers} == {str(i) for i in
                                                     range(1, int(layers[0][1]) + 1)}
        assert "MiB pulled" in screen and "image " + registry_image in screen
        assert "template: boot, recipe, capture" in screen and "ready" in screen
        assert f"pulled {registry_image} as cli-pulled" in screen
    finally:
        terminal.close()
        await asyncio.to_thread(aenv, cli_env, "template", "rm", "cli-pulled", ok=False)
