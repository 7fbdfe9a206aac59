"""commands.* of the official e2b SDK (sync and async) against a real envd subprocess."""

from __future__ import annotations

import pwd
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from e2b import AsyncSandbox, CommandExitException, Sandbox, TimeoutException
from envd_harness import EnvdProcess

pytestmark = pytest.mark.sdk


@pytest.fixture
def sbx(sdk_env: EnvdProcess) -> Iterator[Sandbox]:
    sandbox = Sandbox.create()
    try:
        yield sandbox
    finally:
        sandbox.kill()


@pytest.fixture
async def asbx(sdk_env: EnvdProcess) -> AsyncIterator[AsyncSandbox]:
    sandbox = await AsyncSandbox.create()
    try:
        yield sandbox
    finally:
        await sandbox.kill()


def test_run_foreground_stdout_stderr_exit(sbx: Sandbox) -> None:
    result = sbx.commands.run("echo hello; echo err 1>&2")
    assert result.stdout == "hello\n"
    assert result.stderr == "err\n"
    assert result.exit_code == 0
    assert result.error is None
    with pytest.raises(CommandExitException) as info:
        sbx.commands.run("echo bad 1>&2; exit 3")
    assert info.value.exit_code == 3
    assert info.value.stderr == "bad\n"
    assert info.value.error == "exit status 3"


def test_envs_cwd_user(sbx: Sandbox) -> None:
    env = sbx.commands.run("env", envs={"FOO": "bar", "SBX_GLOBAL": "override"}).stdout
    lines = set(env.splitlines())
    assert "FOO=bar" in lines and "SBX_GLOBAL=override" in lines
    assert "USER=nobody" in lines and "LOGNAME=nobody" in lines
    assert f"HOME={pwd.getpwnam('nobody').pw_dir}" in lines
    assert not any(
        line.startswith(("PYTHONHOME=", "PYTHONPATH=", "LD_LIBRARY_PATH=")) for line in lines
    )
    assert sbx.commands.run("echo $SBX_GLOBAL").stdout == "g1\n"
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    # nobody's home does not exist: the default cwd falls back to /.
    assert sbx.commands.run("pwd").stdout == "/\n"
    root = sbx.commands.run("id -un; echo $HOME; pwd", user="root").stdout.split()
    assert root == ["root", "/root", "/root"]
    with pytest.raises(Exception, match="does not exist"):
        sbx.commands.run("pwd", cwd="/definitely/missing")


def test_background_stdin_close_wait(sbx: Sandbox) -> None:
    handle = sbx.commands.run("cat", stdin=True, background=True)
    sbx.commands.send_stdin(handle.pid, "first ")
    sbx.commands.send_stdin(handle.pid, b"second")
    sbx.commands.close_stdin(handle.pid)
    result = handle.wait()
    assert result.stdout == "first second"
    assert result.exit_code == 0


def test_stream_input_in_order(sbx: Sandbox) -> None:
    handle = sbx.commands.run("cat", stdin=True, background=True)
    sbx.commands.stream_input(handle.pid, ["a", b"b", "c" * 100_000])
    sbx.commands.close_stdin(handle.pid)
    assert handle.wait().stdout == "ab" + "c" * 100_000


def test_list_kill_connect(sbx: Sandbox) -> None:
    handle = sbx.commands.run("sleep 30", background=True, envs={"K": "v"}, cwd="/tmp")
    listed = {p.pid: p for p in sbx.commands.list()}
    info = listed[handle.pid]
    assert info.cmd == "/bin/bash" and info.args[-1] == "sleep 30"
    assert info.envs == {"K": "v"} and info.cwd == "/tmp"
    assert sbx.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException) as exc:
        handle.wait()
    assert exc.value.exit_code == -1 and exc.value.error == "signal: killed"
    assert sbx.commands.kill(999_999) is False
    assert handle.pid not in {p.pid for p in sbx.commands.list()}


