"""Files through the official Python SDK (sync): every read and write form, directory
operations, metadata, ownership per user, and the polling watcher."""

from __future__ import annotations

import io
import time
import uuid

import pytest
from e2b import CommandExitException, FileType, Sandbox
from e2b.exceptions import FileNotFoundException
from e2b.sandbox.filesystem.watch_handle import FilesystemEventType

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]


@pytest.fixture
def workdir(sbx: Sandbox) -> str:
    path = f"/home/user/files-{uuid.uuid4().hex[:8]}"
    sbx.files.make_dir(path)
    return path


def test_text_bytes_and_stream_round_trip(sbx: Sandbox, workdir: str) -> None:
    info = sbx.files.write(f"{workdir}/a.txt", "héllo\n")
    assert info.path == f"{workdir}/a.txt" and info.name == "a.txt"
    assert sbx.files.read(f"{workdir}/a.txt") == "héllo\n"
    blob = bytes(range(256)) * 100
    sbx.files.write(f"{workdir}/b.bin", blob, use_octet_stream=True)
    assert sbx.files.read(f"{workdir}/b.bin", format="bytes") == blob
    assert b"".join(sbx.files.read(f"{workdir}/b.bin", format="stream")) == blob
    sbx.files.write(f"{workdir}/c.bin", io.BytesIO(blob))
    sbx.files.write(f"{workdir}/d.bin", iter([blob[:1000], blob[1000:]]))
    sbx.files.write(f"{workdir}/e.bin", blob, gzip=True)
    for name in ("c.bin", "d.bin", "e.bin"):
        assert sbx.files.read(f"{workdir}/{name}", format="bytes", gzip=True) == blob
    # Parents are created; the guest sees exactly what was written.
    sbx.files.write(f"{workdir}/deep/er/f.txt", "x")
    assert sbx.commands.run(f"cat {workdir}/deep/er/f.txt").stdout == "x"
    with pytest.raises(FileNotFoundException):
        sbx.files.read(f"{workdir}/missing.txt")


def test_write_files_and_metadata(sbx: Sandbox, workdir: str) -> None:
    written = sbx.files.write_files([
        {"path": f"{workdir}/one.txt", "data": "1"},
        {"path": f"{workdir}/two.bin", "data": b"\x02"},
    ])
    assert sorted(w.path for w in written) == [f"{workdir}/one.txt", f"{workdir}/two.bin"]
    assert sbx.files.read(f"{workdir}/two.bin", format="bytes") == b"\x02"
    sbx.files.write(f"{workdir}/meta.txt", "m", metadata={"origin": "suite"})
    assert sbx.files.get_info(f"{workdir}/meta.txt").metadata == {"origin": "suite"}


def test_list_depth_exists_info_rename_remove(sbx: Sandbox, workdir: str) -> None:
    sbx.files.write(f"{workdir}/top.txt", "12345")
    sbx.files.write(f"{workdir}/sub/inner.txt", "i")
    sbx.commands.run(f"ln -s {workdir}/top.txt {workdir}/link")
    shallow = {e.path: e for e in sbx.files.list(workdir)}
    assert set(shallow) == {f"{workdir}/top.txt", f"{workdir}/sub", f"{workdir}/link"}
    assert shallow[f"{workdir}/sub"].type == FileType.DIR
    assert shallow[f"{workdir}/link"].symlink_target == f"{workdir}/top.txt"
    deep = {e.path for e in sbx.files.list(workdir, depth=2)}
    assert f"{workdir}/sub/inner.txt" in deep
    assert sbx.files.exists(f"{workdir}/top.txt") and not sbx.files.exists(f"{workdir}/nope")
    info = sbx.files.get_info(f"{workdir}/top.txt")
    assert info.size == 5 and info.type == FileType.FILE and info.permissions == "-rw-r--r--"
    assert info.owner == "user" and info.group == "user" and info.mode == 0o644
    assert abs(info.modified_time.timestamp() - time.time()) < 120
    moved = sbx.files.rename(f"{workdir}/top.txt", f"{workdir}/moved/top.txt")
    assert moved.path == f"{workdir}/moved/top.txt"
    assert not sbx.files.exists(f"{workdir}/top.txt")
    with pytest.raises(FileNotFoundException):
        sbx.files.rename(f"{workdir}/top.txt", f"{workdir}/again.txt")
    sbx.files.remove(f"{workdir}/sub")
    assert not sbx.files.exists(f"{workdir}/sub/inner.txt")
    with pytest.raises(FileNotFoundException):
        sbx.files.get_info(f"{workdir}/sub")


