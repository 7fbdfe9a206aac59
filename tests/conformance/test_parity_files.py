"""E2B parity of files through the official Python SDK, as E2B's own SDK tests expect it:
procfs/sysfs files read whole, `list(depth)` in depth-first lexical order, an overwrite without
metadata clearing the old metadata, an expired signed URL refused with upstream's message."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from urllib.parse import urlsplit

import httpx
import pytest
from e2b import AsyncSandbox, FileType, Sandbox

from aenv_cli.platform import Platform

from ..conftest import GATEWAY_DOMAIN

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

BOOT_ID = "/proc/sys/kernel/random/boot_id"
PSEUDO_FILES = [BOOT_ID, "/sys/devices/system/cpu/online", "/proc/sys/kernel/ostype"]
EXPIRED = {"code": 401, "message": "signature is already expired"}


@pytest.fixture
def workdir(sbx: Sandbox) -> str:
    path = f"/home/user/parity-{uuid.uuid4().hex[:8]}"
    sbx.files.make_dir(path)
    return path


def test_pseudo_files_read_whole_in_every_format(sbx: Sandbox) -> None:
    for path in PSEUDO_FILES:
        expected = sbx.commands.run(f"cat {path}").stdout
        assert expected.strip(), path  # stat says 0 or 4096; the file holds a line
        assert sbx.files.read(path) == expected
        assert sbx.files.read(path, format="bytes") == expected.encode()
        assert b"".join(sbx.files.read(path, format="stream")) == expected.encode()
        assert sbx.files.read(path, gzip=True) == expected
    cpuinfo = sbx.files.read("/proc/cpuinfo")
    assert cpuinfo.startswith("processor") and cpuinfo.count("processor") == int(
        sbx.commands.run("grep -c ^processor /proc/cpuinfo").stdout)
    # A signed URL read without Accept-Encoding (urllib sends none): the identity path.
    with urllib.request.urlopen(sbx.download_url(BOOT_ID), timeout=120) as response:
        assert response.read().decode() == sbx.files.read(BOOT_ID)


@pytest.mark.asyncio(loop_scope="session")
async def test_pseudo_files_read_whole_async(async_sbx: AsyncSandbox) -> None:
    expected = (await async_sbx.commands.run(f"cat {BOOT_ID}")).stdout
    assert len(expected) == 37
    assert await async_sbx.files.read(BOOT_ID) == expected
    assert await async_sbx.files.read(BOOT_ID, format="bytes") == expected.encode()
    stream = await async_sbx.files.read(BOOT_ID, format="stream")
    assert b"".join([chunk async for chunk in stream]) == expected.encode()


def test_list_depth_is_a_depth_first_lexical_walk(sbx: Sandbox, workdir: str) -> None:
    # The tree and the expectations of E2B's tests/sync/filesystem_sync/test_list.py.
    for sub in ("subdir1/subdir1_1", "subdir1/subdir1_2", "subdir2/subdir2_1",
                "subdir2/subdir2_2"):
        sbx.files.make_dir(f"{workdir}/{sub}")
    sbx.files.write(f"{workdir}/file1.txt", "Hello, world!")
    shallow = ["file1.txt", "subdir1", "subdir2"]
    deep = ["file1.txt", "subdir1", "subdir1/subdir1_1", "subdir1/subdir1_2",
            "subdir2", "subdir2/subdir2_1", "subdir2/subdir2_2"]
    for depth, expected in ((None, shallow), (1, shallow), (2, deep), (3, deep)):
        entries = sbx.files.list(workdir, depth=depth)
        assert [e.path for e in entries] == [f"{workdir}/{p}" for p in expected], depth
        assert [e.name for e in entries] == [p.rsplit("/", 1)[-1] for p in expected]
        assert [e.type for e in entries] == [
            FileType.FILE if p.endswith(".txt") else FileType.DIR for p in expected]


def test_overwrite_without_metadata_clears_it(sbx: Sandbox, workdir: str) -> None:
    path = f"{workdir}/meta.txt"
    written = sbx.files.write(path, "one", metadata={"origin": "suite", "stale": "yes"})
    assert written.metadata == {"origin": "suite", "stale": "yes"}
    replaced = sbx.files.write(path, "two", metadata={"origin": "again"})
    assert replaced.metadata == {"origin": "again"}
    assert sbx.files.get_info(path).metadata == {"origin": "again"}
    plain = sbx.files.write(path, "three")
    assert plain.metadata is None and sbx.files.get_info(path).metadata is None
    assert [e.metadata for e in sbx.files.list(workdir) if e.path == path] == [None]
    assert sbx.files.read(path) == "three"
    # The octet-stream and multi-file uploads replace it the same way.
    sbx.files.write(path, b"four", use_octet_stream=True, metadata={"k": "v"})
    sbx.files.write(path, b"five", use_octet_stream=True)
    assert sbx.files.get_info(path).metadata is None
    sbx.files.write_files([{"path": path, "data": "six"}], metadata={"k": "v"})
    sbx.files.write_files([{"path": path, "data": "seven"}])
    assert sbx.files.get_info(path).metadata is None


def _refusal(call: urllib.request.Request | str) -> tuple[int, object]:
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(call, timeout=120)
    return info.value.code, json.loads(info.value.read().decode())


def test_expired_signed_urls_are_refused_with_upstreams_message(
    platform: Platform, sbx: Sandbox, workdir: str
) -> None:
    path = f"{workdir}/signed.txt"
    sbx.files.write(path, "signed")
    # As E2B's test_download_url_with_expired_signing: expired two minutes ago.
    assert _refusal(sbx.download_url(path, "user", use_signature_expiration=-120)) == (
        401, EXPIRED)
    upload = urllib.request.Request(
        sbx.upload_url(path, use_signature_expiration=-120), data=b"overwritten",
        method="POST", headers={"content-type": "application/octet-stream"})
    assert _refusal(upload) == (401, EXPIRED)
    # Routed by Host `49983-<id>.<domain>` instead of by signature: the same answer.
    host = sbx.get_host(49983)
    assert host.endswith("." + GATEWAY_DOMAIN)
    expired = urlsplit(sbx.download_url(path, use_signature_expiration=-120))
    by_host = httpx.get(f"{platform.sandbox_url}{expired.path}?{expired.query}",
                        headers={"Host": host}, timeout=120)
    assert (by_host.status_code, by_host.json()) == (401, EXPIRED)
    with urllib.request.urlopen(sbx.download_url(path, use_signature_expiration=120),
                                timeout=120) as response:
        assert response.read() == b"signed"
    assert sbx.files.read(path) == "signed"


def test_a_signed_download_resumes_with_a_byte_range(sbx: Sandbox, workdir: str) -> None:
    """Through gateway and node proxy as through envd: `curl -C -` or a browser's seek."""
    path = f"{workdir}/resumable.json"
    content = json.dumps({"rows": list(range(2000))}).encode()
    sbx.files.write(path, content)
    url = sbx.download_url(path, use_signature_expiration=120)
    whole = httpx.get(url, timeout=60)
    assert whole.status_code == 200 and whole.content == content
    assert whole.headers["content-type"] == "application/json"
    assert whole.headers["accept-ranges"] == "bytes"
    rest = httpx.get(url, headers={"range": "bytes=1000-"}, timeout=60)
    assert rest.status_code == 206 and rest.content == content[1000:]
    assert rest.headers["content-range"] == f"bytes 1000-{len(content) - 1}/{len(content)}"
    unchanged = httpx.get(url, headers={"if-modified-since": whole.headers["last-modified"]},
                          timeout=60)
    assert unchanged.status_code == 304
