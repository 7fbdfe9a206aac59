"""Throwaway guest payload for VMM tests: Debian's cloud vmlinux (cached) and a busybox
initramfs whose init prints a boot marker and then a counter every 100 ms on the serial console.
The real guest artifacts are built by aenv_nodeagent.artifacts; these only exercise QEMU."""

from __future__ import annotations

import asyncio
import re
import subprocess
import tempfile
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


def cached_vmlinux() -> Path:
    """The uncompressed vmlinux of the current Debian cloud kernel, fetched (not installed) once."""
    package = _kernel_package()
    vmlinux = CACHE_DIR / f"{package}.vmlinux"
    if not vmlinux.is_file():
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE_DIR) as scratch:
            _extract_vmlinux(package, Path(scratch), vmlinux)
    return vmlinux


def _kernel_package() -> str:
    out = subprocess.run(["apt-cache", "depends", KERNEL_METAPACKAGE], check=True,
                         capture_output=True, text=True).stdout
    match = re.search(r"Depends: (linux-image-\S+)", out)
    assert match, f"cannot resolve {KERNEL_METAPACKAGE}: {out}"
    return match.group(1)


def _extract_vmlinux(package: str, scratch: Path, target: Path) -> None:
    subprocess.run(["apt-get", "download", package], cwd=scratch, check=True, capture_output=True)
    deb = next(scratch.glob("*.deb"))
    subprocess.run(["dpkg-deb", "-x", str(deb), str(scratch / "x")], check=True)
    bzimage = next((scratch / "x" / "boot").glob("vmlinuz-*")).read_bytes()
    offset = bzimage.find(LZ4_LEGACY_MAGIC)
    assert offset >= 0, "no LZ4 payload in the bzImage"
    # lz4 exits non-zero on the bzImage's trailing bytes after the frame; the ELF check decides.
    elf = subprocess.run(["lz4", "-dc"], input=bzimage[offset:], capture_output=True).stdout
    assert elf[:4] == b"\x7fELF", "LZ4 payload is not an ELF vmlinux"
    partial = target.with_suffix(".part")
    partial.write_bytes(elf)
    partial.rename(target)


def write_ticker_initramfs(target: Path) -> Path:
    """A newc cpio with busybox, /dev/console and the ticker /init (no root, no mknod needed)."""
    entries: list[tuple[str, int, bytes, int]] = [  # name, mode, data, rdev (major, minor)
        (".", 0o040755, b"", 0),
        ("bin", 0o040755, b"", 0),
        ("bin/busybox", 0o100755, BUSYBOX.read_bytes(), 0),
        ("dev", 0o040755, b"", 0),
        ("dev/console", 0o020600, b"", (5 << 8) | 1),
        ("init", 0o100755, TICKER_INIT.encode(), 0),
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
