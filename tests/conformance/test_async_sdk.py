"""The async Python SDK (`AsyncSandbox`): the same surface as the sync suite, through its own
code paths (httpx async, Connect streams, WatchDir instead of the polling watcher)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from e2b import AsyncSandbox, CommandExitException, PtySize, SandboxQuery
from e2b.exceptions import FileNotFoundException, SandboxException, SandboxNotFoundException
from e2b.sandbox.filesystem.watch_handle import FilesystemEvent, FilesystemEventType

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]


async def test_info_list_timeout_metrics(async_sbx: AsyncSandbox) -> None:
    info = await async_sbx.get_info()
    assert info.sandbox_id == async_sbx.sandbox_id and info.state.value == "running"
    await async_sbx.set_timeout(500)
    listed = await AsyncSandbox.list(query=SandboxQuery(state=[info.state])).next_items()
    assert async_sbx.sandbox_id in {s.sandbox_id for s in listed}
    metric = (await async_sbx.get_metrics())[-1]  # history, oldest first
    assert 0 < metric.mem_used < metric.mem_total and metric.disk_total > 0
    assert await async_sbx.is_running()
    with pytest.raises(SandboxNotFoundException):
        await AsyncSandbox.get_info("nosuchsandbox0000000")


async def test_run_callbacks_and_exit_codes(async_sbx: AsyncSandbox) -> None:
    out: list[str] = []
    result = await async_sbx.commands.run(
        "echo a; echo b 1>&2", on_stdout=out.append, envs={"Z": "z"}, cwd="/tmp"
    )
    assert result.stdout == "a\n" and result.stderr == "b\n" and "".join(out) == "a\n"
    assert (await async_sbx.commands.run("echo $Z; pwd", envs={"Z": "z"}, cwd="/tmp")
            ).stdout == "z\n/tmp\n"
    assert (await async_sbx.commands.run("whoami", user="root")).stdout == "root\n"
    with pytest.raises(CommandExitException) as failed:
        await async_sbx.commands.run("exit 7")
    assert failed.value.exit_code == 7


async def test_background_stdin_list_kill_connect(async_sbx: AsyncSandbox) -> None:
    cat = await async_sbx.commands.run("cat", background=True, stdin=True)
    await async_sbx.commands.send_stdin(cat.pid, "piped\n")
    await async_sbx.commands.close_stdin(cat.pid)
    assert (await cat.wait()).stdout == "piped\n"

    sleeper = await async_sbx.commands.run("sleep 300", background=True)
    assert sleeper.pid in {p.pid for p in await async_sbx.commands.list()}
    assert await async_sbx.commands.kill(sleeper.pid)
    with pytest.raises(CommandExitException):
        await sleeper.wait()

    chatty = await async_sbx.commands.run("sleep 2; echo tail", background=True)
    await chatty.disconnect()
    again = await async_sbx.commands.connect(chatty.pid)
    assert (await again.wait()).stdout == "tail\n"


async def test_pty_on_data(async_sbx: AsyncSandbox) -> None:
    output = bytearray()
    pty = await async_sbx.pty.create(PtySize(rows=20, cols=70), on_data=output.extend)
    await async_sbx.pty.send_stdin(pty.pid, b"stty size; exit\n")
    await pty.wait()
    assert b"20 70" in output


async def test_files_and_watch_dir_stream(async_sbx: AsyncSandbox) -> None:
    root = f"/home/user/async-{uuid.uuid4().hex[:8]}"
    await async_sbx.files.make_dir(root)
    events: list[FilesystemEvent] = []
    watcher = await async_sbx.files.watch_dir(root, on_event=events.append, recursive=True)
    try:
        await async_sbx.files.write(f"{root}/sub/a.txt", "A")
        await async_sbx.files.rename(f"{root}/sub/a.txt", f"{root}/sub/b.txt")
        await async_sbx.files.remove(f"{root}/sub/b.txt")
        wanted = {
            ("sub", FilesystemEventType.CREATE),
            ("sub/a.txt", FilesystemEventType.WRITE),
            ("sub/b.txt", FilesystemEventType.REMOVE),
        }
        for _ in range(100):
            if wanted <= {(e.name, e.type) for e in events}:
                break
            await asyncio.sleep(0.2)
        assert wanted <= {(e.name, e.type) for e in events}, events
    finally:
        await watcher.stop()  # type: ignore[no-untyped-call]
    await async_sbx.files.write(f"{root}/x.bin", b"\x00\x01")
    assert await async_sbx.files.read(f"{root}/x.bin", format="bytes") == b"\x00\x01"
    assert [e.name for e in await async_sbx.files.list(root)] == ["sub", "x.bin"]
    assert await async_sbx.files.exists(f"{root}/x.bin")
    with pytest.raises(FileNotFoundException):
        await async_sbx.files.read(f"{root}/nope")


async def test_kill_then_everything_fails_cleanly(e2b_vars: dict[str, str]) -> None:
    sandbox = await AsyncSandbox.create(timeout=120)
    other = await AsyncSandbox.connect(sandbox.sandbox_id)
    assert (await other.commands.run("echo hi")).stdout == "hi\n"
    assert await sandbox.kill() is True
    assert await sandbox.kill() is False
    assert not await other.is_running()
    with pytest.raises(SandboxException, match="was not found"):
        await asyncio.wait_for(other.commands.run("echo never"), timeout=10)
    with pytest.raises(SandboxException, match="was not found"):
        await asyncio.wait_for(other.files.read("/etc/hostname"), timeout=10)


async def test_long_idle_stream_survives_and_late_connect(async_sbx: AsyncSandbox) -> None:
    """A silent command for > 60 s (envd keepalives every 50 s keep every hop open), and a
    client that attaches to a process a minute after it started."""
    idle = await async_sbx.commands.run("sleep 62; echo awake", background=True, timeout=0)
    later = await async_sbx.commands.run("sleep 62; echo later", background=True, timeout=0)
    await later.disconnect()
    await asyncio.sleep(58)
    attached = await async_sbx.commands.connect(later.pid, timeout=0)
    assert (await idle.wait()).stdout == "awake\n"
    assert (await attached.wait()).stdout == "later\n"
