"""The capture ledger: what a VM's RAM equals outside its dirty log, kept as links in the
sandbox's directory so that the snapshot it came from may go."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

from aenv_nodeagent.memory.capture import CaptureLedger
from aenv_nodeagent.memory.images import (
    CAPTURED,
    CAPTURED_STATE,
    DEVICE_STATE,
    MEMORY,
    MemoryImage,
)
from aenv_nodeagent.vmm.driver import Vm


class _Vm:
    logs_writes = True


def _image(directory: Path, *, state: bool = True) -> Path:
    directory.mkdir()
    (directory / MEMORY).write_bytes(b"memory of " + directory.name.encode())
    if state:
        (directory / DEVICE_STATE).write_bytes(b"state of " + directory.name.encode())
    return directory / MEMORY


def test_a_vm_never_captured_equals_its_base_and_one_captured_its_image_with_its_state(
    tmp_path: Path,
) -> None:
    ledger, vm, sandbox = CaptureLedger(), cast(Vm, _Vm()), tmp_path / "sandbox"
    sandbox.mkdir()
    base = MemoryImage(tmp_path / "base.memory", tmp_path / "base.state")
    assert ledger.reference(vm, base) == base

    image = _image(tmp_path / "snapshot")
    ledger.captured(vm, image, sandbox)
    for path in image.parent.iterdir():
        path.unlink()  # the snapshot is deleted: its links in the sandbox keep its files

    found = ledger.reference(vm, base)
    assert found == MemoryImage(sandbox / CAPTURED, sandbox / CAPTURED_STATE)
    assert found.memory.read_bytes() == b"memory of snapshot"
    assert found.device_state.read_bytes() == b"state of snapshot"


def test_an_image_without_its_state_leaves_no_older_state_beside_it(tmp_path: Path) -> None:
    ledger, vm, sandbox = CaptureLedger(), cast(Vm, _Vm()), tmp_path / "sandbox"
    sandbox.mkdir()
    ledger.captured(vm, _image(tmp_path / "first"), sandbox)
    ledger.captured(vm, _image(tmp_path / "second", state=False), sandbox)
    assert os.path.samefile(sandbox / CAPTURED, tmp_path / "second" / MEMORY)
    assert not (sandbox / CAPTURED_STATE).exists()


def test_a_vm_whose_log_was_re_armed_by_a_failed_capture_has_no_reference(
    tmp_path: Path,
) -> None:
    ledger, vm = CaptureLedger(), cast(Vm, _Vm())
    base = MemoryImage(tmp_path / "base.memory", tmp_path / "base.state")
    ledger.unknown(vm)
    assert ledger.reference(vm, base) is None