def test_make_dir_twice(sbx: Sandbox, workdir: str) -> None:
    assert sbx.files.make_dir(f"{workdir}/new/nested") is True
    assert sbx.files.make_dir(f"{workdir}/new/nested") is False
    assert sbx.files.get_info(f"{workdir}/new/nested").type == FileType.DIR


def test_ownership_and_permissions_follow_user(sbx: Sandbox, workdir: str) -> None:
    sbx.files.write(f"{workdir}/mine.txt", "u")
    sbx.files.write("/root/roots.txt", "r", user="root")
    assert sbx.files.get_info(f"{workdir}/mine.txt").owner == "user"
    assert sbx.files.get_info("/root/roots.txt", user="root").owner == "root"
    assert sbx.commands.run("stat -c %U /root/roots.txt", user="root").stdout == "root\n"
    # New entries get the calling user's uid/gid and the usual modes.
    sbx.files.make_dir(f"{workdir}/rootdir", user="root")
    root_dir = sbx.files.get_info(f"{workdir}/rootdir")
    assert root_dir.owner == "root" and root_dir.permissions == "drwxr-xr-x"
    # The guest's own permission checks apply to the user's processes...
    with pytest.raises(CommandExitException):
        sbx.commands.run(f"touch {workdir}/rootdir/x")
    sbx.commands.run("rm -f /root/roots.txt", user="root")


def test_the_files_api_writes_anywhere_and_gives_it_to_the_caller(sbx: Sandbox) -> None:
    """...but not to the files API, which acts as E2B's envd does: as root whoever asks (the VM
    is the boundary), giving the caller the file and the folders it made (Harbor's first upload,
    the JS SDK suite's write into a new folder under /)."""
    top = f"/e2b-files-{uuid.uuid4().hex[:8]}"
    try:
        info = sbx.files.write(f"{top}/solution/solve.sh", "#!/bin/sh\necho ok\n")
        assert info.path == f"{top}/solution/solve.sh"
        for path in (top, f"{top}/solution", f"{top}/solution/solve.sh"):
            entry = sbx.files.get_info(path)
            assert (entry.owner, entry.group) == ("user", "user"), path
        assert sbx.files.get_info(f"{top}/solution").permissions == "drwxr-xr-x"
        assert sbx.files.get_info(f"{top}/solution/solve.sh").permissions == "-rw-r--r--"
        assert sbx.files.get_info("/").owner == "root"  # parents that existed are left alone
        assert sbx.commands.run(f"sh {top}/solution/solve.sh").stdout == "ok\n"
        # Into root's folders too, and reading root's files.
        sbx.files.write("/root/from-user.txt", "u")
        assert sbx.commands.run("stat -c %U:%G /root/from-user.txt /root",
                                user="root").stdout == "user:user\nroot:root\n"
        assert sbx.files.read("/etc/shadow").startswith("root:")
        sbx.commands.run(f"ln -s /etc/shadow {top}/shadow")
        assert sbx.files.read(f"{top}/shadow").startswith("root:")
        assert sbx.files.make_dir(f"{top}/made/deep") is True
        assert sbx.files.get_info(f"{top}/made").owner == "user"
        assert "from-user.txt" in {e.name for e in sbx.files.list("/root")}
        sbx.files.rename("/root/from-user.txt", f"{top}/moved/from-user.txt")
        assert sbx.files.get_info(f"{top}/moved").owner == "user"
    finally:
        sbx.files.remove(top)
        sbx.files.remove("/root/from-user.txt")
    assert not sbx.files.exists(top)


def test_sync_watch_dir_reports_events(sbx: Sandbox, workdir: str) -> None:
    watcher = sbx.files.watch_dir(workdir, recursive=True)
    try:
        sbx.files.make_dir(f"{workdir}/w")
        sbx.files.write(f"{workdir}/w/x.txt", "data")
        sbx.files.rename(f"{workdir}/w/x.txt", f"{workdir}/w/y.txt")
        sbx.files.remove(f"{workdir}/w/y.txt")
        events: set[tuple[str, FilesystemEventType]] = set()
        deadline = time.monotonic() + 15
        wanted = {
            ("w", FilesystemEventType.CREATE),
            ("w/x.txt", FilesystemEventType.CREATE),
            ("w/x.txt", FilesystemEventType.WRITE),
            ("w/x.txt", FilesystemEventType.RENAME),
            ("w/y.txt", FilesystemEventType.REMOVE),
        }
        while not wanted <= events and time.monotonic() < deadline:
            events |= {(e.name, e.type) for e in watcher.get_new_events()}
            time.sleep(0.3)
        assert wanted <= events, events
    finally:
        watcher.stop()
