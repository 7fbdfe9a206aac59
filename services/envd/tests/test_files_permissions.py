"""The files API acts as upstream envd's does: as envd (root) whoever the caller is, so any user
reads and writes anywhere (the VM is the boundary), and what an upload, make_dir or move has to
create (the file, its missing parents) is given to the caller, parents that existed left as they
are; an unknown user is refused. Checked as `nobody`, on /files and on the Filesystem service.

Everything touched lives in a directory this test makes under /tmp and removes.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from aenv_envd.app import build_app
from aenv_envd.config import EnvdConfig
from aenv_envd.state import SandboxState

TOKEN = "permissions-token"
NOBODY = 65534
SECRET = b"root's secret\n"


@pytest.fixture
def client() -> Iterator[TestClient]:
    if os.geteuid() != 0:
        pytest.skip("envd acts for other users only as root")
    state = SandboxState(access_token=TOKEN)
    with TestClient(build_app(EnvdConfig(sync_clock=False, reseed_rng=False), state)) as client:
        client.headers["x-access-token"] = TOKEN
        yield client


@pytest.fixture
def tree() -> Iterator[Path]:
    """base/ (root, 0755): secret (root, 0600), rootonly/ (root, 0700) holding a file, and
    home/ (nobody's) with symlinks to the secret and into rootonly/."""
    base = Path(tempfile.mkdtemp(prefix="envd-perms-", dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "secret").write_bytes(SECRET)
        (base / "secret").chmod(0o600)
        (base / "rootonly").mkdir(mode=0o700)
        (base / "rootonly" / "file").write_bytes(SECRET)
        home = base / "home"
        home.mkdir(mode=0o755)
        os.chown(home, NOBODY, NOBODY)
        (home / "to-secret").symlink_to(base / "secret")
        (home / "to-rootonly").symlink_to(base / "rootonly")
        for link in ("to-secret", "to-rootonly"):
            os.chown(home / link, NOBODY, NOBODY, follow_symlinks=False)
        yield base
    finally:
        shutil.rmtree(base)


def _read(client: TestClient, path: Path | str, user: str) -> tuple[int, bytes]:
    response = client.get("/files", params={"path": str(path), "username": user})
    return response.status_code, response.content


def _write(client: TestClient, path: Path | str, user: str) -> int:
    return client.post(
        "/files",
        params={"path": str(path), "username": user},
        content=b"overwritten",
        headers={"content-type": "application/octet-stream"},
    ).status_code


def _rpc_answer(
    client: TestClient, method: str, body: dict[str, Any], user: str
) -> tuple[int, Any]:
    basic = base64.b64encode(f"{user}:".encode()).decode()
    response = client.post(
        f"/filesystem.Filesystem/{method}",
        json=body,
        headers={"authorization": f"Basic {basic}", "connect-protocol-version": "1"},
    )
    return response.status_code, response.json()


def _rpc(client: TestClient, method: str, body: dict[str, Any], user: str) -> int:
    return _rpc_answer(client, method, body, user)[0]


def _rpc_json(client: TestClient, method: str, body: dict[str, Any], user: str) -> Any:
    status, answer = _rpc_answer(client, method, body, user)
    assert status == 200, answer
    return answer


def _owner(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_uid, info.st_gid


def test_any_user_reads_anything(client: TestClient, tree: Path) -> None:
    home = tree / "home"
    for path in (
        tree / "secret",
        home / "to-secret",
        f"{home}/../secret",
        tree / "rootonly" / "file",
        home / "to-rootonly" / "file",
    ):
        assert _read(client, path, "nobody") == (200, SECRET), path


def test_an_upload_anywhere_is_given_to_the_caller(client: TestClient, tree: Path) -> None:
    # A new folder under a root-only one: the file and the parents made are nobody's...
    assert _write(client, tree / "rootonly" / "new" / "deeper" / "f", "nobody") == 200
    for made in ("new", "new/deeper", "new/deeper/f"):
        assert _owner(tree / "rootonly" / made) == (NOBODY, NOBODY), made
    assert (tree / "rootonly" / "new" / "deeper" / "f").read_bytes() == b"overwritten"
    # ...the parents that existed are left as they were.
    assert _owner(tree / "rootonly") == (0, 0) and _owner(tree) == (0, 0)
    # An existing file of root's, written as nobody, becomes nobody's (as upstream chowns it).
    assert _write(client, tree / "secret", "nobody") == 200
    assert (tree / "secret").read_bytes() == b"overwritten"
    assert _owner(tree / "secret") == (NOBODY, NOBODY)
    assert (tree / "secret").stat().st_mode & 0o777 == 0o600  # its mode is kept
    # Through a symlink: the target is written and given.
    assert _write(client, tree / "home" / "to-rootonly" / "file", "nobody") == 200
    assert _owner(tree / "rootonly" / "file") == (NOBODY, NOBODY)
    # Root's uploads stay root's.
    assert _write(client, tree / "rootonly" / "r" / "f", "root") == 200
    assert _owner(tree / "rootonly" / "r" / "f") == (0, 0)


def test_the_filesystem_service_acts_for_any_user(client: TestClient, tree: Path) -> None:
    home = tree / "home"
    assert _rpc(client, "ListDir", {"path": str(tree / "rootonly"), "depth": 1}, "nobody") == 200
    assert _rpc(client, "ListDir", {"path": str(home / "to-rootonly"), "depth": 1}, "nobody") == 200
    assert _rpc(client, "Stat", {"path": str(tree / "rootonly" / "file")}, "nobody") == 200
    # make_dir: every folder made is nobody's, the existing parent stays root's.
    assert _rpc(client, "MakeDir", {"path": str(tree / "rootonly" / "a" / "b")}, "nobody") == 200
    assert _owner(tree / "rootonly" / "a") == _owner(tree / "rootonly" / "a" / "b") == (
        NOBODY, NOBODY)
    assert _owner(tree / "rootonly") == (0, 0)
    # move: root's file keeps its owner; the destination's missing parents are nobody's.
    moved = {"source": str(tree / "secret"), "destination": str(home / "new" / "secret")}
    assert _rpc(client, "Move", moved, "nobody") == 200
    assert (home / "new" / "secret").read_bytes() == SECRET
    assert _owner(home / "new" / "secret") == (0, 0)
    assert _owner(home / "new") == (NOBODY, NOBODY)
    assert _rpc(client, "Remove", {"path": str(tree / "rootonly")}, "nobody") == 200
    assert not (tree / "rootonly").exists()


def test_a_watch_for_any_user_sees_root_only_folders(client: TestClient, tree: Path) -> None:
    created = _rpc_json(client, "CreateWatcher",
                        {"path": str(tree / "rootonly"), "recursive": True}, "nobody")
    (tree / "rootonly" / "file").write_bytes(b"more")
    seen: list[Any] = []
    deadline = time.monotonic() + 5  # the watcher's collector runs on envd's loop
    while {"name": "file", "type": "EVENT_TYPE_WRITE"} not in seen:
        assert time.monotonic() < deadline, seen
        time.sleep(0.05)
        seen += _rpc_json(client, "GetWatcherEvents", {"watcherId": created["watcherId"]},
                          "nobody").get("events", [])
    _rpc_json(client, "RemoveWatcher", {"watcherId": created["watcherId"]}, "nobody")


def test_an_unknown_user_is_refused(client: TestClient, tree: Path) -> None:
    assert _read(client, tree / "secret", "no-such-user")[0] == 401
    assert _write(client, tree / "x", "no-such-user") == 401
    assert _rpc(client, "MakeDir", {"path": str(tree / "d")}, "no-such-user") == 401
    assert not (tree / "x").exists() and not (tree / "d").exists()


def test_a_named_pipe_is_refused_without_stalling_envd(client: TestClient, tree: Path) -> None:
    """A blocking open of a FIFO would wait for a peer with envd's whole loop (the client here
    would hang): it is refused at once, for reading and writing, and envd answers on."""
    fifo = tree / "home" / "pipe"
    os.mkfifo(fifo)
    started = time.monotonic()
    status, body = _read(client, fifo, "nobody")
    assert status == 400 and b"named pipe" in body
    assert _write(client, fifo, "nobody") == 400
    assert time.monotonic() - started < 5
    assert _read(client, tree / "secret", "nobody") == (200, SECRET)
