"""Watching and stopping a process we did not start (a QEMU of an earlier node agent)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from aenv_nodeagent.vmm import process
from aenv_nodeagent.vmm.process import UNKNOWN_EXIT_STATUS, AdoptedProcess


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(["sleep", "60"])
    yield child
    child.kill()
    child.wait()


async def test_an_adopted_process_is_stopped_and_its_exit_seen(
    sleeper: subprocess.Popen[bytes],
) -> None:
    adopted = AdoptedProcess(sleeper.pid)
    assert adopted.returncode is None
    await process.stop(adopted, grace=0.05)  # waits, then SIGTERM: its exit ends the wait
    assert adopted.returncode == UNKNOWN_EXIT_STATUS
    assert sleeper.wait(timeout=5) == -15
    with pytest.raises(ProcessLookupError):
        adopted.send_signal(9)


def test_a_released_process_keeps_running(sleeper: subprocess.Popen[bytes]) -> None:
    AdoptedProcess(sleeper.pid).close()
    assert sleeper.poll() is None


def test_a_gone_process_cannot_be_adopted(sleeper: subprocess.Popen[bytes]) -> None:
    sleeper.kill()
    sleeper.wait()
    with pytest.raises(ProcessLookupError):
        AdoptedProcess(sleeper.pid)


def test_only_the_qemu_holding_a_pidfile_owns_it(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    pidfile = tmp_path / "qemu.pid"
    pidfile.write_text(f"{sleeper.pid}\n")
    assert process.qemu_owning(pidfile) is None  # not a QEMU, and it does not hold the file
    pidfile.write_text("not a pid")
    assert process.qemu_owning(pidfile) is None
    assert process.qemu_owning(tmp_path / "missing.pid") is None
