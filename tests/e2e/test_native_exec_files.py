"""Exec and files of the native API (gRPC, through aenv_client) against a real sandbox of the
single node: a process's stdin, its stdout and stderr apart and its exit code; a PTY of the
asked size taking input and a resize; a cancelled call's process killed; a few MiB put and got
back with the same digest (bytes and a local file, streamed); the errors of a missing file, a
directory and a forbidden path; and a call on a sandbox killed under its user: SandboxDied."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_client import InvalidArgument, NotFound, PermissionDenied, SandboxDied

pytestmark = [
    pytest.mark.vm,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="session"),
]


@pytest_asyncio.fixture(loop_scope="session")
async def sandbox(platform: Platform) -> AsyncIterator[tuple[GatewayClient, str]]:
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
        record = await client.create_sandbox("base", timeout_seconds=600)
        try:
            yield client, record.sandbox_id
        finally:
            await client.kill_sandbox(record.sandbox_id)


async def test_exec_streams_stdout_and_stderr_apart_takes_stdin_and_ends_with_its_code(
    sandbox: tuple[GatewayClient, str],
) -> None:
    client, sandbox_id = sandbox
    script = "read line; echo out:$line; echo err:$line >&2; echo $PWD $GREETING; exit 7"
    async with await client.exec(
        sandbox_id, "/bin/sh", ["-c", script], stdin=True, cwd="/tmp", envs={"GREETING": "hi"}
    ) as process:
        assert process.pid > 0
        await process.write_stdin(b"hello\n")
        await process.close_stdin()
        result = await process.wait()
    assert result.exit_code == 7 and result.exited and result.status == "exit status 7"
    assert result.stdout == b"out:hello\n/tmp hi\n"
    assert result.stderr == b"err:hello\n"
    # Streamed as it comes: the first line arrives while the process still runs.
    slow_script = "echo $$ > /tmp/slow.pid; echo first; sleep 60; echo never"
    async with await client.exec(sandbox_id, "/bin/sh", ["-c", slow_script]) as slow:
        chunks = slow.output()
        first = await asyncio.wait_for(anext(chunks), 20)
        assert (first.stream, first.data) == ("stdout", b"first\n")
    # Leaving the block cancelled the call: the gateway killed the process.
    alive = "if [ -d /proc/$(cat /tmp/slow.pid) ]; then echo alive; else echo gone; fi"
    for _ in range(40):
        left = await client.run(sandbox_id, alive)
        if left.stdout == b"gone\n":
            break
        await asyncio.sleep(0.5)
    assert left.stdout == b"gone\n"
    with pytest.raises(InvalidArgument):
        await client.exec(sandbox_id, "/bin/true", cwd="/no/such/dir")


async def test_exec_on_a_pty_has_its_size_takes_input_and_resizes(
    sandbox: tuple[GatewayClient, str],
) -> None:
    client, sandbox_id = sandbox
    async with await client.exec(
        sandbox_id,
        "/bin/sh",
        ["-c", "stty size; read x; stty size; echo got:$x; exit 3"],
        pty=(100, 30),
    ) as process:
        seen = b""
        outputs = process.output()
        while b"30 100" not in seen:
            out = await asyncio.wait_for(anext(outputs), 30)
            assert out.stream == "pty"
            seen += out.data
        await process.resize(120, 40)
        await process.write_stdin(b"typed\r")
        result = await process.wait()
    assert result.exit_code == 3
    assert b"40 120" in result.pty and b"got:typed" in result.pty
    assert result.stdout == result.stderr == b""


async def test_files_put_and_get_stream_mebibytes_intact(
    sandbox: tuple[GatewayClient, str],
    tmp_path: Path,
) -> None:
    client, sandbox_id = sandbox
    payload = os.urandom(5 * 1024 * 1024 + 123)
    put = await client.put_file(sandbox_id, "/tmp/native/deep/blob.bin", payload)
    assert put.path == "/tmp/native/deep/blob.bin" and put.size == len(payload)
    got = await client.get_file(sandbox_id, "/tmp/native/deep/blob.bin")
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(payload).hexdigest()
    summed = await client.run(sandbox_id, "sha256sum /tmp/native/deep/blob.bin")
    assert summed.stdout.split()[0].decode() == hashlib.sha256(payload).hexdigest()
    # From a local file, streamed; read back chunk by chunk.
    local = tmp_path / "local.bin"
    local.write_bytes(payload[: 3 * 1024 * 1024])
    await client.put_file(sandbox_id, "/tmp/native/local.bin", local)
    chunks = [c async for c in client.file_chunks(sandbox_id, "/tmp/native/local.bin")]
    assert len(chunks) > 1 and b"".join(chunks) == local.read_bytes()
    assert await client.get_file(sandbox_id, "/tmp/native/deep/blob.bin", user="root") == payload


async def test_file_errors_are_typed(sandbox: tuple[GatewayClient, str]) -> None:
    client, sandbox_id = sandbox
    with pytest.raises(NotFound) as missing:
        await client.get_file(sandbox_id, "/tmp/no/such/file")
    assert type(missing.value) is NotFound  # the file, not the sandbox
    with pytest.raises(InvalidArgument, match="directory"):
        await client.get_file(sandbox_id, "/tmp")
    with pytest.raises(InvalidArgument, match="directory"):
        await client.put_file(sandbox_id, "/tmp", b"x")
    # envd writes as root (then hands the file over): only what root may not write is refused.
    with pytest.raises(PermissionDenied):
        await client.put_file(sandbox_id, "/sys/kernel/uevent_seqnum", b"1")


async def test_calls_on_a_sandbox_killed_under_its_user_raise_sandbox_died(
    platform: Platform,
) -> None:
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
        record = await client.create_sandbox("base", timeout_seconds=300)
        async with GatewayClient.for_home(platform.home) as other:
            await other.kill_sandbox(record.sandbox_id)
        with pytest.raises(SandboxDied):
            await client.run(record.sandbox_id, "true")
        # Told once; after that it is an unknown sandbox like any other.
        with pytest.raises(NotFound) as unknown:
            await client.get_file(record.sandbox_id, "/etc/hostname")
        assert type(unknown.value) is NotFound
