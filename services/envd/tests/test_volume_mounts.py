"""/init's volume mounts: parsing and validation, the mount(2) calls (faked at the ctypes
boundary by a kernel that keeps its own mountinfo), what a repeated /init keeps, and errors."""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from aenv_envd import mounts, volume_mounts
from aenv_envd.app import build_app
from aenv_envd.config import EnvdConfig
from aenv_envd.errors import EnvdError
from aenv_envd.mounts import is_network_filesystem, mounted_at, parse_mountinfo
from aenv_envd.state import SandboxState
from aenv_envd.status_table import http_status
from aenv_envd.volume_mounts import (
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOSUID,
    MS_RDONLY,
    MS_REMOUNT,
    VolumeMount,
    VolumeMounter,
    ensure_mounted,
    parse_volume_mounts,
)

GATEWAY = "169.254.0.22"
OPTIONS = ("vers=3,proto=tcp,port=2049,mountport=2049,mountproto=tcp,nolock,hard,timeo=100,"
           "retrans=3,lookupcache=positive,actimeo=1,addr=169.254.0.22")
ROOT_LINE = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"


def spec(path: str, export: str = "/vol-abc", **extra: Any) -> dict[str, Any]:
    return {"path": path, "server": GATEWAY, "port": 2049, "export": export, **extra}


class FakeKernel:
    """libc's mount/umount2 as the kernel answers them, mountinfo included."""

    def __init__(self, mountinfo: Path) -> None:
        self.mountinfo = mountinfo
        mountinfo.write_text(ROOT_LINE)
        self.calls: list[tuple[Any, ...]] = []
        self.fail_with = 0
        self.hold: threading.Event | None = None

    def mount(self, source: bytes, target: bytes, fstype: bytes | None, flags: int,
              data: bytes | None) -> int:
        self.calls.append(("mount", source, target, fstype, flags, data))
        if self.hold is not None:
            self.hold.wait(10)
        if self.fail_with:
            ctypes.set_errno(self.fail_with)
            return -1
        point = target.decode().replace(" ", "\\040")
        mode = "ro" if flags & MS_RDONLY else "rw"
        lines = self.mountinfo.read_text().splitlines(keepends=True)
        if flags & MS_REMOUNT:
            for i, line in enumerate(lines):
                fields = line.split(" ")
                if fields[4] == point:
                    lines[i] = line.replace(f" {fields[5]} ", f" {mode},nosuid,nodev ", 1)
        else:
            assert fstype == b"nfs" and data is not None
            lines.append(f"{40 + len(lines)} 22 0:{50 + len(lines)} / {point} "
                         f"{mode},nosuid,nodev,relatime shared:9 - nfs {source.decode()} "
                         f"rw,vers=3\n")
        self.mountinfo.write_text("".join(lines))
        return 0

    def umount2(self, target: bytes, flags: int) -> int:
        self.calls.append(("umount2", target, flags))
        point = target.decode().replace(" ", "\\040")
        lines = self.mountinfo.read_text().splitlines(keepends=True)
        last = max(i for i, line in enumerate(lines) if line.split(" ")[4] == point)
        del lines[last]
        self.mountinfo.write_text("".join(lines))
        return 0


@pytest.fixture
def kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeKernel]:
    fake = FakeKernel(tmp_path / "mountinfo")
    monkeypatch.setattr(volume_mounts, "_libc", fake)
    monkeypatch.setattr(mounts, "MOUNTINFO", str(fake.mountinfo))
    yield fake
    if fake.hold is not None:
        fake.hold.set()  # a test that failed mid-way leaves no thread waiting


def test_a_mount_is_parsed_with_the_contract_options(tmp_path: Path) -> None:
    (mount,) = parse_volume_mounts([spec("/data", readOnly=False)])
    assert mount == VolumeMount("/data", GATEWAY, 2049, "/vol-abc", read_only=False)
    assert mount.source == "169.254.0.22:/vol-abc"
    assert mount.options == OPTIONS
    assert mount.flags == MS_NOSUID | MS_NODEV
    (read_only,) = parse_volume_mounts([spec("/ro", readOnly=True)])
    assert read_only.flags == MS_NOSUID | MS_NODEV | MS_RDONLY
    assert parse_volume_mounts(None) == () and parse_volume_mounts([]) == ()


