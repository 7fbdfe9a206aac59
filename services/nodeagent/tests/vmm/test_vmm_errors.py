"""Each failure of the VMM layer raises its kind (vmm/errors.py), told apart without reading
messages: QemuVm over a scripted QMP session and a fake QEMU process, and the start path."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path

import pytest
from qemu.qmp import EventListener, ExecuteError
from qemu.qmp.message import Message
from qemu.qmp.models import ErrorResponse

from aenv_common.errors import Internal
from aenv_nodeagent.vmm import process, qmp_connect
from aenv_nodeagent.vmm.argv import VmFiles
from aenv_nodeagent.vmm.disk_errors import wait_disk_full
from aenv_nodeagent.vmm.errors import (
    CaptureFailed,
    CaptureLostVm,
    DiskJobError,
    MigrationError,
    QmpCommandFailed,
    QmpConnectionLost,
    VmExited,
    VmmError,
    VmStartError,
    capture_error,
)
from aenv_nodeagent.vmm.qemu import QemuVm


def _refusal(command: str, desc: str) -> ExecuteError:
    error = {"error": {"class": "GenericError", "desc": desc}}
    return ExecuteError(ErrorResponse(Message(error)), Message({"execute": command}),
                        Message(error))


def _event(name: str, **data: object) -> dict[str, object]:
    return {"event": name, "data": data}


class _Process:
    """A QEMU process that exits when told to (or signalled)."""

    pid = 4242

    def __init__(self) -> None:
        self.returncode: int | None = None
        self._exited = asyncio.Event()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.exit(-sig)

    def exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()


class _Qmp:
    """QMPClient as QemuVm uses it. A command answers its `replies` entry ({} by default),
    raises its `failures` entry, or runs its `effects` entry (which may emit events to the
    listeners open then)."""

    def __init__(self) -> None:
        self.replies: dict[str, object] = {"query-status": {"status": "running"},
                                           "add-fd": {"fdset-id": 1}}
        self.failures: dict[str, BaseException] = {}
        self.effects: dict[str, Callable[[], Awaitable[None]]] = {}
        self._listeners: list[EventListener] = []

    def emit_after(self, command: str, *events: dict[str, object]) -> None:
        async def emit() -> None:
            for listener in self._listeners:
                for event in events:
                    await listener.put(Message(event))
        self.effects[command] = emit

    def exit_after(self, command: str, proc: _Process, code: int) -> None:
        async def exit() -> None:
            proc.exit(code)
        self.effects[command] = exit

    async def execute(self, command: str, arguments: Mapping[str, object] | None = None) -> object:
        if command in self.failures:
            raise self.failures[command]
        if command in self.effects:
            await self.effects[command]()
        return self.replies.get(command, {})

    def send_fd_scm(self, fd: int) -> None:
        pass

    @contextlib.contextmanager
    def listener(self, names: str | tuple[str, ...]) -> Iterator[EventListener]:
        listener = EventListener(names)
        self._listeners.append(listener)
        try:
            yield listener
        finally:
            self._listeners.remove(listener)

    async def disconnect(self) -> None:
        pass


Vm = tuple[QemuVm, _Qmp, _Process]


def _vm(tmp_path: Path, *, incoming: bool = False) -> Vm:
    qmp, proc = _Qmp(), _Process()
    vm = QemuVm(proc, qmp, VmFiles.in_dir(tmp_path), incoming=incoming)  # type: ignore[arg-type]
    return vm, qmp, proc


async def test_a_refused_command_and_a_broken_session_are_told_apart(tmp_path: Path) -> None:
    vm, qmp, _ = _vm(tmp_path)
    qmp.failures["cont"] = _refusal("cont", "Resetting the Virtual Machine is required")
    qmp.failures["stop"] = ConnectionResetError("peer closed")

    with pytest.raises(QmpCommandFailed, match="Resetting") as refused:
        await vm.resume()
    assert (refused.value.command, refused.value.error_class) == ("cont", "GenericError")
    with pytest.raises(QmpConnectionLost, match="lost QEMU"):
        await vm.pause()


async def test_a_reply_of_the_wrong_shape_is_a_failed_command(tmp_path: Path) -> None:
    vm, qmp, _ = _vm(tmp_path)
    qmp.replies["query-status"] = {"running": True}
    with pytest.raises(QmpCommandFailed, match="unexpected query-status reply"):
        await vm.status()


async def test_a_failed_migration_is_a_recoverable_capture(tmp_path: Path) -> None:
    vm, qmp, _ = _vm(tmp_path)
    qmp.emit_after("migrate", _event("MIGRATION", status="failed"))
    qmp.replies["query-migrate"] = {"error-desc": "No space left on device"}

    with pytest.raises(CaptureFailed, match="No space left") as failed:
        await vm.capture(tmp_path / "state")
    assert isinstance(failed.value.__cause__, MigrationError)
    assert not (tmp_path / "state").exists()  # the partial state is removed


async def test_a_refused_stop_is_a_recoverable_capture(tmp_path: Path) -> None:
    vm, qmp, _ = _vm(tmp_path)
    qmp.failures["stop"] = _refusal("stop", "not now")
    with pytest.raises(CaptureFailed):
        await vm.capture(tmp_path / "state")


async def test_a_session_lost_mid_capture_is_terminal(tmp_path: Path) -> None:
    vm, qmp, _ = _vm(tmp_path)
    qmp.failures["migrate"] = ConnectionResetError("peer closed")
    with pytest.raises(CaptureLostVm, match="lost QEMU"):
        await vm.capture(tmp_path / "state")


async def test_qemu_exiting_mid_capture_is_terminal(tmp_path: Path) -> None:
    vm, qmp, proc = _vm(tmp_path)
    qmp.exit_after("migrate", proc, -signal.SIGKILL)
    with pytest.raises(CaptureLostVm, match="exited during migrate"):
        await vm.capture(tmp_path / "state")


async def test_device_state_saving_fails_by_kind(tmp_path: Path) -> None:
    vm, qmp, _ = _vm(tmp_path)
    qmp.replies["query-status"] = {"status": "paused"}
    qmp.failures["xen-save-devices-state"] = _refusal("xen-save-devices-state", "EIO")
    with pytest.raises(CaptureFailed, match="EIO"):
        await vm.save_device_state(tmp_path / "devices")
    assert not (tmp_path / "devices").exists()

    qmp.failures["add-fd"] = ConnectionResetError("peer closed")
    with pytest.raises(CaptureLostVm):
        await vm.save_device_state(tmp_path / "devices")


async def test_a_vm_launched_without_the_freezer_cannot_be_frozen(tmp_path: Path) -> None:
    vm, _, _ = _vm(tmp_path)
    with pytest.raises(CaptureFailed, match="cannot be frozen"):
        await vm.freeze()


async def test_a_refused_incoming_migration_is_a_migration_error(tmp_path: Path) -> None:
    (tmp_path / "state").write_bytes(b"state")
    vm, qmp, _ = _vm(tmp_path, incoming=True)
    qmp.emit_after("migrate-incoming", _event("MIGRATION", status="failed"))
    qmp.replies["query-migrate"] = {"error-desc": "load of migration failed"}
    with pytest.raises(MigrationError, match="migrate-incoming failed: load of migration"):
        await vm.restore(tmp_path / "state")


async def test_qemu_exiting_during_a_restore_is_vm_exited(tmp_path: Path) -> None:
    (tmp_path / "state").write_bytes(b"state")
    vm, qmp, proc = _vm(tmp_path, incoming=True)
    qmp.exit_after("migrate-incoming", proc, 1)
    with pytest.raises(VmExited, match=r"exited during migrate-incoming \(status 1\)"):
        await vm.restore(tmp_path / "state")


async def test_a_failed_block_stream_is_a_disk_job_error(tmp_path: Path) -> None:
    vm, qmp, _ = _vm(tmp_path)
    qmp.emit_after("block-stream", _event("BLOCK_JOB_COMPLETED", device="stream-node-root",
                                          error="Input/output error"))
    with pytest.raises(DiskJobError, match="Input/output error"):
        await vm.stream_disk("node-root", tmp_path / "base.qcow2")


async def test_an_ended_event_stream_is_a_lost_session(tmp_path: Path) -> None:
    class _Ended(_Qmp):
        @contextlib.contextmanager
        def listener(self, names: str | tuple[str, ...]) -> Iterator[EventListener]:
            yield _NoEvents(names)

    class _NoEvents(EventListener):
        def __aiter__(self) -> _NoEvents:
            return self

        async def __anext__(self) -> Message:
            raise StopAsyncIteration

    qmp, proc = _Ended(), _Process()
    vm = QemuVm(proc, qmp, VmFiles.in_dir(tmp_path), incoming=False)  # type: ignore[arg-type]
    with pytest.raises(QmpConnectionLost, match="event stream ended"):
        await wait_disk_full(vm)


async def test_a_binary_that_cannot_run_is_a_start_error(tmp_path: Path) -> None:
    with pytest.raises(VmStartError, match="cannot start"):
        await process.spawn([str(tmp_path / "no-such-qemu")], tmp_path / "stderr")


async def test_qemu_exiting_before_qmp_is_a_start_error(tmp_path: Path) -> None:
    proc = _Process()
    proc.exit(1)
    with pytest.raises(VmStartError, match="before opening QMP"):
        await qmp_connect.connect(proc, tmp_path / "qmp.sock", 1.0)


async def test_qmp_never_opening_is_a_start_error(tmp_path: Path) -> None:
    with pytest.raises(VmStartError, match="did not open QMP"):
        await qmp_connect.connect(_Process(), tmp_path / "qmp.sock", 0.01)


@pytest.mark.parametrize(("met", "kind"), [
    (QmpConnectionLost("x"), CaptureLostVm),
    (VmExited("x"), CaptureLostVm),
    (QmpCommandFailed("x", "stop"), CaptureFailed),
    (MigrationError("x"), CaptureFailed),
    (VmmError("x"), CaptureFailed),
])
def test_a_capture_is_lost_only_with_its_vm(met: VmmError, kind: type[Exception]) -> None:
    assert type(capture_error(met)) is kind
    assert capture_error(met).message == "x"


def test_every_kind_is_still_internal() -> None:
    for kind in (VmStartError, QmpCommandFailed, QmpConnectionLost, VmExited, MigrationError,
                 DiskJobError, CaptureFailed, CaptureLostVm):
        assert issubclass(kind, Internal)
