"""Starting and stopping the QEMU child process; every stop reaps it."""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from aenv_common.errors import Internal

logger = logging.getLogger(__name__)

_STDERR_TAIL_BYTES = 2048


async def spawn(
    argv: Sequence[str], stderr_log: Path, pass_fds: Sequence[int] = ()
) -> asyncio.subprocess.Process:
    """Start `argv` with stderr to a file: a pipe would need draining for the VM's whole life.
    `pass_fds` stay open in the child (`argv` must exec, not close them)."""
    with stderr_log.open("wb") as stderr:
        try:
            # Own session: a signal to the agent's process group does not take its VMs down.
            return await asyncio.create_subprocess_exec(
                *argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )
        except OSError as err:
            raise Internal(f"cannot start {argv[0]}: {err}") from err


async def stop(proc: asyncio.subprocess.Process, grace: float) -> None:
    """Wait `grace` seconds for exit, then SIGTERM, then SIGKILL; always reaps."""
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if proc.returncode is not None:
            return
        if sig is not None:
            _signal(proc, sig)
        try:
            await asyncio.wait_for(proc.wait(), timeout=None if sig is signal.SIGKILL else grace)
        except TimeoutError:
            logger.warning("QEMU did not exit in time", extra={"pid": proc.pid, "signal": str(sig)})


def _signal(proc: asyncio.subprocess.Process, sig: signal.Signals) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass  # it exited between the check and the signal; wait() reaps it


def stderr_tail(stderr_log: Path) -> str:
    try:
        with stderr_log.open("rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - _STDERR_TAIL_BYTES))
            return log.read().decode(errors="replace").strip()
    except OSError:
        return ""
