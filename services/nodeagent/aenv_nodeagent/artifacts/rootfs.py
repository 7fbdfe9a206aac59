"""Template rootfs images: Debian bookworm minbase + E2B's base tools + user `user`, as read-only
qcow2: `base`'s, and `code-interpreter-v1`'s (the same plus Debian's Jupyter Python stack; its
server comes on the tools disk, so changing it rebuilds no rootfs).

mmdebstrap is given the host's own apt source files (never a mirror name), so the build uses
whatever mirror or snapshot this machine is configured for.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aenv_common.errors import Unavailable

from .cache import CacheEntry, CacheKey, cached_build
from .proc import run

_BUILD_VERSION = "1"
SUITE = "bookworm"
# What E2B's `base` (python:3.11 + Node 20 + git, gh, curl, build-essential) gives agent code,
# from Debian's own packages: bookworm ships Python 3.11 and Node.js 18. mmdebstrap installs no
# Recommends, so what those would have pulled in and agents use is listed
# (docs/e2b-compatibility.md, "The base template").
BASE_PACKAGES = (
    "bash", "coreutils", "procps", "iproute2", "ca-certificates", "sudo",
    "python3", "python-is-python3", "python3-pip", "python3-venv", "python3-dev",
    "nodejs", "npm", "git", "gh", "curl", "wget", "build-essential",
    "openssh-client", "less", "netbase", "tzdata", "xz-utils", "unzip",
)
# Translations, man pages and docs (~120 MiB of the tools above): nothing here reads them (no `man`)
# and the locale is C. Kept in the image's dpkg config, so later installs skip them too.
_DPKG_OPTIONS = (
    "path-exclude=/usr/share/locale/*", "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/man/*", "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)
IMAGE_SIZE = "2G"  # sparse: only written blocks use host disk
# A build in the background of a running node (code-interpreter-v1's at a first start) yields the
# CPU to its sandboxes and template captures.
BACKGROUND_NICE = 19
# E2B's code-interpreter template (Jupyter, numpy, pandas, matplotlib, Pillow; R's IRkernel;
# TypeScript), from Debian's packages; its server (services/codeinterp, on the tools disk) runs
# on this Python with these. R is r-base-core, not r-base: r-base's recommended packages (MASS,
# Matrix, survival, ...) would add ~67 MiB. esbuild turns TypeScript cells into JavaScript for
# Node.js, as SWC does on E2B.
CODE_INTERPRETER_PACKAGES = (
    *BASE_PACKAGES, "python3-ipykernel", "python3-jupyter-client", "python3-numpy",
    "python3-pandas", "python3-matplotlib", "python3-pil", "python3-starlette",
    "python3-uvicorn", "esbuild", "r-base-core", "r-cran-irkernel",
)
USER_NAME = "user"
USER_UID = 1000

# Runs inside the chroot after package installation ($1 is the target directory).
_CUSTOMIZE = (
    f'chroot "$1" useradd --create-home --uid {USER_UID} --user-group --shell /bin/bash'
    f" {USER_NAME}",
    f"echo '{USER_NAME} ALL=(ALL) NOPASSWD:ALL' > \"$1/etc/sudoers.d/{USER_NAME}\"",
    f'chmod 0440 "$1/etc/sudoers.d/{USER_NAME}"',
    'echo aenv > "$1/etc/hostname"',
    # Not the build host's resolver (mmdebstrap copies it in): a public one, as E2B guests have.
    # The sandbox's dnsServers setting redirects these queries in its netns.
    'echo "nameserver 8.8.8.8" > "$1/etc/resolv.conf"',
    'printf "127.0.0.1 localhost\\n127.0.1.1 aenv\\n::1 localhost\\n" > "$1/etc/hosts"',
    'mkdir -p "$1/opt/aenv"',
    # E2B's Python is not Debian's, so `pip install x` works there; here PEP 668 would refuse it
    # (externally-managed-environment). Root installs go to /usr/local, `user`'s to ~/.local.
    'printf "[global]\\nbreak-system-packages = true\\n" > "$1/etc/pip.conf"',
)


@dataclass(frozen=True)
class RootfsSpec:
    """What a rootfs is made of."""

    kind: str  # its cache folder
    packages: tuple[str, ...]
    size: str = IMAGE_SIZE


BASE_ROOTFS = RootfsSpec("rootfs-base", BASE_PACKAGES)
CODE_INTERPRETER_ROOTFS = RootfsSpec("rootfs-code-interpreter", CODE_INTERPRETER_PACKAGES, "3G")


@dataclass(frozen=True)
class RootfsImage:
    path: Path
    digest: str
    packages: tuple[str, ...]


@dataclass(frozen=True)
class RootfsBuild:
    image: RootfsImage
    entry: CacheEntry


def host_apt_sources() -> list[Path]:
    """The host's enabled apt source files, in the order apt reads them."""
    sources = [Path(p) for p in ("/etc/apt/sources.list",) if os.path.getsize(p) > 0] if Path(
        "/etc/apt/sources.list").exists() else []
    sources += [Path(p) for p in sorted(glob.glob("/etc/apt/sources.list.d/*.sources"))]
    sources += [Path(p) for p in sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]
    if not sources:
        raise Unavailable("no apt sources configured on this host (/etc/apt/sources.list.d)")
    return sources


