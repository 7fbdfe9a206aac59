"""Fast tests of the artifact builders' pure parts: cache keys and entries, vmlinux extraction,
module ordering, /init rendering, the cpio writer and the kernel command line."""

from __future__ import annotations

import asyncio
import struct
import subprocess
from pathlib import Path

import pytest

from aenv_common.errors import Internal, InvalidArgument
from aenv_nodeagent.artifacts.cache import CacheKey, cached_build
from aenv_nodeagent.artifacts.initramfs import (
    CpioWriter,
    kernel_cmdline,
    load_order,
    render_init,
)
from aenv_nodeagent.artifacts.kernel import LZ4_LEGACY_MAGIC, extract_vmlinux, locate_lz4_payload
from aenv_nodeagent.artifacts.toolsdisk import render_aenv_init, tools_disk_key


def test_cache_key_changes_with_every_input(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")

    def key(value: str = "v") -> str:
        return CacheKey("k").add("input", value).add_tree("pkg", tmp_path / "pkg").hexdigest()

    base = key()
    assert key() == base
    assert key("other") != base
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    changed = key()
    assert changed != base
    (tmp_path / "pkg" / "a.py").chmod(0o755)
    assert key() != changed
    (tmp_path / "pkg" / "a.py").chmod(0o644)
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.pyc").write_bytes(b"junk")
    assert key() == changed, "caches must not change the key"


def test_label_and_value_boundaries_are_unambiguous() -> None:
    assert CacheKey("k").add("ab", "c").hexdigest() != CacheKey("k").add("a", "bc").hexdigest()


async def test_cached_build_builds_once_and_reuses(tmp_path: Path) -> None:
    calls: list[Path] = []

    async def build(tmp: Path) -> None:
        calls.append(tmp)
        await asyncio.sleep(0.05)
        (tmp / "out").write_text("done")

    first, second = await asyncio.gather(
        cached_build(tmp_path, "kind", "key1", build), cached_build(tmp_path, "kind", "key1", build)
    )
    assert len(calls) == 1
    assert first.path == second.path == tmp_path / "kind" / "key1"
    assert (first.path / "out").read_text() == "done"
    assert sorted((first.built, second.built)) == [False, True]
    again = await cached_build(tmp_path, "kind", "key1", build)
    assert not again.built and len(calls) == 1


async def test_failed_build_leaves_nothing_usable(tmp_path: Path) -> None:
    async def broken(tmp: Path) -> None:
        (tmp / "half").write_text("partial")
        raise Internal("boom")

    with pytest.raises(Internal):
        await cached_build(tmp_path, "kind", "key", broken)
    assert [p.name for p in (tmp_path / "kind").iterdir() if not p.name.endswith(".lock")] == []


def _lz4_legacy(data: bytes) -> bytes:
    return subprocess.run(["lz4", "-l", "-c"], input=data, capture_output=True, check=True).stdout


FAKE_ELF = b"\x7fELF" + bytes(range(256)) * 64


def _fake_bzimage(payload: bytes, setup_sects: int = 3) -> bytes:
    """Boot-protocol header with payload_offset/length, payload, then trailing junk."""
    header = bytearray((setup_sects + 1) * 512)
    header[0x1F1] = setup_sects
    header[0x202:0x206] = b"HdrS"
    offset = 100
    struct.pack_into("<II", header, 0x248, offset, len(payload))
    return bytes(header) + b"\xaa" * offset + payload + b"trailing junk"


async def test_vmlinux_extracted_from_bzimage_header(tmp_path: Path) -> None:
    compressed = _lz4_legacy(FAKE_ELF)
    assert compressed.startswith(LZ4_LEGACY_MAGIC)
    blob = _fake_bzimage(compressed + struct.pack("<I", len(FAKE_ELF)))
    assert locate_lz4_payload(blob) == compressed
    (tmp_path / "vmlinuz").write_bytes(blob)
    await extract_vmlinux(tmp_path / "vmlinuz", tmp_path / "vmlinux")
    assert (tmp_path / "vmlinux").read_bytes() == FAKE_ELF


async def test_vmlinux_found_by_magic_without_header(tmp_path: Path) -> None:
    compressed = _lz4_legacy(FAKE_ELF)
    (tmp_path / "blob").write_bytes(b"\x00" * 777 + compressed)
    await extract_vmlinux(tmp_path / "blob", tmp_path / "vmlinux")
    assert (tmp_path / "vmlinux").read_bytes() == FAKE_ELF


def test_blob_without_lz4_payload_is_rejected() -> None:
    with pytest.raises(Internal, match="LZ4"):
        locate_lz4_payload(b"\x00" * 4096)


def _fake_modules(root: Path, deps: dict[str, str], builtin: tuple[str, ...] = ()) -> Path:
    for name, depends in deps.items():
        ko = root / "kernel" / f"{name.replace('_', '-') if name == 'virtio_rng' else name}.ko"
        ko.parent.mkdir(parents=True, exist_ok=True)
        ko.write_bytes(b"\x7fELF...\0license=GPL\0depends=" + depends.encode() + b"\0name=x\0")
    (root / "modules.builtin").write_text("".join(f"kernel/{b}.ko\n" for b in builtin))
    return root


CLOUD_LIKE = {
    "virtio_ring": "", "virtio": "virtio_ring", "virtio_mmio": "virtio,virtio_ring",
    "virtio_blk": "virtio,virtio_ring", "failover": "", "net_failover": "failover",
    "virtio_net": "virtio_ring,virtio,net_failover", "virtio_balloon": "virtio,virtio_ring",
    "virtio_console": "virtio,virtio_ring", "virtio_rng": "virtio,virtio_ring",
    # The NFS client as Debian's cloud kernel 6.1 splits it (their .modinfo depends= lists).
    "nfsv3": "nfs,lockd,sunrpc,nfs_acl", "nfs": "sunrpc,fscache,lockd", "sunrpc": "",
    "lockd": "sunrpc,grace", "grace": "", "nfs_acl": "sunrpc", "fscache": "netfs", "netfs": "",
}
NFS_MODULES = ("sunrpc", "netfs", "fscache", "grace", "lockd", "nfs", "nfs_acl", "nfsv3")


def test_modules_load_after_their_dependencies(tmp_path: Path) -> None:
    order = load_order(_fake_modules(tmp_path, CLOUD_LIKE, builtin=("fs/ext4/ext4",)))
    assert order[:3] == ["virtio_ring", "virtio", "virtio_mmio"]
    assert set(order) == set(CLOUD_LIKE)
    assert order.index("net_failover") < order.index("virtio_net")
    assert order.index("failover") < order.index("net_failover")
    assert "ext4" not in order  # built in


def test_the_nfs_client_loads_after_its_dependencies(tmp_path: Path) -> None:
    """Volumes are NFSv3 mounts made by envd with mount(2): nfsv3 and all it needs are in."""
    order = load_order(_fake_modules(tmp_path, CLOUD_LIKE, builtin=("fs/ext4/ext4",)))
    assert [m for m in order if m in NFS_MODULES] == list(NFS_MODULES)  # post-order, as listed
    for module in NFS_MODULES:
        for dep in filter(None, CLOUD_LIKE[module].split(",")):
            assert order.index(dep) < order.index(module), (dep, module)
    assert order[-2:] == ["nfsv3", "virtio_rng"]  # required first, then optional


def test_nfs_is_required(tmp_path: Path) -> None:
    deps = {k: v for k, v in CLOUD_LIKE.items() if k != "lockd"}
    with pytest.raises(Internal, match="lockd"):
        load_order(_fake_modules(tmp_path, deps, builtin=("fs/ext4/ext4",)))


def test_a_built_in_sunrpc_is_not_loaded(tmp_path: Path) -> None:
    deps = {k: v for k, v in CLOUD_LIKE.items() if k != "sunrpc"}
    order = load_order(_fake_modules(tmp_path, deps, builtin=("fs/ext4/ext4", "net/sunrpc/sunrpc")))
    assert "sunrpc" not in order and order.index("lockd") < order.index("nfsv3")


def test_ext4_and_its_deps_are_loaded_when_modular(tmp_path: Path) -> None:
    deps = {**CLOUD_LIKE, "ext4": "jbd2,mbcache,crc16", "jbd2": "", "mbcache": "", "crc16": ""}
    order = load_order(_fake_modules(tmp_path, deps))
    assert order.index("jbd2") < order.index("ext4") and order.index("crc16") < order.index("ext4")


def test_missing_required_module_is_an_error(tmp_path: Path) -> None:
    deps = {k: v for k, v in CLOUD_LIKE.items() if k != "virtio_blk"}
    with pytest.raises(Internal, match="virtio_blk"):
        load_order(_fake_modules(tmp_path, deps, builtin=("fs/ext4/ext4",)))


def test_optional_module_may_be_absent(tmp_path: Path) -> None:
    deps = {k: v for k, v in CLOUD_LIKE.items() if k != "virtio_rng"}
    assert "virtio_rng" not in load_order(_fake_modules(tmp_path, deps, builtin=("fs/ext4/ext4",)))


def test_init_loads_modules_in_order_and_switches_root() -> None:
    init = render_init(["virtio_ring", "virtio", "virtio_mmio", "virtio_blk"])
    assert init.startswith("#!/bin/busybox sh\n")
    assert "for module in virtio_ring virtio virtio_mmio virtio_blk; do" in init
    assert "@MODULES@" not in init
    assert "169.254.0.21/30" in init and "169.254.0.22" in init
    assert "exec switch_root /newroot /opt/aenv/bin/aenv-init" in init


def test_aenv_init_keeps_runtime_out_of_children() -> None:
    script = render_aenv_init()
    assert script.startswith("#!/opt/aenv/bin/busybox sh\n")
    assert "env -i" in script and "tini-static -s --" in script
    assert "LD_LIBRARY_PATH" not in script  # the loader gets --library-path instead
    assert "-m aenv_envd" in script


def test_cpio_archive_lists_with_busybox(tmp_path: Path) -> None:
    cpio = CpioWriter()
    cpio.directory("bin")
    cpio.file("bin/tool", b"#!/bin/sh\necho hi\n", executable=True)
    cpio.symlink("bin/sh", "tool")
    cpio.file("odd", b"x")  # exercises padding
    archive = cpio.finish()
    listing = subprocess.run(
        ["busybox", "cpio", "-t", "-v"], input=archive, capture_output=True, check=True
    ).stdout.decode()
    assert "bin/tool" in listing and "bin/sh -> tool" in listing and "odd" in listing
    assert "rwxr-xr-x" in listing and listing.count("\n") == 4


def test_kernel_cmdline_quiet_and_verbose() -> None:
    quiet = kernel_cmdline()
    assert "console=ttyS0" in quiet and "panic=-1" in quiet and "quiet" in quiet.split()
    assert "tsc=reliable" in quiet.split()  # an idle guest's tick stops only on the TSC
    verbose = kernel_cmdline(verbose=True, extra=["aenv.hostname=box"])
    assert "quiet" not in verbose.split() and "aenv.debug=1" in verbose
    assert verbose.endswith("aenv.hostname=box")


async def test_tools_disk_key_follows_package_contents(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "mod").mkdir(parents=True)
    (package / "pyproject.toml").write_text("[project]\nname = 'p'\n")
    (package / "mod" / "__init__.py").write_text("")
    first = await tools_disk_key([package])
    assert await tools_disk_key([package]) == first
    (package / "mod" / "__init__.py").write_text("VERSION = 2\n")
    assert await tools_disk_key([package]) != first
    assert await tools_disk_key([]) != first


async def test_tools_disk_rejects_non_package_dir(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="not a Python package"):
        await tools_disk_key([tmp_path])
