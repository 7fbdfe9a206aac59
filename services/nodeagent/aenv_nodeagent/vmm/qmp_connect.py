"""Opening and closing the QMP session of a QEMU, one just started or one adopted, and its files."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from pathlib import Path

from qemu.qmp import QMPClient, QMPError

from aenv_common.errors import AenvError, InvalidArgument
from aenv_nodeagent.vmm import process
from aenv_nodeagent.vmm.argv import QMP_CHARDEV_ID, SOCKET_DIR, VmFiles
from aenv_nodeagent.vmm.errors import VmStartError

logger = logging.getLogger(__name__)

_QMP_POLL_S = 0.002


def prepare_workdir(workdir: Path) -> VmFiles:
    files = VmFiles.in_dir(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    remove_files(files)  # stale files of an earlier QEMU in this workdir
    files.qmp_socket.parent.mkdir(parents=True, exist_ok=True)
    return files


def remove_files(files: VmFiles) -> None:
    for path in files.all():
        path.unlink(missing_ok=True)
    if files.qmp_socket.parent.parent == SOCKET_DIR:  # the socket's own directory
        with contextlib.suppress(FileNotFoundError, OSError):
            files.qmp_socket.parent.rmdir()


async def connect_or_clean_up(
    proc: process.VmProcess, files: VmFiles, time_limit: float
) -> QMPClient:
    """Connect QMP; on any failure stop and reap QEMU, remove its files, report its stderr.

    :raise VmStartError: QEMU exited, or did not open its QMP session in time.
    :raise InvalidArgument: the process started is not QEMU (an argv_prefix that forks)."""
    try:
        qmp = await connect(proc, files.qmp_socket, time_limit)
        _check_pidfile(proc.pid, files.pidfile)
        return qmp
    except AenvError as err:
        await process.stop(proc, grace=0.5)
        tail = process.stderr_tail(files.stderr_log)
        remove_files(files)
        kind = type(err) if isinstance(err, InvalidArgument) else VmStartError
        raise kind(
            f"QEMU failed to start (exit status {proc.returncode}): {err.message}; "
            f"QEMU stderr: {tail or '(empty)'}"
        ) from err
    except BaseException:
        await process.stop(proc, grace=0.5)
        remove_files(files)
        raise


async def connect(
    proc: process.VmProcess, socket_path: Path, time_limit: float
) -> QMPClient:
    """QEMU's QMP session, handshake done. :raise VmStartError: not within `time_limit` s."""
    deadline = time.monotonic() + time_limit
    sock = await _wait_for_socket(proc, socket_path, deadline)
    qmp = QMPClient(f"qemu-{proc.pid}")
    try:
        await asyncio.wait_for(qmp.connect(sock), max(0.0, deadline - time.monotonic()))
    except (QMPError, OSError, TimeoutError) as err:
        sock.close()
        await disconnect(qmp)
        raise VmStartError(f"QEMU {proc.pid} did not complete the QMP handshake: {err}") from err
    return qmp


async def disconnect(qmp: QMPClient) -> None:
    try:
        await qmp.disconnect()
    except (QMPError, OSError, EOFError) as err:
        # disconnect re-raises what broke the session (QEMU exiting); nothing is left to close.
        logger.debug("QMP disconnect reported an error", extra={"error": str(err)})


def socket_of(pid: int) -> Path | None:
    """The QMP socket path on QEMU's command line (the `-chardev socket,id=qmp,path=...`)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    except OSError:
        return None
    prefix = f"socket,id={QMP_CHARDEV_ID},path="
    for arg in argv:
        if arg.startswith(prefix):
            return Path(arg[len(prefix):].split(",server=")[0].replace(",,", ","))
    return None


async def _wait_for_socket(
    proc: process.VmProcess, socket_path: Path, deadline: float
) -> socket.socket:
    """Poll until QEMU's QMP socket accepts a connection. A plain socket (not qemu.qmp) polls
    quietly: qemu.qmp logs an error for every refused attempt."""
    while True:
        if proc.returncode is not None:
            raise VmStartError(f"QEMU exited with status {proc.returncode} before opening QMP")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(socket_path))
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
        if time.monotonic() > deadline:
            raise VmStartError(f"QEMU {proc.pid} did not open QMP at {socket_path} in time")
        await asyncio.sleep(_QMP_POLL_S)


def _check_pidfile(pid: int, pidfile: Path) -> None:
    written = pidfile.read_text().strip()
    if written != str(pid):
        raise InvalidArgument(
            f"QEMU runs as pid {written} but the started process is {pid}: argv_prefix must exec"
        )
