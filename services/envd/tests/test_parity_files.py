"""E2B parity of /files and ListDir on the real filesystem: pseudo files read to EOF, the
depth-first list order, metadata replaced by every upload, upstream's signature refusals."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from aenv_envd.app import build_app
from aenv_envd.config import EnvdConfig
from aenv_envd.entry_info import read_metadata
from aenv_envd.filesystem_service import list_entries
from aenv_envd.signing import file_signature
from aenv_envd.state import SandboxState

TOKEN = "parity-token"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
CPUS_ONLINE = "/sys/devices/system/cpu/online"


@pytest.fixture
def client() -> Iterator[TestClient]:
    state = SandboxState(access_token=TOKEN)
    with TestClient(build_app(EnvdConfig(sync_clock=False, reseed_rng=False), state)) as client:
        client.headers["x-access-token"] = TOKEN
        yield client


def _get(client: TestClient, path: str, encoding: str) -> tuple[bytes, dict[str, str]]:
    got = client.get(
        "/files", params={"path": path, "username": "root"}, headers={"accept-encoding": encoding}
    )
    assert got.status_code == 200, got.text
    return got.content, dict(got.headers)


# ----- 1. procfs / sysfs -------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["identity", "gzip, deflate"])
@pytest.mark.parametrize("path", [BOOT_ID, CPUS_ONLINE, "/proc/self/status"])
def test_pseudo_files_are_read_to_eof_not_by_their_stat_size(
    client: TestClient, path: str, encoding: str
) -> None:
    assert os.stat(path).st_size in (0, 4096)  # what stat claims, whatever the content
    body, headers = _get(client, path, encoding)
    if path == "/proc/self/status":  # envd's own status: its shape, not its changing values
        assert body.startswith(b"Name:") and b"\nPid:" in body
    else:
        assert body == Path(path).read_bytes() and body.endswith(b"\n") and len(body) > 1
    if "content-length" in headers:
        assert headers["content-length"] == str(len(body))


def test_cpuinfo_streamed_in_chunks(client: TestClient) -> None:
    with client.stream(
        "GET", "/files", params={"path": "/proc/cpuinfo", "username": "root"},
        headers={"accept-encoding": "identity"},
    ) as got:
        assert got.status_code == 200
        body = b"".join(got.iter_bytes(chunk_size=7))
    assert body.startswith(b"processor") and body.endswith(b"\n")


def test_size_is_trusted_only_when_the_file_occupies_disk(
    client: TestClient, tmp_path: Path
) -> None:
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * 1024 * 1024 + 5))
    body, headers = _get(client, str(big), "identity")
    assert body == big.read_bytes() and headers["content-length"] == str(len(body))
    # A sparse file has no blocks either: streamed to EOF without a Content-Length, all of it.
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as out:
        out.truncate(3 * 1024 * 1024)
    assert sparse.stat().st_blocks == 0
    body, headers = _get(client, str(sparse), "identity")
    assert body == bytes(3 * 1024 * 1024) and "content-length" not in headers
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    body, headers = _get(client, str(empty), "identity")
    assert body == b"" and headers["content-length"] == "0"


def test_gzip_of_a_pseudo_file_holds_all_of_it(client: TestClient) -> None:
    got = client.get(
        "/files", params={"path": "/proc/self/mountinfo", "username": "root"},
        headers={"accept-encoding": "gzip"},
    )
    assert got.status_code == 200 and got.headers.get("content-encoding") == "gzip"
    assert b" / / " in got.content and got.content.endswith(b"\n")  # httpx gunzips


# ----- 2. list order ------------------------------------------------------------------------


def _tree(root: Path) -> None:
    for directory in ("subdir1/subdir1_1", "subdir1/subdir1_2", "subdir2/subdir2_1",
                      "subdir2/subdir2_2"):
        (root / directory).mkdir(parents=True)
    (root / "file1.txt").write_text("Hello, world!")


def test_list_is_a_depth_first_walk_in_lexical_order(tmp_path: Path) -> None:
    _tree(tmp_path)
    names = [os.path.relpath(e.path, tmp_path) for e in list_entries(str(tmp_path), 2)]
    # E2B's own SDK test (tests/sync/filesystem_sync/test_list.py) expects exactly this.
    assert names == [
        "file1.txt", "subdir1", "subdir1/subdir1_1", "subdir1/subdir1_2",
        "subdir2", "subdir2/subdir2_1", "subdir2/subdir2_2",
    ]
    assert [os.path.relpath(e.path, tmp_path) for e in list_entries(str(tmp_path), 1)] == [
        "file1.txt", "subdir1", "subdir2",
    ]
    assert len(list_entries(str(tmp_path), 3)) == 7


def test_list_orders_names_by_bytes_and_does_not_descend_symlinks(tmp_path: Path) -> None:
    for name in ("b", "B", "_", "a"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "inner").write_text(name)
    (tmp_path / "Z-link").symlink_to(tmp_path / "a")
    names = [os.path.relpath(e.path, tmp_path) for e in list_entries(str(tmp_path), 5)]
    assert names == [
        "B", "B/inner", "Z-link", "_", "_/inner", "a", "a/inner", "b", "b/inner",
    ]


# ----- 3. metadata on overwrite --------------------------------------------------------------


def _upload(client: TestClient, path: Path, data: bytes, metadata: dict[str, str],
            multipart: bool) -> list[dict[str, object]]:
    headers = {f"X-Metadata-{k}": v for k, v in metadata.items()}
    params = {"path": str(path), "username": "root"}
    if multipart:
        got = client.post("/files", params=params, headers=headers,
                          files={"file": (path.name, data)})
    else:
        headers["content-type"] = "application/octet-stream"
        got = client.post("/files", params=params, headers=headers, content=data)
    assert got.status_code == 200, got.text
    written: list[dict[str, object]] = got.json()
    return written


@pytest.mark.parametrize("multipart", [True, False])
def test_overwriting_replaces_the_metadata(
    client: TestClient, tmp_path: Path, multipart: bool
) -> None:
    target = tmp_path / "meta.txt"
    first = _upload(client, target, b"one", {"Origin": "suite", "kept": "1"}, multipart)
    assert first[0]["metadata"] == {"origin": "suite", "kept": "1"}
    assert read_metadata(str(target)) == {"origin": "suite", "kept": "1"}
    second = _upload(client, target, b"two", {"kept": "2"}, multipart)
    assert second[0]["metadata"] == {"kept": "2"}
    assert read_metadata(str(target)) == {"kept": "2"}
    third = _upload(client, target, b"three", {}, multipart)
    assert "metadata" not in third[0] and read_metadata(str(target)) == {}
    assert target.read_bytes() == b"three"
    # Other tools' xattrs are not ours to clear.
    os.setxattr(target, "user.other", b"x")
    _upload(client, target, b"four", {}, multipart)
    assert os.getxattr(target, "user.other") == b"x"


def test_metadata_rules_are_upstreams(client: TestClient, tmp_path: Path) -> None:
    target = tmp_path / "rules.txt"
    written = _upload(client, target, b"x", {"": "ignored", "k": "v"}, False)
    assert written[0]["metadata"] == {"k": "v"}
    too_long = client.post(
        "/files", params={"path": str(target), "username": "root"},
        headers={"content-type": "application/octet-stream", "X-Metadata-" + "k" * 247: "v"},
        content=b"x",
    )
    assert too_long.status_code == 400 and "invalid metadata" in too_long.json()["message"]


# ----- 4. signed URLs ------------------------------------------------------------------------


def _signed(path: str, operation: str, expiration: int | None) -> dict[str, str]:
    query = {"path": path, "username": "root",
             "signature": file_signature(path, operation, "root", TOKEN, expiration)}
    if expiration is not None:
        query["signature_expiration"] = str(expiration)
    return query


def test_signed_url_refusals_say_what_upstream_says(tmp_path: Path) -> None:
    target = tmp_path / "signed.txt"
    target.write_text("signed")
    state = SandboxState(access_token=TOKEN)
    with TestClient(build_app(EnvdConfig(sync_clock=False, reseed_rng=False), state)) as client:
        live = client.get("/files", params=_signed(str(target), "read", int(time.time()) + 60))
        assert live.status_code == 200 and live.content == b"signed"
        expired = _signed(str(target), "read", int(time.time()) - 120)
        for method in ("GET", "POST"):
            query = expired if method == "GET" else _signed(
                str(target), "write", int(time.time()) - 1)
            got = client.request(method, "/files", params=query,
                                 headers={"content-type": "application/octet-stream"},
                                 content=b"" if method == "POST" else None)
            assert got.status_code == 401
            assert got.json() == {"code": 401, "message": "signature is already expired"}
        tampered = {**expired, "signature": expired["signature"][:-2] + "xx"}
        assert client.get("/files", params=tampered).json() == {
            "code": 401, "message": "invalid signature"}
        assert client.get("/files", params={"path": str(target)}).json() == {
            "code": 401, "message": "missing signature query parameter"}
        wrong = client.get("/files", params={"path": str(target)},
                           headers={"x-access-token": "nope"})
        assert wrong.json() == {
            "code": 401, "message": "access token present in header but does not match"}
    assert target.read_text() == "signed"  # the refused upload wrote nothing


# ----- downloads as upstream's http.ServeContent serves them -------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Path:
    target = tmp_path / "data.json"
    target.write_bytes(b"0123456789" * 10)
    os.utime(target, (1_700_000_000, 1_700_000_000))
    return target


def _download(client: TestClient, path: Path, **headers: str) -> Any:
    return client.get("/files", params={"path": str(path), "username": "root"}, headers=headers)


def test_a_download_says_its_type_and_age(client: TestClient, served: Path) -> None:
    got = _download(client, served, **{"accept-encoding": "identity"})
    assert got.status_code == 200 and got.content == served.read_bytes()
    assert got.headers["content-type"] == "application/json"
    assert got.headers["accept-ranges"] == "bytes"
    assert got.headers["last-modified"] == "Tue, 14 Nov 2023 22:13:20 GMT"
    assert "content-disposition" not in got.headers  # upstream sends none
    unchanged = _download(client, served, **{"if-modified-since": got.headers["last-modified"]})
    assert unchanged.status_code == 304 and unchanged.content == b""
    older = _download(client, served, **{"if-modified-since": "Mon, 13 Nov 2023 00:00:00 GMT"})
    assert older.status_code == 200 and older.content == served.read_bytes()


@pytest.mark.parametrize(("asked", "span"), [
    ("bytes=10-19", (10, 19)), ("bytes=95-", (95, 99)), ("bytes=-3", (97, 99)),
    ("bytes=90-1000", (90, 99)),
])
def test_a_byte_range_is_served_alone_and_uncompressed(
    client: TestClient, served: Path, asked: str, span: tuple[int, int]
) -> None:
    got = _download(client, served, range=asked, **{"accept-encoding": "gzip"})
    first, last = span
    assert got.status_code == 206
    assert got.content == served.read_bytes()[first:last + 1]
    assert got.headers["content-range"] == f"bytes {first}-{last}/100"
    assert got.headers["content-length"] == str(last - first + 1)
    assert "content-encoding" not in got.headers


@pytest.mark.parametrize("asked", ["bytes=100-", "bytes=50-20", "bytes=-0"])
def test_a_range_it_cannot_satisfy_is_416(client: TestClient, served: Path, asked: str) -> None:
    got = _download(client, served, range=asked)
    assert got.status_code == 416 and got.headers["content-range"] == "bytes */100"


def test_the_whole_file_when_the_range_is_stale_or_several(
    client: TestClient, served: Path
) -> None:
    stale = _download(client, served, range="bytes=0-9",
                      **{"if-range": "Mon, 13 Nov 2023 00:00:00 GMT"})
    several = _download(client, served, range="bytes=0-1,5-6")
    for got in (stale, several):
        assert got.status_code == 200 and got.content == served.read_bytes()
    current = _download(client, served, range="bytes=0-9",
                        **{"if-range": "Tue, 14 Nov 2023 22:13:20 GMT"})
    assert current.status_code == 206 and current.content == b"0123456789"
    # A pseudo file's size is what reading it to EOF gave.
    boot_id = _download(client, Path(BOOT_ID), range="bytes=0-3")
    assert boot_id.status_code == 206 and boot_id.content == Path(BOOT_ID).read_bytes()[:4]


def test_a_range_of_a_large_file_is_read_at_its_offset(client: TestClient, tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    data = os.urandom(3 * 1024 * 1024 + 17)
    big.write_bytes(data)
    got = _download(client, big, range=f"bytes={len(data) - 1_500_000}-")
    assert got.status_code == 206 and got.content == data[-1_500_000:]
    assert got.headers["content-type"] == "application/octet-stream"
