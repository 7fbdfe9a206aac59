"""What recovery does with a pause whose memory was still to be written (no VM needed: the
written case runs with real VMs in test_pause_resume_vm.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from aenv_nodeagent.memory.images import DELTA, DEVICES
from aenv_nodeagent.memory.paused import finish_pending, is_pending


def test_only_a_device_state_without_a_delta_is_pending(tmp_path: Path) -> None:
    assert not is_pending(tmp_path)
    (tmp_path / DEVICES).write_bytes(b"devices")
    assert is_pending(tmp_path)
    (tmp_path / DELTA).write_bytes(b"delta")
    assert not is_pending(tmp_path)


def test_a_pending_pause_whose_vm_is_gone_is_reported_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "sbx-1"
    directory.mkdir()
    (directory / DEVICES).write_bytes(b"devices")
    pidfile = directory / "vm" / "qemu.pid"
    pidfile.parent.mkdir()
    pidfile.write_text("999999999")  # no such process
    with caplog.at_level(logging.ERROR, logger="aenv_nodeagent.memory.paused"):
        finish_pending(directory, pidfile)
    [lost] = caplog.records
    assert lost.getMessage().startswith("paused sandbox lost its memory")
    assert vars(lost)["sandbox_id"] == "sbx-1"
    assert not (directory / DELTA).exists()


def test_a_finished_pause_is_left_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / DELTA).write_bytes(b"delta")
    with caplog.at_level(logging.INFO, logger="aenv_nodeagent.memory.paused"):
        finish_pending(tmp_path, tmp_path / "vm" / "qemu.pid")
    assert caplog.records == [] and (tmp_path / DELTA).read_bytes() == b"delta"
