"""Telling a full host disk from QEMU's words (vmm/disk_errors.py): its BLOCK_IO_ERROR event,
or, once the event is gone, its run state and the device's io-status."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping

from qemu.qmp import EventListener
from qemu.qmp.message import Message

from aenv_nodeagent.vmm.disk_errors import nospace_disk, nospace_event, wait_disk_full

FULL = {"event": "BLOCK_IO_ERROR", "data": {
    "device": "", "node-name": "node-root", "operation": "write", "action": "stop",
    "nospace": True, "reason": "No space left on device"}}
EIO = {"event": "BLOCK_IO_ERROR", "data": {
    "device": "", "node-name": "node-root", "operation": "read", "action": "report",
    "nospace": False, "reason": "Input/output error"}}


def test_only_a_write_without_room_is_a_full_disk() -> None:
    assert nospace_event(FULL) == "node-root"
    assert nospace_event(EIO) is None
    assert nospace_event({"event": "BLOCK_IO_ERROR"}) is None


def test_the_stopped_device_is_found_in_query_block() -> None:
    reply = [{"qdev": "tools", "io-status": "ok"}, {"qdev": "root", "io-status": "nospace"}]
    assert nospace_disk(reply) == "root"
    assert nospace_disk([{"qdev": "root", "io-status": "failed"}]) is None
    assert nospace_disk({"unexpected": True}) is None


class _Qemu:
    """QMP as wait_disk_full uses it: a run state, query-block, and one listener's events."""

    def __init__(self, status: str, block: object) -> None:
        self.pid = 1
        self._status, self._block = status, block
        self.events = EventListener("BLOCK_IO_ERROR")

    async def execute(self, command: str, arguments: Mapping[str, object] | None = None) -> object:
        assert command == "query-block"
        return self._block

    async def status(self) -> str:
        return self._status

    @contextlib.contextmanager
    def listener(self, events: str) -> Iterator[EventListener]:
        yield self.events


async def test_a_disk_that_filled_before_the_wait_is_found_at_once() -> None:
    qemu = _Qemu("io-error", [{"qdev": "root", "io-status": "nospace"}])
    assert await asyncio.wait_for(wait_disk_full(qemu), 1) == "root"


async def test_a_running_guest_is_waited_for_until_its_disk_fills() -> None:
    qemu = _Qemu("running", [])
    waiting = asyncio.ensure_future(wait_disk_full(qemu))
    await qemu.events.put(Message(EIO))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    await qemu.events.put(Message(FULL))
    assert await asyncio.wait_for(waiting, 1) == "node-root"
