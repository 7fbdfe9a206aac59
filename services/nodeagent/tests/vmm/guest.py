"""Throwaway guest payloads for VMM tests: Debian's cloud vmlinux (cached) and busybox
initramfses whose init prints a boot marker and then a counter every 100 ms on the console.
The real guest artifacts are built by aenv_nodeagent.artifacts; these only exercise QEMU."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

CACHE_DIR = Path("/tmp/aenv-test-cache")
KERNEL_METAPACKAGE = "linux-image-cloud-amd64"
LZ4_LEGACY_MAGIC = b"\x02\x21\x4c\x18"
BUSYBOX = Path("/bin/busybox")
BOOT_MARKER = "AENV-BOOTED"
TICKER_INIT = f"""#!/bin/busybox sh
echo {BOOT_MARKER}
i=0
while true; do echo "tick $i"; i=$((i+1)); /bin/busybox usleep 100000; done
"""
_TICK = re.compile(r"^tick (\d+)\s*$", re.MULTILINE)


# Loaded in this order (virtio_ring before virtio): enough for the balloon on virtio-mmio.
BALLOON_MODULES = ("virtio_ring", "virtio", "virtio_mmio", "virtio_balloon")


@dataclass(frozen=True)
class GuestKernel:
    vmlinux: Path
    modules: dict[str, Path]  # BALLOON_MODULES by name


def cached_kernel() -> GuestKernel:
    """The uncompressed vmlinux of the current Debian cloud kernel and its balloon modules,
    fetched (never installed) once into CACHE_DIR."""
    package = _kernel_package()
    target = CACHE_DIR / package
    if not (target / "vmlinux").is_file():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
            _extract_kernel(package, Path(scratch), target)
    return GuestKernel(target / "vmlinux",
                       {name: target / f"{name}.ko" for name in BALLOON_MODULES})


def _kernel_package() -> str:
    out = subprocess.run(["apt-cache", "depends", KERNEL_METAPACKAGE], check=True,
                         capture_output=True, text=True).stdout
    match = re.search(r"Depends: (linux-image-\S+)", out)
    assert match, f"cannot resolve {KERNEL_METAPACKAGE}: {out}"
    return match.group(1)


def _extract_kernel(package: str, scratch: Path, target: Path) -> None:
    subprocess.run(["apt-get", "download", package], cwd=scratch, check=True, capture_output=True)
    deb = next(scratch.glob("*.deb"))
    tree = scratch / "x"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    staged = scratch / "staged"
    staged.mkdir()
    for name in BALLOON_MODULES:
        shutil.copyfile(next(tree.glob(f"lib/modules/*/kernel/drivers/virtio/{name}.ko")),
                        staged / f"{name}.ko")
    bzimage = next((tree / "boot").glob("vmlinuz-*")).read_bytes()
    offset = bzimage.find(LZ4_LEGACY_MAGIC)
    assert offset >= 0, "no LZ4 payload in the bzImage"
    # lz4 exits non-zero on the bzImage's trailing bytes after the frame; the ELF check decides.
    elf = subprocess.run(["lz4", "-dc"], input=bzimage[offset:], capture_output=True).stdout
    assert elf[:4] == b"\x7fELF", "LZ4 payload is not an ELF vmlinux"
    (staged / "vmlinux").write_bytes(elf)
    staged.rename(target)  # atomic: a half-extracted kernel is never seen as cached


def write_ticker_initramfs(target: Path) -> Path:
    """A newc cpio with busybox, /dev/console and the ticker /init (no root, no mknod needed)."""
    return write_initramfs(target, TICKER_INIT, {})


def write_memory_churner_initramfs(
    target: Path, kernel: GuestKernel, free_at_tick: int, fill_at_tick: int | None = None
) -> Path:
    """A guest with the balloon driver that fills 64 MiB of ramfs (at boot, or at tick
    `fill_at_tick`, printing FILLED), ticks, and frees that memory at tick `free_at_tick`
    (printing FREED)."""
    loads = "\n".join(f"/bin/busybox insmod /lib/{name}.ko" for name in BALLOON_MODULES)
    fill = ("/bin/busybox dd if=/dev/urandom of=/fill/data bs=1M count=64 2>/dev/null "
            "&& echo FILLED")
    init = f"""#!/bin/busybox sh
/bin/busybox mount -t devtmpfs dev /dev
{loads}
/bin/busybox mkdir /fill
{fill if fill_at_tick is None else ""}
echo {BOOT_MARKER}
i=0
while true; do
  echo "tick $i"; i=$((i+1))
  [ $i = {fill_at_tick} ] && {fill}
  [ $i = {free_at_tick} ] && /bin/busybox rm /fill/data && echo FREED
  /bin/busybox usleep 100000
done
"""
    files = {f"lib/{name}.ko": path.read_bytes() for name, path in kernel.modules.items()}
    return write_initramfs(target, init, files)


def write_initramfs(target: Path, init: str, files: dict[str, bytes]) -> Path:
    """A newc cpio: busybox, /dev/console, `init` as /init, and `files` (only under lib/)."""
    entries: list[tuple[str, int, bytes, int]] = [  # name, mode, data, rdev (major, minor)
        (".", 0o040755, b"", 0),
        ("bin", 0o040755, b"", 0),
        ("bin/busybox", 0o100755, BUSYBOX.read_bytes(), 0),
        ("dev", 0o040755, b"", 0),
        ("dev/console", 0o020600, b"", (5 << 8) | 1),
        ("init", 0o100755, init.encode(), 0),
        ("lib", 0o040755, b"", 0),
        *((name, 0o100644, data, 0) for name, data in files.items()),
    ]
    with target.open("wb") as out:
        for ino, (name, mode, data, rdev) in enumerate(entries, start=1):
            _write_newc(out, ino, name, mode, data, rdev)
        _write_newc(out, 0, "TRAILER!!!", 0, b"", 0)
    return target


def _write_newc(out: BinaryIO, ino: int, name: str, mode: int, data: bytes, rdev: int) -> None:
    encoded = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev >> 8, rdev & 0xFF, len(encoded), 0]
    header = b"070701" + b"".join(f"{field:08x}".encode() for field in fields)
    out.write(header + encoded + _pad(len(header) + len(encoded)))
    out.write(data + _pad(len(data)))


def _pad(length: int) -> bytes:
    return b"\0" * (-length % 4)


def ticks(console_log: Path) -> list[int]:
    try:
        text = console_log.read_text(errors="replace")
    except FileNotFoundError:
        return []
    return [int(n) for n in _TICK.findall(text)]


async def wait_for_tick(console_log: Path, at_least: int, time_limit: float) -> list[int]:
    """Poll the console until the counter reaches `at_least`; returns every tick seen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + time_limit
    while loop.time() < deadline:
        seen = ticks(console_log)
        if seen and seen[-1] >= at_least:
            return seen
        await asyncio.sleep(0.05)
    raise AssertionError(f"guest counter did not reach {at_least} in {time_limit}s; "
                         f"console tail: {console_tail(console_log)!r}")


def console_tail(console_log: Path) -> str:
    return console_log.read_text(errors="replace")[-500:] if console_log.exists() else ""


def qemu_img_create(
    path: Path, fmt: str, *, size: str = "16M", backing: tuple[Path, str] | None = None
) -> Path:
    """A disk image; with `backing` (path, format) an overlay on it."""
    argv = ["qemu-img", "create", "-q", "-f", fmt]
    if backing is not None:
        argv += ["-b", str(backing[0]), "-F", backing[1]]
    subprocess.run([*argv, str(path), *([] if backing else [size])], check=True)
    return path
