"""A whole base disk from a hand-made OCI layout: pull, unpack, ext4, qcow2, read back with
debugfs; and the failures that must leave nothing behind."""

from __future__ import annotations

import asyncio
import json
import os
import tarfile
import threading
import time
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts.proc import run
from aenv_nodeagent.images import (
    BlobCache,
    DiskSize,
    DockerArchiveSource,
    OciLayoutSource,
    build_base_disk,
)
from aenv_nodeagent.images import rootfs as rootfs_module
from aenv_nodeagent.images.errors import (
    ImageNotFound,
    LayerCorrupt,
    RootfsTooLarge,
    WrongArchitecture,
)
from aenv_nodeagent.images.sources import Layer, PulledImage
from aenv_nodeagent.images.unpack import UnpackStats, unpack_image
from aenv_testing.oci_layouts import CAP_NET_RAW

from .ext4 import Ext4
from .layers import Entry, make_layer, opaque, whiteout, write_layout


def rich_layers() -> list[tuple[bytes, Layer]]:
    base = [
        Entry("bin", "dir", mode=0o755), Entry("bin/busybox", data=b"\x7fELF-ish", mode=0o755),
        Entry("bin/sh", "hardlink", link="bin/busybox"),
        Entry("bin/ping", data=b"ping", mode=0o755, xattrs={"security.capability": CAP_NET_RAW}),
        Entry("usr/bin/sudo", data=b"sudo", mode=0o4755),
        Entry("tmp", "dir", mode=0o1777), Entry("dev/null", "chr", mode=0o666, dev=(1, 3)),
        Entry("run/fifo", "fifo", mode=0o600),
        Entry("home/user", "dir", mode=0o750, uid=1000, gid=1000),
        Entry("home/user/.bashrc", data=b"# rc\n", uid=1000, gid=1000),
        Entry("etc/motd", data=b"welcome\n"), Entry("etc/os-release", data=b"ID=test\n"),
        Entry("var/cache/old", data=b"old"), Entry("lib", "symlink", link="usr/lib"),
        Entry("usr/lib", "dir", mode=0o755),
    ]
    top = [
        whiteout("etc/motd"), opaque("var/cache"), Entry("var/cache/new", data=b"new"),
        Entry("etc/os-release", data=b"ID=top\n"), Entry("lib/libx.so", data=b"lib"),
        Entry("bin/sh2", "hardlink", link="bin/busybox"),
    ]
    return [make_layer(base, "gzip"), make_layer(top, "zstd")]


