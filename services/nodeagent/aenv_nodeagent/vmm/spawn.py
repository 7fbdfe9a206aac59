"""Starting one QEMU: its work directory, the descriptors it inherits (disks, the memory file it
maps copy-on-write, the preload's freeze socket), its jail, then its QMP session. Whatever
fails leaves nothing behind: no process, no cgroup, no held uid, no descriptor."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from qemu.qmp import QMPClient

from aenv_nodeagent.vmm import process, qemu_disks, qmp_connect
from aenv_nodeagent.vmm.argv import VmFiles, build_argv
from aenv_nodeagent.vmm.confined import Confined, VmJail
from aenv_nodeagent.vmm.errors import VmStartError
from aenv_nodeagent.vmm.frozen import FreezeChannel
from aenv_nodeagent.vmm.preload import exec_filter_env, preload_env
from aenv_nodeagent.vmm.spec import VmSpec


@dataclass
class Started:
    proc: asyncio.subprocess.Process
    qmp: QMPClient
    files: VmFiles
    confined: Confined
    freezer: FreezeChannel | None  # the preload library's, when it serves one


async def start(
    spec: VmSpec, workdir: Path, jail: VmJail, *, incoming: bool, argv_prefix: Sequence[str],
    console_log: Path | None, qemu_binary: str, start_timeout: float,
) -> Started:
    """QEMU for `spec` in `workdir`, confined by `jail`, its QMP session up.

    :raise VmStartError: QEMU, its disks or its memory file could not be started or opened.
    :raise AenvError: its confinement could not be made (e.g. ResourceExhausted: no uid left)."""
    files = qmp_connect.prepare_workdir(workdir)
    disk_fds = qemu_disks.open_disks(spec)
    freezer, freeze_socket = FreezeChannel.pair() if spec.copy_on_write_preload else (None, None)
    confined, memory_fd = Confined(), None
    try:
        # Read-only, for QEMU to map copy-on-write (vmm/memfile.c): a jailed QEMU may not open
        # it itself.
        memory_fd = _open_memory(spec.mem_path) if spec.copy_on_write_preload else None
        confined = jail.enter(spec, workdir, console_log)
        argv = jail.argv(spec, confined, files, workdir, console_log, build_argv(
            spec, files, incoming=incoming, console_log=console_log, qemu_binary=qemu_binary,
            disk_fds=disk_fds), argv_prefix)
        inherited = [fd for fds in disk_fds.values() for fd in fds]
        env = {}
        if spec.preload_library and freeze_socket is not None and memory_fd is not None:
            env = preload_env(spec.preload_library, spec.mem_path, freeze_socket,
                              memory_fd=memory_fd)
            inherited += [freeze_socket.fileno(), memory_fd]
        elif spec.preload_library:
            env = exec_filter_env(spec.preload_library)
        proc = await process.spawn(argv, files.stderr_log, inherited, env)
        qmp = await qmp_connect.connect_or_clean_up(proc, files, start_timeout)
    except BaseException:
        if freezer is not None:
            freezer.close()
        jail.leave(confined)  # connect_or_clean_up reaped QEMU
        raise
    finally:
        qemu_disks.close_all(disk_fds)  # QEMU holds its own copies
        if freeze_socket is not None:
            freeze_socket.close()
        if memory_fd is not None:
            os.close(memory_fd)
    return Started(proc, qmp, files, confined, freezer)


def _open_memory(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as err:
        raise VmStartError(f"cannot open the memory file {path}: {err.strerror}") from err
