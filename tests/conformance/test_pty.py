"""PTY through the official Python SDK (sync): the terminal is a real TTY in the guest, takes
input, resizes, and dies on kill."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from e2b import CommandExitException, CommandHandle, CommandResult, PtySize, Sandbox

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]


def _wait_for(output: bytearray, needle: bytes, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while needle not in output:
        assert time.monotonic() < deadline, f"{needle!r} not in {bytes(output)[-500:]!r}"
        time.sleep(0.1)


@contextmanager
def pty_reader(
    sbx: Sandbox, handle: CommandHandle, output: bytearray
) -> Iterator[list[BaseException]]:
    """The sync handle delivers PTY output only inside `wait()`: run it in a thread. The PTY
    is killed on the way out, whatever happened."""
    errors: list[BaseException] = []
    results: list[CommandResult] = []

    def pump() -> None:
        try:
            results.append(handle.wait(on_pty=output.extend))
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        sbx.pty.kill(handle.pid)
        thread.join(timeout=30)
        assert not thread.is_alive()


def test_pty_is_a_tty_takes_input_and_resizes(sbx: Sandbox) -> None:
    output = bytearray()
    handle = sbx.pty.create(PtySize(rows=24, cols=80), timeout=0)
    with pty_reader(sbx, handle, output) as errors:
        sbx.pty.send_stdin(handle.pid, b"tty; stty size; echo T=$TERM\n")
        _wait_for(output, b"T=xterm-256color")
        assert b"24 80" in output and b"/dev/pts/" in output and b"T=xterm-256color" in output
        sbx.pty.resize(handle.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(handle.pid, b"stty size\n")
        _wait_for(output, b"30 100")
        # Terminal semantics: the line discipline echoes and Ctrl-C interrupts.
        sbx.pty.send_stdin(handle.pid, b"sleep 100\n")
        time.sleep(1)
        sbx.pty.send_stdin(handle.pid, b"\x03echo after-interrupt\n")
        _wait_for(output, b"after-interrupt\r\n")
        assert any(p.pid == handle.pid for p in sbx.commands.list())
        assert sbx.pty.kill(handle.pid) is True
    assert [type(e) for e in errors] == [CommandExitException]
    assert all(p.pid != handle.pid for p in sbx.commands.list())


def test_pty_exit_ends_the_handle(sbx: Sandbox) -> None:
    handle = sbx.pty.create(PtySize(rows=10, cols=40))
    sbx.pty.send_stdin(handle.pid, b"echo bye; exit 0\n")
    output = bytearray()
    result = handle.wait(on_pty=output.extend)
    assert result.exit_code == 0 and b"bye" in output
