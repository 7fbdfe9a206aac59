"""The files API acts with the calling user's permissions (issue 18, as_user.py): envd runs as
root, yet a request as `nobody` neither reads nor writes what nobody may not touch — directly,
through `..`, or through a symlink planted in a directory nobody owns — on /files and on the
Filesystem service; root still reaches everything.

Everything touched lives in a directory this test makes under /tmp and removes.
"""

from __future__ import annotations

import base64
import os
import shutil
import tempfile
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
    home/ (nobody's) with symlinks nobody planted to the secret and into rootonly/."""
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


def _read(client: TestClient, path: Path | str, user: str) -> int:
    return client.get("/files", params={"path": str(path), "username": user}).status_code


def _write(client: TestClient, path: Path | str, user: str) -> int:
    return client.post(
        "/files",
        params={"path": str(path), "username": user},
        content=b"overwritten",
        headers={"content-type": "application/octet-stream"},
    ).status_code


def _rpc(client: TestClient, method: str, body: dict[str, Any], user: str) -> int:
    basic = base64.b64encode(f"{user}:".encode()).decode()
    return client.post(
        f"/filesystem.Filesystem/{method}",
        json=body,
        headers={"authorization": f"Basic {basic}", "connect-protocol-version": "1"},
    ).status_code


def test_a_user_reads_only_what_it_may(client: TestClient, tree: Path) -> None:
    home = tree / "home"
    assert _write(client, home / "mine.txt", "nobody") == 200
    assert (home / "mine.txt").stat().st_uid == NOBODY
    assert _read(client, home / "mine.txt", "nobody") == 200
    for path in (
        tree / "secret",
        home / "to-secret",
        f"{home}/../secret",
        tree / "rootonly" / "file",
        home / "to-rootonly" / "file",
        f"{home}/../rootonly/file",
    ):
        assert _read(client, path, "nobody") == 403, path
    assert _read(client, tree / "secret", "root") == 200  # root reaches everything


def test_a_user_writes_only_where_it_may(client: TestClient, tree: Path) -> None:
    home = tree / "home"
    for path in (
        tree / "secret",
        home / "to-secret",
        f"{home}/../secret",
        tree / "rootonly" / "new",
        home / "to-rootonly" / "new",
        tree / "rootonly" / "sub" / "new",
    ):
        assert _write(client, path, "nobody") == 403, path
    assert (tree / "secret").read_bytes() == SECRET
    assert sorted(os.listdir(tree / "rootonly")) == ["file"]


def test_the_filesystem_service_acts_as_the_user(client: TestClient, tree: Path) -> None:
    home = tree / "home"
    assert _rpc(client, "ListDir", {"path": str(home), "depth": 1}, "nobody") == 200
    denied: list[tuple[str, dict[str, Any]]] = [
        ("ListDir", {"path": str(tree / "rootonly"), "depth": 1}),
        ("ListDir", {"path": str(home / "to-rootonly"), "depth": 1}),
        ("Remove", {"path": str(tree / "secret")}),
        ("Remove", {"path": str(home / "to-rootonly") + "/file"}),
        ("Move", {"source": str(tree / "secret"), "destination": str(home / "stolen")}),
        ("MakeDir", {"path": str(tree / "rootonly" / "dir")}),
        ("MakeDir", {"path": str(home / "to-rootonly" / "dir")}),
        ("CreateWatcher", {"path": str(tree / "rootonly")}),
    ]
    for method, body in denied:
        assert _rpc(client, method, body, "nobody") == 403, (method, body)
    assert (tree / "secret").read_bytes() == SECRET
    assert sorted(os.listdir(tree / "rootonly")) == ["file"]
    assert not (home / "stolen").exists()
    # What nobody owns, it manages.
    assert _rpc(client, "MakeDir", {"path": str(home / "d")}, "nobody") == 200
    assert (home / "d").stat().st_uid == NOBODY
    assert (
        _rpc(client, "Move", {"source": str(home / "d"), "destination": str(home / "e")}, "nobody")
        == 200
    )
    assert _rpc(client, "Remove", {"path": str(home / "e")}, "nobody") == 200
    assert not (home / "e").exists()
    assert _rpc(client, "ListDir", {"path": str(tree / "rootonly"), "depth": 1}, "root") == 200
