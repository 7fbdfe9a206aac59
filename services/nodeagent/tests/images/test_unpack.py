"""The unpacker over hand-made layers: every entry kind, whiteouts, metadata, and the attempts
to write outside the root that it must refuse or keep inside."""

from __future__ import annotations

import dataclasses
import io
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from aenv_nodeagent.images.errors import LayerCorrupt, UnsupportedImage
from aenv_nodeagent.images.sources import Layer
from aenv_nodeagent.images.unpack import UnpackStats, apply_layer
from aenv_testing.oci_layouts import CAP_NET_RAW

from .layers import MTIME, Entry, make_layer, opaque, whiteout


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "root"
    path.mkdir()
    return path


def apply(root: Path, entries: list[Entry], compression: str = "gzip") -> UnpackStats:
    blob, layer = make_layer(entries, compression)
    stats = UnpackStats()
    apply_layer(root, io.BytesIO(blob), layer, stats)
    return stats


@pytest.mark.parametrize("compression", ["gzip", "zstd", ""])
def test_every_compression_gives_the_same_tree(root: Path, compression: str) -> None:
    stats = apply(root, [Entry("etc", "dir", mode=0o755), Entry("etc/hostname", data=b"box\n")],
                  compression)
    assert (root / "etc" / "hostname").read_bytes() == b"box\n"
    assert (stats.layers, stats.files, stats.bytes) == (1, 1, 4)


def test_files_created_without_their_directories_get_parents(root: Path) -> None:
    apply(root, [Entry("./a/b/c.txt", data=b"x"), Entry("/abs/file", data=b"y")])
    assert (root / "a" / "b" / "c.txt").read_bytes() == b"x"
    assert (root / "abs" / "file").read_bytes() == b"y", "a leading / is dropped"


def test_whiteouts_delete_files_and_whole_directories(root: Path) -> None:
    apply(root, [Entry("etc/motd", data=b"hi"), Entry("etc/keep", data=b"k"),
                 Entry("var/cache/apt", "dir"), Entry("var/cache/apt/x", data=b"x")])
    apply(root, [whiteout("etc/motd"), whiteout("var/cache/apt"), whiteout("nothing/there")])
    assert not (root / "etc" / "motd").exists()
    assert (root / "etc" / "keep").exists()
    assert not (root / "var" / "cache" / "apt").exists()
    assert sorted(os.listdir(root / "etc")) == ["keep"], "whiteout markers are not files"


def test_opaque_directory_keeps_only_this_layers_entries(root: Path) -> None:
    apply(root, [Entry("data/old1", data=b"1"), Entry("data/sub/old2", data=b"2")])
    # The marker after one of the layer's own entries and before another: both stay.
    apply(root, [Entry("data", "dir", mode=0o755), Entry("data/new1", data=b"n"),
                 opaque("data"), Entry("data/new2", data=b"m")])
    assert sorted(os.listdir(root / "data")) == ["new1", "new2"]


def test_hard_links_within_a_layer_and_to_a_lower_one(root: Path) -> None:
    apply(root, [Entry("bin/busybox", data=b"\x7fELF", mode=0o755)])
    apply(root, [Entry("bin/sh", "hardlink", link="bin/busybox"),
                 Entry("usr/bin/env", data=b"env"),
                 Entry("usr/bin/env2", "hardlink", link="/usr/bin/env")])
    assert os.stat(root / "bin" / "sh").st_ino == os.stat(root / "bin" / "busybox").st_ino
    assert os.stat(root / "usr/bin/env2").st_ino == os.stat(root / "usr/bin/env").st_ino
    assert os.stat(root / "bin" / "busybox").st_nlink == 2


