"""Fast unit tests: EntryInfo formatting, path resolution, multipart parsing, signatures."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import pytest

from aenv_envd.entry_info import entry_info, go_permissions, write_metadata
from aenv_envd.errors import EnvdError
from aenv_envd.mounts import filesystem_type
from aenv_envd.multipart import MultipartParser, PartData, PartEnd, PartStart, parse_header_params
from aenv_envd.processes import end_event
from aenv_envd.signing import file_signature, signature_valid
from aenv_envd.system import parse_rfc3339
from aenv_envd.users import User, lookup_user, resolve_path, username_from_authorization
from envd.filesystem import filesystem_pb2 as fs_pb

USER = User("user", 1000, 1000, "/home/user", (1000,))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (stat.S_IFREG | 0o644, "-rw-r--r--"),
        (stat.S_IFDIR | 0o755, "drwxr-xr-x"),
        (stat.S_IFLNK | 0o777, "Lrwxrwxrwx"),
        (stat.S_IFDIR | 0o1777, "dtrwxrwxrwx"),
        (stat.S_IFREG | 0o4755, "urwxr-xr-x"),
        (stat.S_IFREG | 0o2755, "grwxr-xr-x"),
        (stat.S_IFCHR | 0o666, "Dcrw-rw-rw-"),
        (stat.S_IFBLK | 0o660, "Drw-rw----"),
        (stat.S_IFIFO | 0o600, "prw-------"),
        (stat.S_IFSOCK | 0o755, "Srwxr-xr-x"),
    ],
)
def test_go_permissions(mode: int, expected: str) -> None:
    assert go_permissions(mode) == expected


def test_entry_info_file_dir_symlink(tmp_path: Path) -> None:
    target = tmp_path / "file.txt"
    target.write_text("hello")
    target.chmod(0o640)
    write_metadata(str(target), {"k": "v"})
    entry = entry_info(str(target))
    assert (entry.name, entry.type, entry.size, entry.mode) == (
        "file.txt",
        fs_pb.FILE_TYPE_FILE,
        5,
        0o640,
    )
    assert entry.permissions == "-rw-r-----" and entry.owner == "root" and entry.group == "root"
    assert not entry.HasField("symlink_target") and dict(entry.metadata) == {"k": "v"}
    assert entry.modified_time.ToNanoseconds() == target.stat().st_mtime_ns
    os.symlink(target, tmp_path / "link")
    link = entry_info(str(tmp_path / "link"))
    assert link.path == str(tmp_path / "link") and link.is_symlink
    assert link.type == fs_pb.FILE_TYPE_FILE and link.symlink_target == str(target)
    assert link.permissions == "Lrwxrwxrwx" and link.mode == 0o640
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    dangling = entry_info(str(tmp_path / "dangling"))
    assert dangling.type == fs_pb.FILE_TYPE_SYMLINK and dangling.is_symlink
    assert entry_info(str(tmp_path)).type == fs_pb.FILE_TYPE_DIRECTORY


def test_resolve_path() -> None:
    assert resolve_path("~", USER, None) == "/home/user"
    assert resolve_path("~/a/../b", USER, None) == "/home/user/b"
    assert resolve_path("rel/x", USER, "/work") == "/home/user/rel/x"
    assert resolve_path("", USER, "/work") == "/work"
    assert resolve_path("", USER, None) == "/home/user"
    assert resolve_path("/abs//y/", USER, None) == "/abs/y"
    assert resolve_path("/", USER, None) == "/"


def test_username_from_authorization() -> None:
    assert username_from_authorization(None) is None
    assert username_from_authorization("Basic cm9vdDo=") == "root"
    for bad in ("Bearer x", "Basic !!!", "Basic Og=="):
        with pytest.raises(EnvdError) as info:
            username_from_authorization(bad)
        assert info.value.code == "unauthenticated"


def test_end_event_wording() -> None:
    ok = end_event(0).end
    assert (ok.exit_code, ok.exited, ok.status, ok.HasField("error")) == (
        0,
        True,
        "exit status 0",
        False,
    )
    failed = end_event(3 << 8).end
    assert (failed.exit_code, failed.error) == (3, "exit status 3")
    killed = end_event(signal.SIGKILL).end
    assert (killed.exit_code, killed.exited, killed.status) == (-1, False, "signal: killed")
    assert end_event(signal.SIGTERM).end.error == "signal: terminated"


def test_multipart_streaming_any_split() -> None:
    body = (
        b"preamble\r\n--BND\r\n"
        b'Content-Disposition: form-data; name="file"; filename="/home/user/a \\"q\\".txt"\r\n'
        b"Content-Type: text/plain\r\n\r\n"
        b"line1\r\n--BNx not a boundary\r\n"
        b'\r\n--BND\r\nContent-Disposition: form-data; name="file"; filename="/b"\r\n\r\n'
        b"\r\n--BND--\r\n"
    )
    for size in (1, 3, 7, len(body)):
        parser = MultipartParser("BND")
        events = [e for i in range(0, len(body), size) for e in parser.feed(body[i : i + size])]
        assert parser.done
        starts = [e for e in events if isinstance(e, PartStart)]
        _, params = parse_header_params(starts[0].headers["content-disposition"])
        assert params == {"name": "file", "filename": '/home/user/a "q".txt'}
        parts: list[bytes] = []
        current = b""
        for event in events:
            if isinstance(event, PartData):
                current += event.data
            elif isinstance(event, PartEnd):
                parts.append(current)
                current = b""
        assert parts == [b"line1\r\n--BNx not a boundary\r\n", b""]


def test_signatures() -> None:
    signature = file_signature("/a.txt", "read", "", "tok", None)
    assert signature.startswith("v1_") and not signature.endswith("=")
    assert signature_valid(signature, None, "/a.txt", "read", "", "tok")
    assert not signature_valid(signature, None, "/a.txt", "write", "", "tok")
    expiring = file_signature("/a.txt", "write", "user", "tok", 2000)
    assert signature_valid(expiring, "2000", "/a.txt", "write", "user", "tok", now=1999)
    assert not signature_valid(expiring, "2000", "/a.txt", "write", "user", "tok", now=2001)


def test_rfc3339_and_mounts(tmp_path: Path) -> None:
    assert parse_rfc3339("2026-01-01T00:00:00Z") == 1767225600
    assert parse_rfc3339("2026-01-01T01:00:00.5+01:00") == 1767225600.5
    assert parse_rfc3339("2026-01-01T00:00:00.123456789Z") == pytest.approx(1767225600.123456)
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n30 22 0:40 / /mnt/nfs\\040share rw - nfs4 srv:/x rw\n"
    )
    assert filesystem_type("/mnt/nfs share/a", str(info)) == "nfs4"
    assert filesystem_type("/home", str(info)) == "ext4"


def test_root_is_uid_0_even_without_an_account_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image may have no /etc/passwd (busybox alone): root still exists, others do not."""
    def no_accounts(name: str) -> None:
        raise KeyError(name)

    monkeypatch.setattr("aenv_envd.users.pwd.getpwnam", no_accounts)
    root = lookup_user("root")
    assert (root.name, root.uid, root.gid, root.home) == ("root", 0, 0, "/root")
    with pytest.raises(EnvdError, match="invalid username: 'user'"):
        lookup_user("user")


def test_an_image_without_bash_runs_the_sdks_commands_with_its_posix_shell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os.path

    from aenv_envd import processes

    present = {"/bin/sh"}
    monkeypatch.setattr(os.path, "exists", lambda path: path in present)
    assert processes.available_shell("/bin/bash") == "/bin/sh"
    assert processes.available_shell("/usr/bin/python3") == "/usr/bin/python3"
    present.add("/bin/bash")
    assert processes.available_shell("/bin/bash") == "/bin/bash"