def test_disconnect_then_connect(sbx: Sandbox) -> None:
    handle = sbx.commands.run("sleep 1; echo late; exit 4", background=True)
    handle.disconnect()
    again = sbx.commands.connect(handle.pid)
    with pytest.raises(CommandExitException) as exc:
        again.wait()
    assert exc.value.stdout == "late\n" and exc.value.exit_code == 4
    # A late attach to a recently finished process still yields its end.
    late = sbx.commands.connect(handle.pid)
    with pytest.raises(CommandExitException):
        late.wait()


def test_timeout_kills_process(sbx: Sandbox, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    marker = tmp_path / "should-not-exist"
    start = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.commands.run(f"sleep 5; touch {marker}", timeout=1)
    assert time.monotonic() - start < 4
    time.sleep(5)
    assert not marker.exists()
    assert all("sleep 5" not in " ".join(p.args) for p in sbx.commands.list())


def test_fast_output_nothing_lost(sbx: Sandbox) -> None:
    # ~20 MB through stdout as fast as the process can write it.
    result = sbx.commands.run("head -c 20000000 /dev/zero | tr '\\0' 'x'; echo END", timeout=120)
    assert len(result.stdout) == 20_000_004 and result.stdout.endswith("xEND\n")
    numbered = sbx.commands.run("seq 1 200000").stdout.split()
    assert numbered == [str(i) for i in range(1, 200_001)]


def test_pty_create_input_resize_kill(sbx: Sandbox) -> None:
    import threading

    from e2b import PtySize

    chunks: list[bytes] = []
    outcome: list[BaseException | None] = []
    terminal = sbx.pty.create(PtySize(rows=24, cols=80), timeout=30)

    def follow() -> None:
        try:
            terminal.wait(on_pty=chunks.append)
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=follow)
    reader.start()
    try:
        sbx.pty.send_stdin(terminal.pid, b"stty size; echo $TERM; echo pty-$((40+2))\n")
        _wait_for(lambda: b"pty-42" in b"".join(chunks))
        output = b"".join(chunks)
        assert b"24 80" in output and b"xterm-256color" in output
        sbx.pty.resize(terminal.pid, PtySize(rows=30, cols=100))
        sbx.pty.send_stdin(terminal.pid, b"stty size\n")
        _wait_for(lambda: b"30 100" in b"".join(chunks))
        assert sbx.pty.kill(terminal.pid) is True
    finally:
        reader.join(timeout=10)
    assert isinstance(outcome[0], CommandExitException)


def _wait_for(condition: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


async def test_async_run_background_and_kill(asbx: AsyncSandbox) -> None:
    result = await asbx.commands.run("echo async-hello")
    assert result.stdout == "async-hello\n"
    with pytest.raises(CommandExitException):
        await asbx.commands.run("exit 7")
    handle = await asbx.commands.run("cat", stdin=True, background=True)
    await asbx.commands.send_stdin(handle.pid, "xyz")
    await asbx.commands.close_stdin(handle.pid)
    assert (await handle.wait()).stdout == "xyz"
    sleeper = await asbx.commands.run("sleep 30", background=True)
    assert await asbx.commands.kill(sleeper.pid) is True
    with pytest.raises(CommandExitException):
        await sleeper.wait()


async def test_async_pty(asbx: AsyncSandbox) -> None:
    from e2b import PtySize

    chunks: list[bytes] = []
    terminal = await asbx.pty.create(PtySize(rows=24, cols=80), on_data=chunks.append)
    await asbx.pty.send_stdin(terminal.pid, b"echo async-$((1+1))\n")
    deadline = time.monotonic() + 10
    while b"async-2" not in b"".join(chunks) and time.monotonic() < deadline:
        import asyncio

        await asyncio.sleep(0.05)
    assert b"async-2" in b"".join(chunks)
    assert await asbx.pty.kill(terminal.pid) is True
