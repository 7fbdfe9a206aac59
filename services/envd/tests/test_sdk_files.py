"""files.* and auth of the official e2b SDK (sync and async) against a real envd subprocess."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import shutil
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    FilesystemEvent,
    FilesystemEventType,
    FileType,
    NotFoundException,
    Sandbox,
)
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


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A folder of the test's own, which nobody (the SDK's caller here) may also write when
    envd does not run as root."""
    path = Path(tempfile.mkdtemp(prefix="envd-sdk-files-", dir="/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_write_read_formats(sbx: Sandbox, workdir: Path) -> None:
    text_path = str(workdir / "sub" / "a.txt")
    info = sbx.files.write(text_path, "hello")
    assert info.path == text_path and info.name == "a.txt"
    assert sbx.files.read(text_path) == "hello"
    assert (workdir / "sub" / "a.txt").stat().st_uid == 65534  # owned by the caller (nobody)
    binary = bytes(range(256)) * 100
    sbx.files.write(str(workdir / "b.bin"), binary, use_octet_stream=True)
    assert sbx.files.read(str(workdir / "b.bin"), format="bytes") == binary
    sbx.files.write(str(workdir / "g.bin"), binary, gzip=True)
    assert (workdir / "g.bin").read_bytes() == binary
    assert sbx.files.read(str(workdir / "g.bin"), format="bytes", gzip=True) == binary
    stream = sbx.files.read(str(workdir / "g.bin"), format="stream")
    assert b"".join(stream) == binary
    sbx.files.write(str(workdir / "f.txt"), io.BytesIO(b"from a file object"))
    assert (workdir / "f.txt").read_bytes() == b"from a file object"
    written = sbx.files.write_files(
        [
            {"path": str(workdir / "m1.txt"), "data": "one"},
            {"path": str(workdir / "m2.txt"), "data": b"two"},
        ]
    )
    assert [w.path for w in written] == [str(workdir / "m1.txt"), str(workdir / "m2.txt")]
    assert (workdir / "m2.txt").read_bytes() == b"two"
    with pytest.raises(NotFoundException):
        sbx.files.read(str(workdir / "missing.txt"))


def test_metadata_and_info(sbx: Sandbox, workdir: Path) -> None:
    path = str(workdir / "meta.txt")
    sbx.files.write(path, "12345", metadata={"Owner": "alice", "k": "v"})
    info = sbx.files.get_info(path)
    assert info.metadata == {"owner": "alice", "k": "v"}
    assert info.type == FileType.FILE and info.size == 5 and info.name == "meta.txt"
    assert info.mode == 0o644 and info.permissions == "-rw-r--r--"
    assert info.owner == "nobody" and info.path == path
    assert abs(info.modified_time.timestamp() - time.time()) < 60
    os.symlink(path, workdir / "link")
    link = sbx.files.get_info(str(workdir / "link"))
    assert link.type == FileType.SYMLINK and link.symlink_target == path
    assert sbx.files.exists(path) is True
    assert sbx.files.exists(str(workdir / "nope")) is False


def test_list_rename_make_dir_remove(sbx: Sandbox, workdir: Path) -> None:
    (workdir / "d1" / "d2" / "d3").mkdir(parents=True)
    (workdir / "d1" / "f1").write_text("x")
    (workdir / "d1" / "d2" / "f2").write_text("y")
    for path in (workdir / "d1").rglob("*"):  # the caller's own files (it acts as itself)
        os.chown(path, 65534, 65534)
    os.chown(workdir / "d1", 65534, 65534)
    shallow = {e.path for e in sbx.files.list(str(workdir / "d1"))}
    assert shallow == {str(workdir / "d1" / "d2"), str(workdir / "d1" / "f1")}
    deep = {e.path: e.type for e in sbx.files.list(str(workdir / "d1"), depth=2)}
    assert deep[str(workdir / "d1" / "d2" / "f2")] == FileType.FILE
    assert deep[str(workdir / "d1" / "d2" / "d3")] == FileType.DIR
    assert str(workdir / "d1" / "d2" / "d3" / "x") not in deep
    moved = sbx.files.rename(str(workdir / "d1" / "f1"), str(workdir / "new" / "f1"))
    assert moved.path == str(workdir / "new" / "f1") and (workdir / "new" / "f1").exists()
    with pytest.raises(NotFoundException):
        sbx.files.rename(str(workdir / "gone"), str(workdir / "x"))
    assert sbx.files.make_dir(str(workdir / "m" / "n")) is True
    assert sbx.files.make_dir(str(workdir / "m" / "n")) is False
    assert (workdir / "m" / "n").stat().st_uid == 65534
    sbx.files.remove(str(workdir / "d1"))
    assert not (workdir / "d1").exists()


def test_watch_dir_sync(sbx: Sandbox, workdir: Path) -> None:
    handle = sbx.files.watch_dir(str(workdir), recursive=True)
    try:
        (workdir / "sub").mkdir()
        time.sleep(0.2)  # the new directory gets its own watch
        (workdir / "sub" / "w.txt").write_text("data")
        (workdir / "sub" / "w.txt").rename(workdir / "sub" / "r.txt")
        (workdir / "sub" / "r.txt").chmod(0o600)
        (workdir / "sub" / "r.txt").unlink()
        time.sleep(0.3)
        events = {(e.name, e.type) for e in handle.get_new_events()}
    finally:
        handle.stop()
    assert ("sub", FilesystemEventType.CREATE) in events
    assert ("sub/w.txt", FilesystemEventType.CREATE) in events
    assert ("sub/w.txt", FilesystemEventType.WRITE) in events
    assert ("sub/w.txt", FilesystemEventType.RENAME) in events
    assert ("sub/r.txt", FilesystemEventType.CHMOD) in events
    assert ("sub/r.txt", FilesystemEventType.REMOVE) in events


async def test_watch_dir_async_with_entries(asbx: AsyncSandbox, workdir: Path) -> None:
    events: list[FilesystemEvent] = []
    handle = await asbx.files.watch_dir(
        str(workdir), on_event=events.append, recursive=True, include_entry=True
    )
    try:
        (workdir / "x.txt").write_text("hi")
        deadline = time.monotonic() + 10
        while not any(e.type == FilesystemEventType.WRITE for e in events):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
    finally:
        await handle.stop()  # type: ignore[no-untyped-call]
    created = next(e for e in events if e.type == FilesystemEventType.CREATE)
    assert created.name == "x.txt"
    assert created.entry is not None and created.entry.path == str(workdir / "x.txt")


async def test_async_files_roundtrip(asbx: AsyncSandbox, workdir: Path) -> None:
    path = str(workdir / "async.txt")
    await asbx.files.write(path, "async data")
    assert await asbx.files.read(path) == "async data"
    assert await asbx.files.exists(path)
    assert [e.name for e in await asbx.files.list(str(workdir))] == ["async.txt"]


def test_wrong_access_token(sdk_env: EnvdProcess) -> None:
    sandbox = Sandbox.create("wrong-token")
    try:
        with pytest.raises(AuthenticationException):
            sandbox.commands.run("true")
        with pytest.raises(AuthenticationException):
            sandbox.files.read("/etc/hostname")
        with pytest.raises(AuthenticationException):
            sandbox.files.exists("/etc/hostname")
        assert sandbox.is_running() is True  # /health needs no token
    finally:
        sandbox.kill()


def test_signed_urls(sbx: Sandbox, workdir: Path) -> None:
    path = str(workdir / "signed.txt")
    upload = sbx.upload_url(path, use_signature_expiration=60)
    boundary = "XyZ"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path}"\r\n'
        f"Content-Type: text/plain\r\n\r\nsigned content\r\n--{boundary}--\r\n"
    ).encode()
    request = urllib.request.Request(
        upload,
        data=body,
        method="POST",
        headers={"content-type": f"multipart/form-data; boundary={boundary}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    with urllib.request.urlopen(sbx.download_url(path), timeout=10) as response:
        assert response.read() == b"signed content"
    tampered = sbx.download_url(path).replace("signature=v1_", "signature=v1_x")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(tampered, timeout=10)
    assert info.value.code == 401


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_200mb_upload_download_streams(sbx: Sandbox, sdk_env: EnvdProcess, workdir: Path) -> None:
    size = 200 * 1024 * 1024
    chunk = os.urandom(1024 * 1024)

    def chunks() -> Iterator[bytes]:
        for _ in range(size // len(chunk)):
            yield chunk

    target = workdir / "big.bin"
    sbx.files.write(str(target), chunks())
    assert target.stat().st_size == size
    digest = hashlib.sha256()
    received = 0
    for piece in sbx.files.read(str(target), format="stream"):
        digest.update(piece)
        received += len(piece)
    assert received == size
    whole = hashlib.sha256()
    for _ in range(size // len(chunk)):
        whole.update(chunk)
    assert digest.digest() == whole.digest()
    peak = _peak_rss_mb(sdk_env.process.pid)
    assert peak < 100, f"envd peak RSS {peak:.0f} MB"