async def test_layout_to_base_disk(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    digest = write_layout(layout, rich_layers(), tag="v1",
                          config={"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]}, as_index=True)
    out = tmp_path / "out"
    disk = await build_base_disk(OciLayoutSource(layout, "v1"), BlobCache(tmp_path / "c"), out, 64)
    assert set(disk.phases_ms) == {"pull", "unpack", "ext4", "qcow2"}
    assert disk.config["config"]["Cmd"] == ["/bin/sh"] and disk.digest != digest
    assert os.listdir(out) == ["rootfs.qcow2"] and disk.path == out / "rootfs.qcow2"
    assert disk.path.stat().st_mode & 0o777 == 0o444
    info = json.loads(await run(["qemu-img", "info", "--output=json", disk.path]))
    assert info["format"] == "qcow2" and info["virtual-size"] == 64 << 20

    fs = Ext4(disk.path, tmp_path)
    # The image's files, and what E2B's builder adds to every image (guest_files.py).
    assert fs.names("/etc") == ["hostname", "hosts", "os-release", "resolv.conf"]
    assert fs.cat("/etc/os-release") == b"ID=top\n"
    assert fs.names("/var/cache") == ["new"]
    assert fs.inode_number("/bin/sh") == fs.inode_number("/bin/busybox") == fs.inode_number(
        "/bin/sh2")
    busybox = fs.stat("/bin/busybox")
    assert busybox is not None and busybox.links == 3
    assert fs.xattr_hex("/bin/ping", "security.capability") == CAP_NET_RAW.hex()
    sudo, tmp, null = fs.stat("/usr/bin/sudo"), fs.stat("/tmp"), fs.stat("/dev/null")
    assert sudo is not None and sudo.mode == 0o4755
    assert tmp is not None and tmp.mode == 0o1777
    assert null is not None and null.type == "character special" and null.mode == 0o666
    fifo = fs.stat("/run/fifo")
    assert fifo is not None and fifo.type == "FIFO"
    home = fs.stat("/home/user")
    assert home is not None and (home.uid, home.gid, home.mode) == (1000, 1000, 0o750)
    assert fs.symlink("/lib") == "usr/lib" and fs.cat("/usr/lib/libx.so") == b"lib"
    root = fs.stat("/")
    assert root is not None and (root.uid, root.gid) == (0, 0)


async def test_the_guest_files_replace_the_images_inside_the_root(tmp_path: Path) -> None:
    """`localhost` resolves in every image's guest: /etc/hosts, /etc/hostname and
    /etc/resolv.conf are written as E2B's builder writes them, replacing the image's own (a
    symlinked resolv.conf too), and an absolute symlink for /etc stays inside the root."""
    layout = tmp_path / "layout"
    write_layout(layout, [make_layer([
        Entry("real", "dir", mode=0o755), Entry("etc", "symlink", link="/real/etc"),
        Entry("real/etc", "dir", mode=0o755), Entry("real/etc/hosts", data=b"10.0.0.1 x\n"),
        Entry("real/etc/resolv.conf", "symlink", link="../run/stub-resolv.conf"),
    ], "gzip")])
    disk = await build_base_disk(OciLayoutSource(layout), BlobCache(tmp_path / "c"),
                                 tmp_path / "out", 64)
    fs = Ext4(disk.path, tmp_path)
    assert fs.symlink("/etc") == "/real/etc"
    assert fs.names("/real/etc") == ["hostname", "hosts", "resolv.conf"]
    hosts = fs.cat("/real/etc/hosts").decode()
    assert "127.0.0.1\tlocalhost\n" in hosts and "10.0.0.1" not in hosts
    assert "127.0.1.1\taenv\n" in hosts
    assert fs.cat("/real/etc/hostname") == b"aenv\n"
    assert fs.cat("/real/etc/resolv.conf") == b"nameserver 8.8.8.8\n"
    for name in ("hosts", "hostname", "resolv.conf"):
        found = fs.stat(f"/real/etc/{name}")
        assert found is not None and found.type == "regular"
        assert (found.uid, found.gid, found.mode) == (0, 0, 0o644)


async def test_too_large_for_the_disk_leaves_nothing(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, [make_layer([Entry("big", data=os.urandom(40 << 20))], "")])
    out = tmp_path / "out"
    with pytest.raises(RootfsTooLarge, match=r"needs about \d+ MiB but the disk is 32 MiB"):
        await build_base_disk(OciLayoutSource(layout), BlobCache(tmp_path / "c"), out, 32)
    assert os.listdir(out) == []


async def test_a_disk_asked_for_free_room_grows_to_the_files_plus_that_room(
    tmp_path: Path,
) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, [make_layer([Entry("big", data=os.urandom(40 << 20))], "")])
    source, cache = OciLayoutSource(layout), BlobCache(tmp_path / "c")
    disk = await build_base_disk(source, cache, tmp_path / "grown", DiskSize(32, 100))
    assert disk.disk_mib >= 140 and disk.disk_mib % 256 == 0
    kept = await build_base_disk(source, cache, tmp_path / "kept", DiskSize(1024, 100))
    assert kept.disk_mib == 1024  # room enough already: never smaller than asked
    with pytest.raises(RootfsTooLarge, match=r"needs a 256 MiB disk, but a template's disk is at "
                       r"most 64 MiB: ask for less free room"):
        await build_base_disk(source, cache, tmp_path / "capped", DiskSize(32, 100, 64))


async def test_corrupt_layout_blob_leaves_nothing(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    blob, layer = make_layer([Entry("f", data=b"original")], "")
    write_layout(layout, [(blob, layer)])
    assert layer.digest is not None
    blob_path = layout / "blobs" / "sha256" / layer.digest.split(":")[1]
    blob_path.write_bytes(blob.replace(b"original", b"tampered"))
    out = tmp_path / "out"
    with pytest.raises(LayerCorrupt, match="hashes to"):
        await build_base_disk(OciLayoutSource(layout), BlobCache(tmp_path / "c"), out, 32)
    assert os.listdir(out) == []


async def test_layout_without_amd64(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, [make_layer([Entry("f")])], architecture="arm64", as_index=True)
    with pytest.raises(WrongArchitecture, match="linux/arm64"):
        await OciLayoutSource(layout).pull(BlobCache(tmp_path / "c"))


async def test_layout_tag_missing(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    write_layout(layout, [make_layer([Entry("f")])], tag="v1")
    with pytest.raises(ImageNotFound, match="no image tagged 'v2'"):
        await OciLayoutSource(layout, "v2").pull(BlobCache(tmp_path / "c"))
    with pytest.raises(ImageNotFound):
        await OciLayoutSource(tmp_path / "nowhere").pull(BlobCache(tmp_path / "c"))


def _docker25_archive(layout: Path, archive: Path) -> None:
    """What `docker save` writes since Docker 25: an OCI layout plus manifest.json whose
    Config and Layers name blobs/sha256/<hex> members."""
    index = json.loads((layout / "index.json").read_text())
    manifest_hex = index["manifests"][0]["digest"].split(":")[1]
    manifest = json.loads((layout / "blobs" / "sha256" / manifest_hex).read_bytes())
    entry = [{"Config": f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}",
              "RepoTags": ["app:1"],
              "Layers": [f"blobs/sha256/{d['digest'].split(':')[1]}" for d in manifest["layers"]]}]
    (layout / "manifest.json").write_text(json.dumps(entry))
    with tarfile.open(archive, "w") as tar:
        for name in ("oci-layout", "index.json", "manifest.json", "blobs"):
            tar.add(layout / name, arcname=name)


async def test_docker_25_archive_with_compressed_blobs(tmp_path: Path) -> None:
    layout, archive = tmp_path / "layout", tmp_path / "saved.tar"
    write_layout(layout, rich_layers())
    _docker25_archive(layout, archive)
    disk = await build_base_disk(DockerArchiveSource(archive, "app:1"), BlobCache(tmp_path / "c"),
                                 tmp_path / "out", 32)
    fs = Ext4(disk.path, tmp_path)
    assert fs.cat("/etc/os-release") == b"ID=top\n" and fs.names("/var/cache") == ["new"]
    with pytest.raises(ImageNotFound, match="no image tagged 'app:2'"):
        await DockerArchiveSource(archive, "app:2").pull(BlobCache(tmp_path / "c"))


async def test_cancelled_mid_unpack_leaves_nothing(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    layout, out = tmp_path / "layout", tmp_path / "out"
    write_layout(layout, [make_layer([Entry("f", data=b"x")])])
    started = threading.Event()
    real_unpack = unpack_image

    def slow_unpack(root: Path, image: PulledImage) -> UnpackStats:
        started.set()
        time.sleep(0.3)  # still writing when the build is cancelled
        return real_unpack(root, image)

    monkeypatch.setattr(rootfs_module, "unpack_image", slow_unpack)
    build = asyncio.create_task(
        build_base_disk(OciLayoutSource(layout), BlobCache(tmp_path / "c"), out, 32))
    assert await asyncio.to_thread(started.wait, 10)
    build.cancel()
    with pytest.raises(asyncio.CancelledError):
        await build
    assert os.listdir(out) == []
