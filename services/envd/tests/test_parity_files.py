"""E2B parity of /files and ListDir on the real filesystem: pseudo files read to EOF, the
depth-first list order, metadata replaced by every upload, upstream's signature refusals."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

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