def test_parents_are_mounted_before_their_children() -> None:
    mounts_ = parse_volume_mounts([spec("/data/sub/x", "/vol-c"), spec("/data", "/vol-a"),
                                   spec("/data/sub", "/vol-b"), spec("/other", "/vol-d")])
    assert [m.path for m in mounts_] == ["/data", "/other", "/data/sub", "/data/sub/x"]


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        ({"path": "/data"}, "must be a list"),
        (["/data"], r"volumeMounts\[0\] must be an object"),
        ([spec("data")], r"\.path must be an absolute"),
        ([spec("/")], r"\.path"),
        ([spec("/data/")], r"\.path"),
        ([spec("/a/../data")], r"\.path"),
        ([spec("//data")], r"\.path"),
        ([spec("/da\nta")], r"\.path"),
        ([{**spec("/data"), "path": 5}], r"\.path"),
        ([{**spec("/data"), "server": "gateway.local"}], r"\.server must be an IPv4"),
        ([{**spec("/data"), "server": "169.254.0.022"}], r"\.server"),
        ([{**spec("/data"), "server": "::1"}], r"\.server"),
        ([{**spec("/data"), "port": True}], r"\.port"),
        ([{**spec("/data"), "port": "2049"}], r"\.port"),
        ([{**spec("/data"), "port": 0}], r"\.port"),
        ([{**spec("/data"), "port": 65536}], r"\.port"),
        ([spec("/data", export="vol-abc")], r"\.export"),
        ([spec("/data", export="/vol abc")], r"\.export"),
        ([spec("/data", export="/vol,abc")], r"\.export"),
        ([spec("/data", export="/a/../b")], r"\.export must be normalised"),
        ([spec("/data", export="/")], r"\.export"),
        ([{**spec("/data"), "export": None}], r"\.export"),
        ([spec("/data", readOnly="yes")], r"\.readOnly must be a boolean"),
        ([spec("/data"), spec("/data", "/vol-b")], "mounts /data twice"),
        ([spec(f"/d{i}") for i in range(65)], "at most 64"),
    ],
)
def test_malformed_mounts_are_refused(raw: object, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_volume_mounts(raw)


def test_mountinfo_entries_carry_source_and_mount_point_options() -> None:
    entries = parse_mountinfo(
        ROOT_LINE
        + "30 22 0:40 / /mnt/a\\040b ro,nosuid,nodev shared:5 master:2 - nfs 1.2.3.4:/v rw,vers=3\n"
        + "garbage line\n"
    )
    assert [e.mount_point for e in entries] == ["/", "/mnt/a b"]
    assert entries[1].fstype == "nfs" and entries[1].source == "1.2.3.4:/v"
    assert entries[1].read_only and not entries[0].read_only


def test_a_later_mount_on_the_same_point_is_the_one_seen(tmp_path: Path) -> None:
    info = tmp_path / "mountinfo"
    info.write_text(ROOT_LINE + "30 22 0:40 / /data rw - tmpfs tmpfs rw\n"
                    + "31 30 0:41 / /data rw - nfs 1.2.3.4:/v rw\n")
    seen = mounted_at("/data", str(info))
    assert seen is not None and seen.fstype == "nfs"
    assert mounted_at("/data/x", str(info)) is None


def test_fuse_and_nfs_are_network_filesystems_as_upstream_sees_them() -> None:
    for fstype in ("nfs", "nfs4", "cifs", "fuse", "fuseblk", "fuse.sshfs", "fuse.juicefs"):
        assert is_network_filesystem(fstype), fstype
    for local in ("ext4", "tmpfs", "overlay", None):
        assert not is_network_filesystem(local), local


def test_a_volume_is_mounted_on_a_directory_made_for_it(kernel: FakeKernel,
                                                         tmp_path: Path) -> None:
    target = tmp_path / "deep" / "data"
    (mount,) = parse_volume_mounts([spec(str(target))])
    assert ensure_mounted(mount) == "mounted"
    assert target.is_dir() and (target.stat().st_mode & 0o777) == 0o755
    assert kernel.calls == [("mount", b"169.254.0.22:/vol-abc", str(target).encode(), b"nfs",
                             MS_NOSUID | MS_NODEV, OPTIONS.encode())]


def test_a_path_mounted_from_the_same_source_is_kept(kernel: FakeKernel, tmp_path: Path) -> None:
    """A guest restored from memory (resume, fork child, snapshot) already has its mounts."""
    (mount,) = parse_volume_mounts([spec(str(tmp_path / "data"))])
    ensure_mounted(mount)
    kernel.calls.clear()
    assert ensure_mounted(mount) == "kept"
    assert kernel.calls == []


def test_a_changed_read_only_flag_remounts_the_mount_point_only(kernel: FakeKernel,
                                                                 tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    (writable,) = parse_volume_mounts([spec(path)])
    (read_only,) = parse_volume_mounts([spec(path, readOnly=True)])
    ensure_mounted(writable)
    kernel.calls.clear()
    assert ensure_mounted(read_only) == "remounted read-only"
    assert kernel.calls == [("mount", b"none", path.encode(), None,
                             MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_RDONLY, None)]
    assert ensure_mounted(read_only) == "kept"


def test_another_volume_at_the_path_is_detached_first(kernel: FakeKernel, tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    (old,) = parse_volume_mounts([spec(path, "/vol-old")])
    (new,) = parse_volume_mounts([spec(path, "/vol-new")])
    ensure_mounted(old)
    kernel.calls.clear()
    assert ensure_mounted(new) == "replaced"
    assert [c[0] for c in kernel.calls] == ["umount2", "mount"]
    assert kernel.calls[0] == ("umount2", path.encode(), MNT_DETACH)
    seen = mounted_at(path, str(kernel.mountinfo))
    assert seen is not None and seen.source == "169.254.0.22:/vol-new"


def test_a_local_filesystem_at_the_path_is_mounted_over(kernel: FakeKernel,
                                                        tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.mkdir()
    with kernel.mountinfo.open("a") as info:
        info.write(f"30 22 0:40 / {path} rw - tmpfs tmpfs rw\n")
    (mount,) = parse_volume_mounts([spec(str(path))])
    assert ensure_mounted(mount) == "mounted"
    assert [c[0] for c in kernel.calls] == ["mount"]


async def test_a_failed_mount_names_the_path_and_the_errno(kernel: FakeKernel,
                                                           tmp_path: Path) -> None:
    kernel.fail_with = errno.EACCES
    path = str(tmp_path / "data")
    with pytest.raises(EnvdError) as raised:
        await VolumeMounter(5).ensure(parse_volume_mounts([spec(path)]))
    assert http_status(raised.value) == 500
    assert raised.value.message == (f"cannot mount volume 169.254.0.22:/vol-abc at {path}: "
                                    "Permission denied (EACCES)")


async def test_a_mount_point_that_is_a_file_fails(kernel: FakeKernel, tmp_path: Path) -> None:
    (tmp_path / "data").write_text("x")
    with pytest.raises(EnvdError, match=r"at .*/data: File exists \(EEXIST\)"):
        await VolumeMounter(5).ensure(parse_volume_mounts([spec(str(tmp_path / "data"))]))
    assert kernel.calls == []


async def test_mounts_that_hang_fail_after_the_timeout(kernel: FakeKernel,
                                                       tmp_path: Path) -> None:
    kernel.hold = threading.Event()
    with pytest.raises(EnvdError, match=r"/data: timed out after 0.2s"):
        await VolumeMounter(0.2).ensure(parse_volume_mounts([spec(str(tmp_path / "data"))]))
    kernel.hold.set()


def test_the_real_libc_reports_errno(tmp_path: Path) -> None:
    """The ctypes boundary itself: umount2 of a directory that is no mount point fails."""
    with pytest.raises(OSError) as raised:
        volume_mounts.sys_umount2(str(tmp_path), 0)
    assert raised.value.errno in {errno.EINVAL, errno.EPERM}
    assert raised.value.filename == str(tmp_path)


def client_for(state: SandboxState) -> TestClient:
    return TestClient(build_app(EnvdConfig(sync_clock=False, reseed_rng=False), state))


def test_init_mounts_the_volumes_and_a_repeated_init_keeps_them(kernel: FakeKernel,
                                                                tmp_path: Path) -> None:
    body = {"accessToken": "t", "volumeMounts": [spec(str(tmp_path / "a"), "/vol-a"),
                                                 spec(str(tmp_path / "b"), "/vol-b",
                                                      readOnly=True)]}
    with client_for(SandboxState()) as client:
        assert client.post("/init", json=body).status_code == 204
        assert [(c[0], c[2]) for c in kernel.calls] == [
            ("mount", str(tmp_path / "a").encode()), ("mount", str(tmp_path / "b").encode())]
        kernel.calls.clear()
        again = client.post("/init", json=body, headers={"x-access-token": "t"})
        assert again.status_code == 204
        assert kernel.calls == []
        # An /init without volumeMounts leaves the mounts alone.
        assert client.post("/init", json={}, headers={"x-access-token": "t"}).status_code == 204
        assert kernel.calls == []


def test_a_malformed_mount_refuses_the_whole_init(kernel: FakeKernel, tmp_path: Path) -> None:
    state = SandboxState()
    body = {"accessToken": "t", "envVars": {"A": "1"},
            "volumeMounts": [spec(str(tmp_path / "a")), spec("relative")]}
    with client_for(state) as client:
        answer = client.post("/init", json=body)
        assert answer.status_code == 400
        assert "volumeMounts[1].path" in answer.json()["message"]
        assert client.post("/init", json=[]).status_code == 400  # not an object
    assert state.access_token is None and state.env_vars == {}  # nothing applied
    assert kernel.calls == []


def test_a_failed_mount_fails_init_with_its_reason(kernel: FakeKernel, tmp_path: Path) -> None:
    kernel.fail_with = errno.ETIMEDOUT
    path = str(tmp_path / "a")
    with client_for(SandboxState()) as client:
        answer = client.post("/init", json={"volumeMounts": [spec(path)]})
    assert answer.status_code == 500
    assert answer.json() == {"code": 500, "message": (
        f"cannot mount volume 169.254.0.22:/vol-abc at {path}: Connection timed out (ETIMEDOUT)")}


def test_mount_points_are_compared_with_symlinks_resolved(kernel: FakeKernel,
                                                          tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    (mount,) = parse_volume_mounts([spec(str(tmp_path / "link"))])
    ensure_mounted(mount)
    # The kernel followed the link; a second /init finds the mount under its real name.
    kernel.mountinfo.write_text(kernel.mountinfo.read_text().replace(str(tmp_path / "link"),
                                                                     str(real)))
    kernel.calls.clear()
    assert ensure_mounted(mount) == "kept"
