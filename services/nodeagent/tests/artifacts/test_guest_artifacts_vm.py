"""Real builds and real boots: the cached artifacts boot Debian's kernel under QEMU microvm
(TCG here), the initramfs mounts root + tools disk, aenv-init starts the envd stand-in from the
tools disk's Python, and it answers GET /health. Plus the Python runtime in a busybox-only
chroot."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aenv_nodeagent.artifacts import GuestArtifacts, kernel_cmdline
from aenv_nodeagent.artifacts.toolsdisk import python_command
from aenv_nodeagent.vmm import detect_accelerator
from aenv_testing.ports import free_port

from .conftest import BuiltArtifacts

pytestmark = pytest.mark.vm

ENVD_PORT = 49983
# QEMU user-mode networking has its own fixed subnet; the initramfs takes the guest address
# from the command line (production uses its defaults, 169.254.0.21/30 via .22).
SLIRP_NET = ("aenv.ip=10.0.2.15/24", "aenv.gw=10.0.2.2")
# per attempt; raise it on a loaded host (TCG guests get little CPU when the cores are busy)
BOOT_TIMEOUT = float(os.environ.get("AENV_TEST_BOOT_TIMEOUT", "60"))
VERBOSE_BOOT = os.environ.get("AENV_TEST_VERBOSE_BOOT") == "1"  # kernel + init trace on serial


@dataclass
class Guest:
    process: asyncio.subprocess.Process
    port: int
    serial_log: Path

    def get(self, path: str) -> tuple[int, bytes]:
        url = f"http://127.0.0.1:{self.port}{path}"
        with urllib.request.urlopen(url, timeout=1) as response:
            return int(response.status), bytes(response.read())


def boot_options() -> tuple[str, ...]:
    """The guest TSC rate, as the node agent passes it under TCG: without it a guest on a loaded
    host fails to calibrate against the PIT and hangs early in boot."""
    khz = detect_accelerator(None).guest_tsc_khz
    return (f"tsc_early_khz={khz}",) if khz else ()


def qemu_argv(artifacts: GuestArtifacts, overlay: Path, port: int, serial: Path) -> list[str]:
    return [
        "qemu-system-x86_64", "-M", "microvm,acpi=on", "-accel", "tcg", "-nodefaults",
        "-no-user-config", "-nographic", "-no-reboot", "-m", "512", "-smp", "1",
        "-kernel", str(artifacts.kernel), "-initrd", str(artifacts.initrd),
        "-append", kernel_cmdline(verbose=VERBOSE_BOOT, extra=(*SLIRP_NET, *boot_options())),
        "-serial", f"file:{serial}",
        "-drive", f"id=root,file={overlay},format=qcow2,if=none",
        "-device", "virtio-blk-device,drive=root",
        "-drive", f"id=tools,file={artifacts.tools_disk},format=raw,if=none,readonly=on",
        "-device", "virtio-blk-device,drive=tools",
        "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{port}-10.0.2.15:{ENVD_PORT}",
        "-device", "virtio-net-device,netdev=n0",
    ]


async def wait_healthy(guest: Guest, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and guest.process.returncode is None:
        with contextlib.suppress(OSError):
            status, _ = await asyncio.to_thread(guest.get, "/health")
            if status == 204:
                return True
        await asyncio.sleep(0.1)
    return False


@contextlib.asynccontextmanager
async def booted_guest(
    artifacts: GuestArtifacts, base: Path, work: Path
) -> AsyncIterator[tuple[Guest, float]]:
    """Boot on a fresh overlay of `base`; retry once (a few TCG cold boots hang silently).
    Yields the guest and its exec-to-health seconds; QEMU is always killed by PID."""
    started: list[asyncio.subprocess.Process] = []
    try:
        for attempt in range(2):
            overlay, serial = work / f"overlay{attempt}.qcow2", work / f"serial{attempt}.log"
            await asyncio.to_thread(subprocess.run, ["qemu-img", "create", "-q", "-f", "qcow2",
                                    "-F", "qcow2", "-b", str(base), str(overlay)], check=True)
            port = free_port()
            t0 = time.monotonic()
            process = await asyncio.create_subprocess_exec(
                *qemu_argv(artifacts, overlay, port, serial),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
            started.append(process)
            guest = Guest(process, port, serial)
            if await wait_healthy(guest, BOOT_TIMEOUT):
                yield guest, time.monotonic() - t0
                return
            process.kill()
            await process.wait()
        tail = serial.read_text(errors="replace")[-2000:]
        raise AssertionError(f"guest never answered /health; serial console tail:\n{tail}")
    finally:
        for process in started:
            if process.returncode is None:
                process.kill()
                await process.wait()


NFS_MODULES = {"nfsv3", "nfs", "lockd", "grace", "nfs_acl", "sunrpc", "fscache", "netfs"}


def test_initramfs_loads_the_nfs_client_after_its_dependencies(
    built_artifacts: BuiltArtifacts,
) -> None:
    """The order computed from the real cloud kernel's modules (each after what it needs)."""
    info = built_artifacts.guest.entries["initramfs"].path / "initramfs.json"
    order = json.loads(info.read_text())["modules"]
    assert NFS_MODULES <= set(order)
    for before, after in (("sunrpc", "lockd"), ("grace", "lockd"), ("netfs", "fscache"),
                          ("fscache", "nfs"), ("lockd", "nfs"), ("nfs", "nfsv3"),
                          ("nfs_acl", "nfsv3"), ("sunrpc", "nfs_acl")):
        assert order.index(before) < order.index(after), (before, after, order)


