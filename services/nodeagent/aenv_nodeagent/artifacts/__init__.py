"""Guest artifacts the node agent builds from Debian packages and caches by input hash.

- kernel: PVH vmlinux of Debian's cloud kernel (kernel.py)
- initramfs: busybox + virtio modules, mounts root and tools disks (initramfs.py)
- tools disk: read-only ext4 at /opt/aenv with Python, envd, busybox, tini, aenv-init (toolsdisk.py)
- base rootfs: Debian bookworm minbase + the tools of E2B's base, as read-only qcow2 (rootfs.py)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .cache import CacheEntry, CacheKey
from .initramfs import InitramfsBuild, ensure_initramfs, kernel_cmdline
from .kernel import KernelBuild, ensure_kernel
from .rootfs import RootfsImage, ensure_base_rootfs
from .toolsdisk import ensure_tools_disk

__all__ = [
    "GuestArtifacts",
    "GuestArtifactsBuild",
    "RootfsImage",
    "build_guest_artifacts",
    "ensure_base_rootfs",
    "ensure_guest_artifacts",
    "kernel_cmdline",
]


@dataclass(frozen=True)
class GuestArtifacts:
    kernel: Path
    initrd: Path
    tools_disk: Path
    kernel_version: str
    cmdline: str
    digest: str  # identifies the exact kernel + initrd + tools disk; snapshots record it


@dataclass(frozen=True)
class GuestArtifactsBuild:
    artifacts: GuestArtifacts
    entries: dict[str, CacheEntry]  # artifact kind -> cache entry (built or reused, build time)


async def ensure_guest_artifacts(
    cache_dir: Path, envd_packages: Sequence[Path], verbose_boot: bool = False
) -> GuestArtifacts:
    """Kernel, initramfs and tools disk for guests, each built only if its inputs changed."""
    return (await build_guest_artifacts(cache_dir, envd_packages, verbose_boot)).artifacts


async def build_guest_artifacts(
    cache_dir: Path, envd_packages: Sequence[Path], verbose_boot: bool = False
) -> GuestArtifactsBuild:
    # kernel -> initramfs and the tools disk are independent chains: build them concurrently
    (kernel, initrd), tools = await asyncio.gather(
        _kernel_and_initramfs(cache_dir), ensure_tools_disk(cache_dir, envd_packages)
    )
    # Cache keys are hashes of every input, so hashing the keys identifies the outputs without
    # re-reading ~200 MB of images.
    # The command line too: a snapshot's kernel keeps what it booted with (its console's level).
    cmdline = kernel_cmdline(verbose=verbose_boot)
    digest = (
        CacheKey("guest-artifacts")
        .add("kernel", kernel.entry.path.name)
        .add("initramfs", initrd.entry.path.name)
        .add("toolsdisk", tools.entry.path.name)
        .add("cmdline", cmdline)
        .hexdigest()
    )
    artifacts = GuestArtifacts(
        kernel=kernel.vmlinux,
        initrd=initrd.path,
        tools_disk=tools.path,
        kernel_version=kernel.release,
        cmdline=cmdline,
        digest=digest,
    )
    entries = {"kernel": kernel.entry, "initramfs": initrd.entry, "toolsdisk": tools.entry}
    return GuestArtifactsBuild(artifacts, entries)


async def _kernel_and_initramfs(cache_dir: Path) -> tuple[KernelBuild, InitramfsBuild]:
    kernel = await ensure_kernel(cache_dir)
    return kernel, await ensure_initramfs(cache_dir, kernel)
