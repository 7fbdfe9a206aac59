"""Guest initramfs: busybox-static, the virtio and NFS modules in dependency order, and /init.

Written as a cpio "newc" archive directly from Python (no cpio tool needed, byte-for-byte
reproducible: fixed mtimes and inode numbers).
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from aenv_common.errors import Internal

from .cache import CacheEntry, CacheKey, cached_build
from .kernel import KernelBuild
from .proc import require_tool

_BUILD_VERSION = "1"

# Drivers the guest needs; their dependencies are added automatically. Built-in ones (listed in
# modules.builtin, e.g. ext4 in the cloud kernel) are skipped; optional ones may be absent.
# nfsv3 (with nfs, sunrpc, lockd, grace, nfs_acl, fscache, netfs) lets envd mount volumes with
# mount(2): the guest's root filesystem has no module tree and no modprobe, so the kernel's own
# request_module("nfsv3") at mount time would find nothing; loaded here, every template can mount.
REQUIRED_MODULES = ("virtio_mmio", "virtio_blk", "virtio_net", "virtio_balloon",
                    "virtio_console", "ext4", "nfsv3")
OPTIONAL_MODULES = ("virtio_rng",)

# Applets /init uses; linked at build time so the guest never runs `busybox --install`.
_APPLETS = ("sh", "mount", "umount", "insmod", "mkdir", "cat", "usleep", "ip", "hostname",
            "switch_root", "poweroff", "echo", "ls")

# Uncompressed: under TCG the kernel's gunzip of a ~2.5 MB archive costs more than reading it.
COMPRESS = False

BASE_CMDLINE = (
    "console=ttyS0", "reboot=t", "panic=-1",
    # Trust the TSC: under TCG the clocksource watchdog compares it with jiffies, which lag on
    # a loaded host, marks it unstable and falls back to jiffies, and a jiffies clocksource
    # keeps the 250 Hz tick running in an idle guest (no NO_HZ), each tick emulated on the
    # host's CPU. A guest's TSC is the host's (TCG, KVM with a constant TSC), stopped with the
    # VM and restored with its device state.
    "tsc=reliable",
    # microvm has no i8042 keyboard controller: skip probing it
    "i8042.noaux", "i8042.nomux", "i8042.nopnp", "i8042.dumbkbd",
)


def kernel_cmdline(verbose: bool = False, extra: Sequence[str] = ()) -> str:
    """Kernel command line for the aenv initramfs; `extra` may carry aenv.* overrides."""
    # Quiet: errors and worse only (levels 0-3), which keeps the OOM killer's one-line
    # "Out of memory: Killed process …" (KERN_ERR) on the console for the death classifier.
    level = ("loglevel=7", "aenv.debug=1") if verbose else ("quiet", "loglevel=4")
    return " ".join((*BASE_CMDLINE, *level, *extra))


@dataclass(frozen=True)
class InitramfsBuild:
    path: Path
    modules: tuple[str, ...]
    entry: CacheEntry


def module_index(modules_dir: Path) -> dict[str, Path]:
    """Module name (dashes folded to underscores) -> .ko path."""
    return {ko.name.removesuffix(".ko").replace("-", "_"): ko
            for ko in modules_dir.rglob("*.ko")}


def builtin_modules(modules_dir: Path) -> set[str]:
    builtin = modules_dir / "modules.builtin"
    lines = builtin.read_text().split() if builtin.exists() else []
    return {Path(line).name.removesuffix(".ko").replace("-", "_") for line in lines}


def module_depends(ko: Path) -> list[str]:
    """The `depends=` list from a module's .modinfo section."""
    match = re.search(rb"\0depends=([^\0]*)\0", ko.read_bytes())
    deps = match.group(1).decode() if match else ""
    return [d.replace("-", "_") for d in deps.split(",") if d]


def load_order(modules_dir: Path) -> list[str]:
    """Required + present optional modules, each after its dependencies (post-order DFS)."""
    index, builtin = module_index(modules_dir), builtin_modules(modules_dir)
    order: list[str] = []

    def visit(name: str, trail: tuple[str, ...]) -> None:
        if name in order or name in builtin:
            return
        if name in trail:
            raise Internal(f"module dependency cycle: {' -> '.join((*trail, name))}")
        if name not in index:
            raise Internal(f"kernel module {name} is neither built in nor in {modules_dir}")
        for dep in module_depends(index[name]):
            visit(dep, (*trail, name))
        order.append(name)

    for name in (*REQUIRED_MODULES, *(m for m in OPTIONAL_MODULES if m in index)):
        visit(name, ())
    return order


def render_init(modules: Sequence[str]) -> str:
    template = resources.files(__package__).joinpath("guest/init.sh").read_text()
    return template.replace("@MODULES@", " ".join(modules))


class CpioWriter:
    """Minimal cpio newc archive writer (the format the kernel unpacks)."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._ino = 1

    def _entry(self, name: str, mode: int, data: bytes = b"") -> None:
        encoded = name.encode() + b"\0"
        fields = (self._ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(encoded), 0)
        header = b"070701" + b"".join(f"{f:08X}".encode() for f in fields)
        self._ino += 1
        self._parts += [header, encoded, _pad(len(header) + len(encoded)), data, _pad(len(data))]

    def directory(self, name: str) -> None:
        self._entry(name, 0o040755)

    def file(self, name: str, data: bytes, executable: bool = False) -> None:
        self._entry(name, 0o100755 if executable else 0o100644, data)

    def symlink(self, name: str, target: str) -> None:
        self._entry(name, 0o120777, target.encode())

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return b"".join(self._parts)


def _pad(length: int) -> bytes:
    return b"\0" * (-length % 4)


def build_archive(busybox: bytes, init: str, modules: Iterable[tuple[str, bytes]]) -> bytes:
    cpio = CpioWriter()
    for directory in ("bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules"):
        cpio.directory(directory)
    cpio.file("bin/busybox", busybox, executable=True)
    for applet in _APPLETS:
        cpio.symlink(f"bin/{applet}", "busybox")
    for name, data in modules:
        cpio.file(f"lib/modules/{name}.ko", data)
    cpio.file("init", init.encode(), executable=True)
    return cpio.finish()


def static_busybox() -> Path:
    return Path(require_tool("busybox")).resolve()


async def ensure_initramfs(cache_dir: Path, kernel: KernelBuild) -> InitramfsBuild:
    busybox = static_busybox()
    modules = load_order(kernel.modules_dir)
    init = render_init(modules)
    key = (
        CacheKey("initramfs")
        .add("build", _BUILD_VERSION)
        .add("kernel", kernel.entry.path.name)
        .add("busybox", busybox.read_bytes())
        # Also inside `init`, named for clarity: another module list is another initramfs, so
        # another artifacts digest, and every template snapshot (keyed on it) is captured anew.
        .add("modules", " ".join(modules))
        .add("init", init)
        .add("compress", str(COMPRESS))
        .hexdigest()
    )

    async def build(tmp: Path) -> None:
        index = module_index(kernel.modules_dir)
        archive = build_archive(
            busybox.read_bytes(), init, ((m, index[m].read_bytes()) for m in modules)
        )
        (tmp / "initrd.img").write_bytes(gzip.compress(archive, mtime=0) if COMPRESS else archive)
        (tmp / "initramfs.json").write_text(json.dumps({"modules": modules}))

    entry = await cached_build(cache_dir, "initramfs", key, build)
    return InitramfsBuild(entry.path / "initrd.img", tuple(modules), entry)
