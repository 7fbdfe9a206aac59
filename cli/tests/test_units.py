"""Fast unit tests of the launcher's pieces: lock, private files, wiring environment."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from aenv_cli.files import write_private_file
from aenv_cli.homelock import HomeLock, lock_holder
from aenv_cli.ports import PlatformPorts
from aenv_cli.services import default_service_table, etcd_argv, service_environment
from aenv_common.errors import Conflict


def test_home_lock_is_exclusive_and_released(tmp_path: Path) -> None:
    first, second = HomeLock(tmp_path), HomeLock(tmp_path)
    first.acquire()
    try:
        assert lock_holder(tmp_path) == os.getpid()
        with pytest.raises(Conflict, match="already running"):
            second.acquire()
    finally:
        first.release()
    assert lock_holder(tmp_path) is None
    second.acquire()
    second.release()


def test_private_file_is_0600_even_when_it_existed_world_readable(tmp_path: Path) -> None:
    target = tmp_path / "e2b.env"
    target.write_text("old\n")
    target.chmod(0o644)
    old_umask = os.umask(0)
    try:
        write_private_file(target, "E2B_API_KEY=x\n")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert target.read_text() == "E2B_API_KEY=x\n"
    assert [p.name for p in tmp_path.iterdir()] == ["e2b.env"]


def test_environment_wires_ports_and_keeps_user_overrides(tmp_path: Path) -> None:
    ports = PlatformPorts(gateway_http=3100, scheduler=51051)
    env = service_environment(
        tmp_path, ports, {"PATH": "/bin", "AENV_NODEAGENT_PVM_KERNEL": "/k", "AENV_HOME": "/x"}
    )
    assert env["PATH"] == "/bin" and env["AENV_NODEAGENT_PVM_KERNEL"] == "/k"
    assert env["AENV_HOME"] == str(tmp_path)
    assert env["AENV_GATEWAY_LISTEN"] == "127.0.0.1:3100"
    assert env["AENV_SCHEDULER_LISTEN"] == "127.0.0.1:51051"
    assert env["AENV_GATEWAY_SCHEDULER_ADDRESS"] == "127.0.0.1:51051"


def test_default_table_runs_modules_with_this_interpreter_after_etcd(tmp_path: Path) -> None:
    import sys

    table = default_service_table(tmp_path, PlatformPorts())
    names = [spec.name for spec in table]
    assert names == ["etcd", "scheduler", "snapstore", "nodeagent", "gateway"]
    assert table[1].argv == [sys.executable, "-m", "aenv_scheduler"]
    nodeagent = table[3]
    assert nodeagent.stop_timeout_s > table[1].stop_timeout_s
    argv = etcd_argv(tmp_path, PlatformPorts(etcd_client=12379, etcd_peer=12380))
    assert f"--data-dir={tmp_path / 'etcd'}" in argv
    assert "--listen-client-urls=http://127.0.0.1:12379" in argv
    assert "--initial-cluster=aenv=http://127.0.0.1:12380" in argv
