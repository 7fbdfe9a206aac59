"""A Debian machine booted by systemd-nspawn for the systemd units' real test: its rootfs (made by
scripts/setup-nspawn.sh) under an overlay of the test's own, so the cached rootfs is never
written; its own network namespace (--private-network), so every link, netns and nftables table
the platform makes lives and dies with it; /dev/kvm and /dev/net/tun; this checkout read-only at
CHECKOUT; the host's guest-artifact cache under an overlay at the node's cache directory (read,
never written: what the node builds there goes to the overlay's upper layer).

This host runs no systemd of its own (no bus, no machined): the machine is not registered
(--register=no --keep-unit) and is reached by nsenter into its PID 1's namespaces, powered off by
its systemd's own poweroff."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

CHECKOUT = "/opt/aenv/checkout"
NODE_CACHE = "/var/lib/aenv/cache"
MACHINE_PATH = "PATH=/usr/sbin:/usr/bin:/sbin:/bin"
BOOT_TIMEOUT_S = 300
POWEROFF_TIMEOUT_S = 180


@dataclasses.dataclass(frozen=True)
class Machine:
    name: str
    leader: int  # the machine's PID 1 (its systemd), as this host sees it
    pid_namespace: int  # inode of its PID namespace, to find any of its processes left

    def run(self, *argv: str, timeout: float = 300, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """argv inside the machine (every namespace of its PID 1), with a clean environment."""
        settings = [f"{k}={v}" for k, v in (env or {}).items()]
        done = subprocess.run(
            ["nsenter", "--target", str(self.leader), "--all", "env", "-i", MACHINE_PATH,
             "HOME=/root", *settings, *argv],
            capture_output=True, text=True, timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} in {self.name} failed ({done.returncode}):\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def in_network(self, *argv: str, timeout: float, env: dict[str, str]
                   ) -> subprocess.CompletedProcess[str]:
        """A host program in the machine's network namespace only (it reaches the machine's
        loopback as a program inside would)."""
        return subprocess.run(
            ["nsenter", "--target", str(self.leader), "--net", *argv],
            capture_output=True, text=True, timeout=timeout, env=env,
        )

    def path(self, inside: str) -> Path:
        """A path of the machine's filesystem, seen from this host."""
        return Path(f"/proc/{self.leader}/root{inside}")

    def unit_property(self, unit: str, name: str) -> str:
        return self.run("systemctl", "show", "--value", "-p", name, unit).stdout.strip()

    def journal(self, *units: str, lines: int = 60) -> str:
        args = [arg for unit in units for arg in ("-u", unit)]
        return self.run("journalctl", "--no-pager", "-n", str(lines), *args, check=False).stdout


def pid_namespace_of(pid: int) -> int:
    return os.stat(f"/proc/{pid}/ns/pid").st_ino


def processes_in(pid_namespace: int) -> list[int]:
    """This host's processes in that PID namespace."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(proc / "ns" / "pid").st_ino == pid_namespace:
                    found.append(int(proc.name))
    return found


def mounts_under(path: Path) -> list[str]:
    text = Path("/proc/self/mountinfo").read_text()
    return [line for line in text.splitlines() if f" {path}" in line]


def _wait_for_leader(nspawn: subprocess.Popen[bytes], console: Path) -> int:
    """The machine's PID 1 once it runs systemd: nspawn's child after its exec."""
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while time.monotonic() < deadline:
        if nspawn.poll() is not None:
            raise AssertionError(f"systemd-nspawn exited:\n{console.read_text()[-3000:]}")
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{nspawn.pid}/task/{nspawn.pid}/children").read_text().split()
            for child in children:
                if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    return int(child)
        time.sleep(0.2)
    raise AssertionError(f"no systemd in the machine within {BOOT_TIMEOUT_S} s")


def _wait_until_booted(machine: Machine) -> None:
    """Until the machine's systemd has finished its boot ('running', or 'degraded' when some
    unit of Debian's own failed: neither is the platform's business). systemctl cannot connect
    before systemd has made its private socket: asked again until then."""
    deadline = time.monotonic() + BOOT_TIMEOUT_S
    while True:
        done = machine.run("systemctl", "is-system-running", "--wait", check=False,
                           timeout=BOOT_TIMEOUT_S)
        state = done.stdout.strip()
        if state in ("running", "degraded"):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"machine {machine.name}: {state} {done.stderr}")
        time.sleep(0.5)


def _power_off(machine: Machine, nspawn: subprocess.Popen[bytes]) -> None:
    """SIGRTMIN+4 asks the machine's systemd to power off (what `systemctl poweroff` asks, but
    needing no socket of it); if that hangs, SIGKILL to its PID 1 ends its PID namespace."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(machine.leader, signal.SIGRTMIN + 4)
    try:
        nspawn.wait(timeout=POWEROFF_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(machine.leader, signal.SIGKILL)
        nspawn.wait(timeout=60)


@contextlib.contextmanager
def booted(rootfs: Path, workdir: Path, name: str, host_cache: Path | None,
           repo: Path) -> Iterator[Machine]:
    """The machine, booted; powered off and its overlays removed afterwards, also on failure.
    Its console goes to workdir/console.log."""
    upper, work, root = workdir / "upper", workdir / "work", workdir / "root"
    for path in (upper, work, root):
        path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={rootfs},upperdir={upper},workdir={work}", str(root)], check=True)
    try:
        # Mount points the binds below need (nspawn makes none for overlays).
        (root / NODE_CACHE.lstrip("/")).mkdir(parents=True)
        (root / CHECKOUT.lstrip("/")).mkdir(parents=True)
        argv = [
            "systemd-nspawn", "--quiet", "--boot", "--register=no", "--keep-unit",
            f"--machine={name}", f"--directory={root}", "--console=read-only",
            "--private-network", "--capability=all",
            "--bind=/dev/kvm", "--bind=/dev/net/tun",
            f"--bind-ro={repo}:{CHECKOUT}",
            # The node keys the guest kernel by the version apt offers: the host's lists, so
            # the host's cached kernel is found (the machine has no index of its own).
            "--bind-ro=/var/lib/apt/lists",
        ]
        if host_cache is not None:
            (workdir / "cache-upper").mkdir()
            argv.append(f"--overlay={host_cache}:{workdir / 'cache-upper'}:{NODE_CACHE}")
        console = workdir / "console.log"
        with console.open("wb") as out:
            nspawn = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        try:
            leader = _wait_for_leader(nspawn, console)
            machine = Machine(name, leader, pid_namespace_of(leader))
            try:
                _wait_until_booted(machine)
                yield machine
            finally:
                _power_off(machine, nspawn)
        finally:
            if nspawn.poll() is None:
                nspawn.kill()
                nspawn.wait(timeout=60)
    finally:
        subprocess.run(["umount", str(root)], check=False)
