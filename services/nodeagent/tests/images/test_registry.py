"""Against a real registry (Debian's docker-registry), images made here with umoci and skopeo:
pulls anonymous, with htpasswd and with bearer tokens, the failures users will meet, the OCI
layout and docker-archive sources, and the layer cache."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aenv_nodeagent.images import (
    BlobCache,
    DockerArchiveSource,
    OciLayoutSource,
    RegistrySource,
    build_base_disk,
)
from aenv_nodeagent.images.auth import Credentials, Login
from aenv_nodeagent.images.errors import (
    ImageNotFound,
    LayerCorrupt,
    RegistryAuthFailed,
    RootfsTooLarge,
    WrongArchitecture,
)
from aenv_nodeagent.images.guest_files import GUEST_FILES
from aenv_testing.oci_layouts import BUSYBOX, CAP_NET_RAW, busybox_layout, sh
from aenv_testing.registry import REGISTRY_BIN, Registry, bcrypt_hash, docker_registry, push

from .ext4 import Ext4
from .layers import Entry, make_layer, opaque, whiteout, write_layout
from .tokens import TokenServer, token_server

pytestmark = [
    pytest.mark.registry,
    pytest.mark.skipif(not REGISTRY_BIN.exists(), reason="docker-registry is not installed"),
]
USER, PASSWORD = "builder", "s3cret-pass"


def rich_layout(work: Path) -> Path:
    """Hand-made layers: an opaque directory, whiteouts of a file and a directory, hard links
    across layers, a setuid file, owners, a device node, gzip then zstd."""
    layout = work / "rich"
    base = [
        Entry("usr/bin/tool", data=b"tool", mode=0o4755),
        Entry("home/dev", "dir", mode=0o700, uid=1000, gid=1000),
        Entry("dev/null", "chr", mode=0o666, dev=(1, 3)),
        Entry("var/lib/app/a", data=b"a"), Entry("var/lib/app/b", data=b"b"),
        Entry("opt/gone/x", data=b"x"), Entry("etc/config", data=b"v1"),
    ]
    top = [
        opaque("var/lib/app"), Entry("var/lib/app/c", data=b"c"), whiteout("opt/gone"),
        Entry("etc/config", data=b"v2"), Entry("usr/bin/tool2", "hardlink", link="usr/bin/tool"),
    ]
    write_layout(layout, [make_layer(base, "gzip"), make_layer(top, "zstd")], tag="1")
    return layout


@dataclass(frozen=True)
class Layouts:
    busybox: Path
    rich: Path
    arm64: Path
    archive: Path


@pytest.fixture(scope="session")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> Layouts:
    work = tmp_path_factory.mktemp("images")
    busybox = busybox_layout(work)
    arm64 = work / "arm64"
    write_layout(arm64, [make_layer([Entry("f", data=b"arm")])], tag="1", architecture="arm64",
                 as_index=True)
    archive = work / "busybox.tar"
    sh("skopeo", "copy", "--quiet", f"oci:{busybox}:1", f"docker-archive:{archive}:busybox:1")
    return Layouts(busybox, rich_layout(work), arm64, archive)


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[Registry]:
    async with docker_registry(tmp_path / "registry") as running:
        yield running


def check_busybox(disk_path: Path, work: Path) -> None:
    fs = Ext4(disk_path, work)
    assert fs.cat("/bin/busybox") == BUSYBOX.read_bytes()
    assert fs.inode_number("/bin/ping") == fs.inode_number("/bin/busybox")
    assert fs.xattr_hex("/bin/busybox", "security.capability") == CAP_NET_RAW.hex()
    assert fs.symlink("/bin/sh") == "busybox"
    # motd whited out: /etc holds only the files every image's root gets.
    assert fs.names("/etc") == sorted(Path(p).name for p in GUEST_FILES), "motd is not gone"
    tmp = fs.stat("/tmp")
    assert tmp is not None and tmp.mode == 0o1777


async def test_pull_busybox_then_reuse_the_layer_cache(
    registry: Registry, layouts: Layouts, tmp_path: Path
) -> None:
    await push(f"oci:{layouts.busybox}:1", registry, "tools/busybox:1")
    cache = BlobCache(tmp_path / "cache")
    source = RegistrySource(f"{registry.host}/tools/busybox:1")
    disk = await build_base_disk(source, cache, tmp_path / "one", 64)
    check_busybox(disk.path, tmp_path)
    assert disk.config["config"]["Cmd"] == ["/bin/sh"]
    assert (disk.downloaded_blobs, disk.cached_blobs) == (2, 0)
    served = registry.blob_requests()
    assert served == 3  # the config and two layers
    again = await build_base_disk(source, cache, tmp_path / "two", 64)
    assert (again.downloaded_blobs, again.cached_blobs) == (0, 2)
    assert registry.blob_requests() == served + 1, "only the config is fetched again"
    assert again.digest == disk.digest


async def test_pull_rich_layers(registry: Registry, layouts: Layouts, tmp_path: Path) -> None:
    await push(f"oci:{layouts.rich}:1", registry, "rich:1")
    disk = await build_base_disk(RegistrySource(f"{registry.host}/rich:1"),
                                 BlobCache(tmp_path / "cache"), tmp_path / "out", 32)
    fs = Ext4(disk.path, tmp_path)
    assert fs.names("/var/lib/app") == ["c"]
    assert fs.names("/opt") == []
    assert fs.cat("/etc/config") == b"v2"
    assert fs.inode_number("/usr/bin/tool2") == fs.inode_number("/usr/bin/tool")
    tool, home, null = fs.stat("/usr/bin/tool"), fs.stat("/home/dev"), fs.stat("/dev/null")
    assert tool is not None and tool.mode == 0o4755 and tool.links == 2
    assert home is not None and (home.uid, home.gid, home.mode) == (1000, 1000, 0o700)
    assert null is not None and null.type == "character special"


async def test_unknown_image_and_tag(registry: Registry, layouts: Layouts, tmp_path: Path
                                     ) -> None:
    await push(f"oci:{layouts.busybox}:1", registry, "tools/busybox:1")
    for name in ("tools/busybox:2", "tools/nothing:1", f"tools/busybox@sha256:{'0' * 64}"):
        with pytest.raises(ImageNotFound, match="not found"):
            await RegistrySource(f"{registry.host}/{name}").pull(BlobCache(tmp_path))


async def test_index_without_amd64(registry: Registry, layouts: Layouts, tmp_path: Path) -> None:
    await push(f"oci:{layouts.arm64}:1", registry, "armonly:1", all_platforms=True)
    with pytest.raises(WrongArchitecture, match=r"linux/arm64"):
        await RegistrySource(f"{registry.host}/armonly:1").pull(BlobCache(tmp_path))


async def test_corrupt_layer_in_registry_storage(
    registry: Registry, layouts: Layouts, tmp_path: Path
) -> None:
    await push(f"oci:{layouts.busybox}:1", registry, "tools/busybox:1")
    source = RegistrySource(f"{registry.host}/tools/busybox:1")
    pulled = await source.pull(BlobCache(tmp_path / "probe"))
    victim = pulled.layers[0].digest
    assert victim is not None
    registry.corrupt(victim)
    cache, out = BlobCache(tmp_path / "cache"), tmp_path / "out"
    with pytest.raises(LayerCorrupt, match=victim):
        await build_base_disk(source, cache, out, 64)
    assert not cache.has(victim)
    assert os.listdir(out) == [] and os.listdir(tmp_path / "cache" / "tmp") == []


async def test_rootfs_larger_than_the_disk(registry: Registry, layouts: Layouts, tmp_path: Path
                                           ) -> None:
    await push(f"oci:{layouts.busybox}:1", registry, "tools/busybox:1")
    with pytest.raises(RootfsTooLarge, match="disk is 3 MiB"):
        await build_base_disk(RegistrySource(f"{registry.host}/tools/busybox:1"),
                              BlobCache(tmp_path / "cache"), tmp_path / "out", 3)
    assert os.listdir(tmp_path / "out") == []


async def test_htpasswd_basic_auth(layouts: Layouts, tmp_path: Path) -> None:
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(f"{USER}:{bcrypt_hash(PASSWORD)}\n")
    auth = {"htpasswd": {"realm": "test-realm", "path": str(htpasswd)}}
    async with docker_registry(tmp_path / "registry", auth) as registry:
        await push(f"oci:{layouts.busybox}:1", registry, "private/bb:1", f"{USER}:{PASSWORD}")
        name = f"{registry.host}/private/bb:1"
        good = Credentials({registry.host: Login(USER, PASSWORD)})
        disk = await build_base_disk(RegistrySource(name, credentials=good),
                                     BlobCache(tmp_path / "cache"), tmp_path / "out", 64)
        check_busybox(disk.path, tmp_path)
        bad = Credentials({registry.host: Login(USER, "wrong-password")})
        with pytest.raises(RegistryAuthFailed, match="wrong user name or password") as err:
            await RegistrySource(name, credentials=bad).pull(BlobCache(tmp_path / "c2"))
        assert "wrong-password" not in err.value.message
        with pytest.raises(RegistryAuthFailed, match="none is set"):
            await RegistrySource(name).pull(BlobCache(tmp_path / "c3"))


async def test_bearer_token_auth(layouts: Layouts, tmp_path: Path) -> None:
    async with token_server(TokenServer(USER, PASSWORD, tmp_path)) as tokens:
        async with docker_registry(tmp_path / "registry", tokens.registry_auth()) as registry:
            await push(f"oci:{layouts.busybox}:1", registry, "private/bb:1", f"{USER}:{PASSWORD}")
            name = f"{registry.host}/private/bb:1"
            issued = tokens.issued
            good = Credentials({registry.host: Login(USER, PASSWORD)})
            disk = await build_base_disk(RegistrySource(name, credentials=good),
                                         BlobCache(tmp_path / "cache"), tmp_path / "out", 64)
            check_busybox(disk.path, tmp_path)
            assert tokens.issued == issued + 1, "one token for the whole pull"
            bad = Credentials({registry.host: Login(USER, "wrong-password")})
            with pytest.raises(RegistryAuthFailed, match="wrong user name or password"):
                await RegistrySource(name, credentials=bad).pull(BlobCache(tmp_path / "c2"))
            with pytest.raises(RegistryAuthFailed, match="anonymous access denied"):
                await RegistrySource(name).pull(BlobCache(tmp_path / "c3"))


async def test_oci_layout_source(layouts: Layouts, tmp_path: Path) -> None:
    disk = await build_base_disk(OciLayoutSource(layouts.busybox, "1"),
                                 BlobCache(tmp_path / "cache"), tmp_path / "out", 64)
    check_busybox(disk.path, tmp_path)
    assert disk.downloaded_blobs == 0


async def test_docker_archive_source(layouts: Layouts, tmp_path: Path) -> None:
    disk = await build_base_disk(DockerArchiveSource(layouts.archive),
                                 BlobCache(tmp_path / "cache"), tmp_path / "out", 64)
    check_busybox(disk.path, tmp_path)
    tagged = DockerArchiveSource(layouts.archive, "busybox:1")
    assert (await tagged.pull(BlobCache(tmp_path / "c"))).digest == disk.digest