def test_symlinks_are_made_as_given_and_replaced_not_followed(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.write_text("host file")
    apply(root, [Entry("link", "symlink", link=str(outside)), Entry("rel", "symlink", link="../x")])
    assert os.readlink(root / "link") == str(outside)
    apply(root, [Entry("link", data=b"image file")])
    assert outside.read_text() == "host file"
    assert not (root / "link").is_symlink() and (root / "link").read_bytes() == b"image file"


def test_a_directory_over_a_symlink_replaces_the_symlink(root: Path, tmp_path: Path) -> None:
    apply(root, [Entry("d", "symlink", link=str(tmp_path))])
    apply(root, [Entry("d", "dir", mode=0o755), Entry("d/f", data=b"in")])
    assert not (root / "d").is_symlink() and (root / "d" / "f").read_bytes() == b"in"
    assert not (tmp_path / "f").exists()


def test_files_and_directories_replace_each_other(root: Path) -> None:
    apply(root, [Entry("a", data=b"file"), Entry("b/child", data=b"c")])
    apply(root, [Entry("a", "dir", mode=0o755), Entry("a/x", data=b"x"), Entry("b", data=b"f")])
    assert (root / "a" / "x").read_bytes() == b"x"
    assert (root / "b").read_bytes() == b"f"


def test_lower_symlinked_directories_are_followed_inside_the_root(root: Path) -> None:
    apply(root, [Entry("usr/lib", "dir", mode=0o755), Entry("lib", "symlink", link="usr/lib")])
    apply(root, [Entry("lib/libc.so", data=b"libc")])
    assert (root / "usr" / "lib" / "libc.so").read_bytes() == b"libc"
    assert (root / "lib").is_symlink()


# ---- escapes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../x", "a/../../x", "./../../etc/passwd"])
def test_dot_dot_names_are_refused(root: Path, tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsupportedImage, match="outside the root"):
        apply(root, [Entry(name, data=b"pwned")])
    assert not (tmp_path / "x").exists()


def test_a_symlink_to_slash_then_a_file_through_it_stays_inside(root: Path, tmp_path: Path
                                                               ) -> None:
    host_dir = tmp_path / "hostdir"
    host_dir.mkdir()
    apply(root, [Entry("evil", "symlink", link="/"),
                 Entry("hostlink", "symlink", link=str(host_dir)),
                 Entry("up", "symlink", link="../../../../../.."),
                 Entry("evil/etc/pwned", data=b"1"),
                 Entry("hostlink/pwned", data=b"2"),
                 Entry("up/pwned", data=b"3")])
    assert (root / "etc" / "pwned").read_bytes() == b"1"
    assert (root / str(host_dir).lstrip("/") / "pwned").read_bytes() == b"2"
    assert (root / "pwned").read_bytes() == b"3"
    assert not (host_dir / "pwned").exists() and not Path("/etc/pwned").exists()


@pytest.mark.parametrize("name", [".wh..", "a/.wh.", "a/.wh.."])
def test_whiteouts_naming_no_entry_are_refused(root: Path, name: str) -> None:
    apply(root, [Entry("a/keep", data=b"k")])
    with pytest.raises(UnsupportedImage, match="names no entry"):
        apply(root, [Entry(name)])
    assert (root / "a" / "keep").exists() and root.exists()


def test_a_symlink_loop_is_refused(root: Path) -> None:
    with pytest.raises(UnsupportedImage, match="symlink loop"):
        apply(root, [Entry("a", "symlink", link="b"), Entry("b", "symlink", link="a"),
                     Entry("a/x", data=b"x")])


@pytest.mark.parametrize("link", ["../outside", "{outside}", "evil/{outside_rel}", "missing"])
def test_hard_links_out_of_the_root_are_refused(root: Path, tmp_path: Path, link: str) -> None:
    outside = tmp_path / "outside"
    outside.write_text("secret")
    target = link.format(outside=outside, outside_rel=str(outside).lstrip("/"))
    with pytest.raises(UnsupportedImage, match=r"hard link|outside the root"):
        apply(root, [Entry("evil", "symlink", link="/"), Entry("stolen", "hardlink", link=target)])
    assert os.stat(outside).st_nlink == 1


def test_a_whiteout_through_a_symlink_stays_inside(root: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    apply(root, [Entry("evil", "symlink", link=str(tmp_path))])
    apply(root, [whiteout("evil/victim"), opaque("evil")])
    assert victim.read_text() == "keep me"


# ---- metadata --------------------------------------------------------------------------------


def test_owners_modes_and_times(root: Path) -> None:
    apply(root, [
        Entry("tmp", "dir", mode=0o1777), Entry("usr/bin/sudo", data=b"s", mode=0o4755),
        Entry("home/user", "dir", mode=0o700, uid=1000, gid=1000, mtime=MTIME - 10),
        Entry("home/user/.profile", data=b"p", mode=0o600, uid=1000, gid=1000),
        Entry("home/user/link", "symlink", link=".profile", uid=1000, gid=1001),
        Entry("usr/bin/wall", data=b"w", mode=0o2755, gid=5),
    ])
    st = os.lstat(root / "tmp")
    assert stat.S_IMODE(st.st_mode) == 0o1777
    st = os.lstat(root / "usr/bin/sudo")
    assert stat.S_IMODE(st.st_mode) == 0o4755 and st.st_mtime == MTIME
    st = os.lstat(root / "usr/bin/wall")
    assert stat.S_IMODE(st.st_mode) == 0o2755 and st.st_gid == 5
    st = os.lstat(root / "home/user")
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, 1000, 0o700)
    assert st.st_mtime == MTIME - 10, "directory mtimes survive their children"
    st = os.lstat(root / "home/user/link")
    assert (st.st_uid, st.st_gid) == (1000, 1001) and stat.S_ISLNK(st.st_mode)


def test_device_nodes_and_fifos(root: Path) -> None:
    apply(root, [Entry("dev/null", "chr", mode=0o666, dev=(1, 3)),
                 Entry("dev/loop0", "blk", mode=0o660, dev=(7, 0), gid=6),
                 Entry("run/initctl", "fifo", mode=0o600)])
    st = os.lstat(root / "dev/null")
    assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 1 and os.minor(st.st_rdev) == 3
    assert stat.S_IMODE(st.st_mode) == 0o666
    st = os.lstat(root / "dev/loop0")
    assert stat.S_ISBLK(st.st_mode) and st.st_gid == 6
    assert stat.S_ISFIFO(os.lstat(root / "run/initctl").st_mode)


def test_xattrs_and_file_capabilities(root: Path) -> None:
    apply(root, [Entry("bin/ping", data=b"ping", mode=0o755, uid=0, gid=0,
                       xattrs={"security.capability": CAP_NET_RAW}),
                 Entry("etc/tagged", data=b"t", xattrs={"user.origin": b"test \xff value"})])
    assert os.getxattr(root / "bin/ping", "security.capability") == CAP_NET_RAW
    assert os.getxattr(root / "etc/tagged", "user.origin") == b"test \xff value"


# ---- verification ----------------------------------------------------------------------------


def _corrupt(layer: Layer, **changes: Any) -> Layer:
    return dataclasses.replace(layer, **changes)


def test_a_wrong_diff_id_is_refused(root: Path) -> None:
    blob, layer = make_layer([Entry("f", data=b"x")])
    with pytest.raises(LayerCorrupt, match="uncompressed layer hashes to"):
        apply_layer(root, io.BytesIO(blob), _corrupt(layer, diff_id="sha256:" + "0" * 64),
                    UnpackStats())


def test_a_wrong_blob_digest_or_size_is_refused(root: Path) -> None:
    blob, layer = make_layer([Entry("f", data=b"x")])
    with pytest.raises(LayerCorrupt, match="blob hashes to"):
        apply_layer(root, io.BytesIO(blob), _corrupt(layer, digest="sha256:" + "1" * 64),
                    UnpackStats())
    with pytest.raises(LayerCorrupt, match="expected"):
        apply_layer(root, io.BytesIO(blob), _corrupt(layer, size=layer.size + 1), UnpackStats())  # type: ignore[operator]


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_a_truncated_layer_is_refused(root: Path, compression: str) -> None:
    blob, layer = make_layer([Entry("f", data=os.urandom(50_000))], compression)
    with pytest.raises(LayerCorrupt, match="not a valid layer archive"):
        apply_layer(root, io.BytesIO(blob[: len(blob) // 2]), layer, UnpackStats())