async def _debootstrap(target: Path, spec: RootfsSpec, nice: int) -> None:
    customize = [arg for hook in _CUSTOMIZE for arg in ("--customize-hook", hook)]
    dpkg = [f"--dpkgopt={option}" for option in _DPKG_OPTIONS]
    await run([
        "mmdebstrap", "--quiet", "--mode=root", "--variant=minbase", "--format=directory",
        "--include=" + ",".join(spec.packages), *dpkg, *customize, SUITE, target,
        *host_apt_sources(),
    ], nice=nice)
    # apt lists and caches are useless in a template and large
    for junk in ("var/lib/apt/lists", "var/cache/apt"):
        shutil.rmtree(target / junk, ignore_errors=True)


def _builder(spec: RootfsSpec, nice: int) -> Callable[[Path], Awaitable[None]]:
    async def build(tmp: Path) -> None:
        tree, raw, qcow2 = tmp / "tree", tmp / "rootfs.ext4", tmp / "rootfs.qcow2"
        await _debootstrap(tree, spec, nice)
        await run(["mkfs.ext4", "-q", "-F", "-L", "aenv-root", "-d", tree, raw, spec.size],
                  nice=nice)
        await run(["qemu-img", "convert", "-O", "qcow2", raw, qcow2], nice=nice)
        raw.unlink()
        shutil.rmtree(tree)
        qcow2.chmod(0o444)  # a base is shared by every sandbox's overlay: never written
    return build


async def ensure_base_rootfs(cache_dir: Path) -> RootfsImage:
    return (await ensure_rootfs_build(cache_dir, BASE_ROOTFS)).image


async def ensure_base_rootfs_build(cache_dir: Path) -> RootfsBuild:
    return await ensure_rootfs_build(cache_dir, BASE_ROOTFS)


async def ensure_rootfs_build(
    cache_dir: Path, spec: RootfsSpec, *, nice: int = 0
) -> RootfsBuild:
    """The rootfs `spec` describes, built unless the cache has it (its tools at CPU priority
    `nice`: BACKGROUND_NICE for a build a running node does not wait for)."""
    digest = _digest(spec)
    entry = await cached_build(cache_dir, spec.kind, digest, _builder(spec, nice))
    image = RootfsImage(entry.path / "rootfs.qcow2", digest, spec.packages)
    return RootfsBuild(image, entry)


def is_rootfs_cached(cache_dir: Path, spec: RootfsSpec) -> bool:
    """Whether ensure_rootfs_build would return at once (no build)."""
    return (cache_dir / spec.kind / _digest(spec)).is_dir()


def _digest(spec: RootfsSpec) -> str:
    return (
        CacheKey("rootfs")
        .add("build", _BUILD_VERSION)
        .add("suite", SUITE)
        .add("packages", ",".join(spec.packages))
        .add("dpkg", "\n".join(_DPKG_OPTIONS))
        .add("customize", "\n".join(_CUSTOMIZE))
        .add("size", spec.size)
        .hexdigest()
    )
