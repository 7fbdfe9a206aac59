"""Guest kernel: the uncompressed PVH vmlinux and modules of Debian's cloud kernel.

The kernel package is downloaded (never installed on the host), its bzImage's LZ4 payload is
decompressed into an ELF vmlinux (QEMU boots it through the PVH entry, about twice as fast as
the bzImage under TCG), and the module tree is kept for the initramfs build.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from aenv_common.errors import Internal, NotFound

from .cache import CacheEntry, CacheKey, cached_build
from .proc import run

KERNEL_METAPACKAGE = "linux-image-cloud-amd64"
_BUILD_VERSION = "1"
LZ4_LEGACY_MAGIC = b"\x02\x21\x4c\x18"
_ELF_MAGIC = b"\x7fELF"


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str


@dataclass(frozen=True)
class KernelBuild:
    vmlinux: Path
    modules_dir: Path  # lib/modules/<release>
    release: str  # uname -r, e.g. 6.1.0-57-cloud-amd64
    package: DebPackage
    entry: CacheEntry


APT_LISTS = Path("/var/lib/apt/lists")


def apt_lists_fingerprint(lists_dir: Path = APT_LISTS) -> str:
    """Changes whenever `apt-get update` changed the package lists."""
    key = CacheKey("apt-lists")
    for entry in sorted(lists_dir.glob("*_Packages*")):
        info = entry.stat()
        key.add(entry.name, f"{info.st_size}:{info.st_mtime_ns}")
    return key.hexdigest()


async def _query_kernel_package(metapackage: str) -> DebPackage:
    out = (await run(["apt-cache", "show", "--no-all-versions", metapackage])).decode()
    match = re.search(r"^Depends:.*?(linux-image-\d\S*) \(= ([^)\s]+)\)", out, re.MULTILINE)
    if match is None:
        raise NotFound(f"cannot resolve {metapackage!r} to a kernel package: run `apt-get update`")
    return DebPackage(match.group(1), match.group(2))


async def resolve_kernel_package(
    cache_dir: Path, metapackage: str = KERNEL_METAPACKAGE
) -> DebPackage:
    """The concrete linux-image-<abi>-cloud-amd64 package (and version) the metapackage pins.

    apt-cache takes about a second, so the answer is memoized until the apt lists change.
    """
    memo = cache_dir / "kernel" / f".resolved-{metapackage}.json"
    fingerprint = apt_lists_fingerprint()
    if memo.exists():
        saved = json.loads(memo.read_text())
        if saved.get("lists") == fingerprint:
            return DebPackage(saved["name"], saved["version"])
    package = await _query_kernel_package(metapackage)
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"lists": fingerprint, "name": package.name,
                               "version": package.version}))
    tmp.rename(memo)
    return package


async def download_deb(package: DebPackage, dest_dir: Path) -> Path:
    """apt-get download one exact package version into dest_dir; return the .deb path."""
    await run(
        ["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root",
         f"{package.name}={package.version}"],
        cwd=dest_dir,
    )
    debs = await asyncio.to_thread(lambda: sorted(dest_dir.glob(f"{package.name}_*.deb")))
    if not debs:
        raise Internal(f"apt-get download {package.name} produced no .deb")
    return debs[0]


def locate_lz4_payload(bzimage: bytes) -> bytes:
    """The LZ4 legacy stream inside a bzImage, without the 4-byte size the kernel appends.

    Uses the boot protocol header (payload_offset/payload_length) when present, so trailing
    data never reaches lz4; otherwise falls back to the first LZ4 legacy magic.
    """
    if bzimage[0x202:0x206] == b"HdrS":
        setup_sects = bzimage[0x1F1] or 4
        offset, length = struct.unpack_from("<II", bzimage, 0x248)
        start = (setup_sects + 1) * 512 + offset
        payload = bzimage[start : start + length]
        if payload.startswith(LZ4_LEGACY_MAGIC):
            return payload[:-4]
    start = bzimage.find(LZ4_LEGACY_MAGIC)
    if start < 0:
        raise Internal("kernel image has no LZ4 payload (is the kernel LZ4-compressed?)")
    return bzimage[start:]


async def extract_vmlinux(bzimage: Path, out: Path) -> None:
    payload = locate_lz4_payload(await asyncio.to_thread(bzimage.read_bytes))
    vmlinux = await run(["lz4", "-dc"], stdin=payload)
    if not vmlinux.startswith(_ELF_MAGIC):
        raise Internal(f"decompressed payload of {bzimage.name} is not an ELF vmlinux")
    await asyncio.to_thread(out.write_bytes, vmlinux)


def _modules_dir(root: Path, release: str) -> Path:
    for candidate in (root / "lib" / "modules" / release, root / "usr/lib/modules" / release):
        if candidate.is_dir():
            return candidate
    raise Internal(f"kernel package has no modules directory for {release}")


async def _build_kernel(package: DebPackage, tmp: Path) -> None:
    work = tmp / "work"
    work.mkdir()
    deb = await download_deb(package, work)
    await run(["dpkg-deb", "-x", deb, work / "root"])
    images = sorted((work / "root" / "boot").glob("vmlinuz-*"))
    if len(images) != 1:
        raise Internal(f"{package.name} contains {len(images)} vmlinuz images, expected 1")
    release = images[0].name.removeprefix("vmlinuz-")
    await extract_vmlinux(images[0], tmp / "vmlinux")
    _modules_dir(work / "root", release).rename(tmp / "modules")
    shutil.copy2(work / "root" / "boot" / f"config-{release}", tmp / "config")
    info = {"release": release, "package": package.name, "version": package.version}
    (tmp / "kernel.json").write_text(json.dumps(info))
    shutil.rmtree(work)


async def ensure_kernel(cache_dir: Path) -> KernelBuild:
    package = await resolve_kernel_package(cache_dir)
    key = (
        CacheKey("kernel")
        .add("build", _BUILD_VERSION)
        .add("package", f"{package.name}={package.version}")
        .hexdigest()
    )

    async def build(tmp: Path) -> None:
        await _build_kernel(package, tmp)

    entry = await cached_build(cache_dir, "kernel", key, build)
    release = json.loads((entry.path / "kernel.json").read_text())["release"]
    return KernelBuild(entry.path / "vmlinux", entry.path / "modules", release, package, entry)