@pytest.fixture
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="aenv-art-test-") as path:
        yield Path(path)


async def test_guest_boots_to_envd_health(built_artifacts: BuiltArtifacts, workdir: Path) -> None:
    artifacts = built_artifacts.guest.artifacts
    base = built_artifacts.rootfs.image.path
    base_stat = base.stat()
    async with booted_guest(artifacts, base, workdir) as (guest, seconds):
        print(f"\nexec -> envd /health: {seconds:.2f}s (TCG)")
        status, body = await asyncio.to_thread(guest.get, "/env")
        env = json.loads(body)["env"]
        _, body = await asyncio.to_thread(guest.get, "/kernel")
        kernel = json.loads(body)
        console = guest.serial_log.read_text(errors="replace")
    assert status == 200
    # envd gets only what it needs; nothing of the bundled runtime except PYTHONHOME,
    # which envd itself keeps out of its children
    assert "LD_LIBRARY_PATH" not in env and "LD_PRELOAD" not in env
    assert env["PYTHONHOME"] == "/opt/aenv"
    assert set(env) <= {"PATH", "HOME", "LANG", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE",
                        "PYTHONUNBUFFERED", "AENV_TOOLS_DIR", "AENV_ENVD_INIT_MARKER"}
    assert "aenv-init: starting envd" in console
    # Volumes: envd mounts NFSv3 with mount(2); the guest has no modprobe, the initramfs loaded
    # the client (nfsv3 -> nfs, lockd, nfs_acl -> sunrpc, grace, fscache -> netfs).
    assert NFS_MODULES <= set(kernel["modules"]), kernel["modules"]
    assert "nfs" in kernel["filesystems"]
    assert "cannot mount" not in console
    after = base.stat()
    assert (after.st_mtime_ns, after.st_size) == (base_stat.st_mtime_ns, base_stat.st_size)


def test_base_rootfs_has_user_and_packages(built_artifacts: BuiltArtifacts, workdir: Path) -> None:
    image = built_artifacts.rootfs.image
    assert image.path.stat().st_mode & 0o222 == 0, "base image must be read-only"
    raw = workdir / "root.raw"
    subprocess.run(["qemu-img", "convert", "-O", "raw", str(image.path), str(raw)], check=True)

    def cat(path: str) -> str:
        return subprocess.run(["debugfs", "-R", f"cat {path}", str(raw)], capture_output=True,
                              check=True, text=True).stdout

    assert "user:x:1000:1000::/home/user:/bin/bash" in cat("/etc/passwd")
    assert "NOPASSWD" in cat("/etc/sudoers.d/user")
    status = cat("/var/lib/dpkg/status")
    for package in image.packages:
        assert f"Package: {package}\n" in status


@pytest.fixture
def busybox_chroot(built_artifacts: BuiltArtifacts, workdir: Path) -> Iterator[Path]:
    """A root with nothing but static busybox, the tools disk mounted read-only at /opt/aenv."""
    root = workdir / "chroot"
    for sub in ("bin", "opt/aenv", "tmp"):
        (root / sub).mkdir(parents=True)
    subprocess.run(["cp", "/bin/busybox", str(root / "bin/busybox")], check=True)
    os.symlink("busybox", root / "bin/sh")
    tools = built_artifacts.guest.artifacts.tools_disk
    subprocess.run(["mount", "-o", "loop,ro", str(tools), str(root / "opt/aenv")], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", "-d", str(root / "opt/aenv")], check=True)


def test_python_runtime_runs_without_libc_or_python(busybox_chroot: Path) -> None:
    assert not (busybox_chroot / "lib").exists() and not (busybox_chroot / "usr").exists()
    code = ("import sys, ssl, sqlite3, ctypes, lzma, bz2, zlib, json, asyncio, decimal, uuid,"
            " hashlib, http.server, aenv_envd; print(sys.prefix, sys.version_info[:2],"
            " ssl.OPENSSL_VERSION.split()[0])")
    result = subprocess.run(
        [shutil.which("chroot") or "/usr/sbin/chroot", str(busybox_chroot), *python_command(),
         "-c", code],
        env={"PYTHONHOME": "/opt/aenv", "PATH": "/bin"}, capture_output=True, text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["/opt/aenv", "(3,", "11)", "OpenSSL"]
