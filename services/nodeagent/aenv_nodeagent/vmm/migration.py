"""QEMU migrations through files: the device state a capture saves and a restore loads, each
through a descriptor the node agent opens and passes over QMP (QEMU 7.2 has no file: URI)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Protocol, TypeVar

from qemu.qmp import EventListener

from aenv_common.errors import DeadlineExceeded, NotFound
from aenv_nodeagent.vmm.disk_errors import QmpEvents
from aenv_nodeagent.vmm.errors import MigrationError, VmmError

T = TypeVar("T")

_FINAL_MIGRATION_STATES = frozenset({"completed", "failed", "cancelled"})
_TRANSIENT_MIGRATION_RUNSTATES = frozenset({"finish-migrate", "inmigrate"})
_RUNSTATE_POLL_S = 0.001
_RUNSTATE_POLLS = 5000  # >= 5 s: the transition takes microseconds to a few ms
_STATE_FD_NAME = "aenv-state"
# QEMU throttles migrations to 128 MiB/s by default, sized for links shared with guests. A capture
# goes to a local file while the VM is stopped, so the throttle would only lengthen the stop.
UNTHROTTLED_BYTES_PER_S = 1 << 40


class Migrating(QmpEvents, Protocol):
    """What a migration needs of its QEMU (QemuVm has it): its commands and events, and more."""

    async def pass_fd(self, fd: int, name: str) -> None: ...

    async def unless_exited(self, awaitable: Awaitable[T], time_limit: float, *,
                            what: str) -> T: ...

    async def failure_reason(self) -> str: ...


def migration_capabilities(ignore_shared: bool) -> list[dict[str, object]]:
    # x-ignore-shared: device state only (share=on RAM stays in its file); `events` makes QEMU
    # emit MIGRATION events.
    return [{"capability": "x-ignore-shared", "state": ignore_shared},
            {"capability": "events", "state": True}]


async def via_file(vm: Migrating, command: str, fd: int, time_limit: float) -> None:
    """Run `command` (migrate, migrate-incoming) through the state file open as `fd` (closed
    here). Unlike `exec:cat`, no shell is forked and write errors (ENOSPC...) fail it.

    :raise MigrationError: it ended failed or cancelled (the reason is QEMU's).
    :raise VmExited: QEMU exited during it.
    :raise QmpError: a command failed, or the session broke.
    :raise DeadlineExceeded: it did not end within `time_limit` s (an outgoing one is
        cancelled)."""
    try:
        await vm.pass_fd(fd, _STATE_FD_NAME)
    finally:
        os.close(fd)  # QEMU holds its own copy now
    await _migrate(vm, command, f"fd:{_STATE_FD_NAME}", time_limit)


async def _migrate(vm: Migrating, command: str, uri: str, time_limit: float) -> None:
    with vm.listener("MIGRATION") as listener:
        await vm.execute(command, {"uri": uri})
        try:
            status = await vm.unless_exited(_final_migration_status(listener), time_limit,
                                            what=command)
        except DeadlineExceeded:
            if command == "migrate":
                await vm.execute("migrate_cancel")
            raise
    if status != "completed":
        raise MigrationError(f"{command} {status}: {await vm.failure_reason()}")
    await _wait_runstate_settled(vm, what=command)


async def _wait_runstate_settled(vm: Migrating, *, what: str) -> str:
    """The MIGRATION `completed` event comes before QEMU leaves its transient run state
    (finish-migrate on the source, inmigrate on the destination): wait until it has."""
    for _ in range(_RUNSTATE_POLLS):
        status = await vm.status()
        if status not in _TRANSIENT_MIGRATION_RUNSTATES:
            return status
        await asyncio.sleep(_RUNSTATE_POLL_S)
    raise DeadlineExceeded(f"QEMU {vm.pid} stayed in {status} after {what} completed")


async def _final_migration_status(listener: EventListener) -> str:
    while True:
        event = await listener.get()
        data = event.get("data")
        status = str(data.get("status", "")) if isinstance(data, dict) else ""
        if status in _FINAL_MIGRATION_STATES:
            return status


def open_state_file(state_path: Path, flags: int) -> int:
    """:raise NotFound: the path (or its directory) does not exist. :raise VmmError:"""
    # Opened before QEMU is asked, synchronously (one open() is too short to be worth a thread
    # hop): a failed incoming migration makes QEMU exit, losing a warm-pool VM.
    try:
        return os.open(state_path, flags | os.O_CLOEXEC, 0o600)
    except FileNotFoundError as err:
        raise NotFound(f"device state path {state_path} does not exist") from err
    except OSError as err:
        raise VmmError(f"cannot open device state file {state_path}: {err}") from err


def discard_partial_state(state_path: Path) -> None:
    # Never leave a partial state behind; but only regular files (not e.g. a device) are ours.
    if state_path.is_file():
        state_path.unlink()
