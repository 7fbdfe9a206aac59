"""`aenv up` as a process (stand-in services, real etcd): ready output, SIGTERM leaves no process,
a service that dies is restarted until it keeps dying. And the other commands against that
running platform."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aenv_cli_testkit import standin_env

from aenv_cli.files import read_api_key
from aenv_cli.state import load_ports, save_ports
from aenv_cli.up import MAX_RESTARTS
from aenv_testing.platform_ports import free_platform_ports

pytestmark = pytest.mark.etcd

READY_TIMEOUT_S = 60.0


@dataclass
class RunningUp:
    process: subprocess.Popen[str]
    home: Path

    def descendants(self) -> list[int]:
        return descendants_of(self.process.pid)


def descendants_of(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat_file.parent.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def aenv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aenv_cli", *args],
        env={**standin_env(), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def running_up(tmp_path: Path) -> Iterator[RunningUp]:
    home = tmp_path / "home"
    process = subprocess.Popen(
        [sys.executable, "-m", "aenv_cli_standins.up_driver", str(home)],
        env=standin_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (home / "e2b.env").exists():
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "platform not ready in time"
            time.sleep(0.1)
        yield RunningUp(process, home)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=60)


def test_sigterm_stops_every_child(running_up: RunningUp) -> None:
    pids = running_up.descendants()
    assert len(pids) >= 5  # etcd and four services
    running_up.process.send_signal(signal.SIGTERM)
    output, _ = running_up.process.communicate(timeout=60)
    assert running_up.process.returncode == 0, output
    key = read_api_key(running_up.home)
    assert "aenv is running" in output
    assert f"E2B_API_KEY={key}" in output
    assert "stopped" in output
    assert [pid for pid in pids if alive(pid)] == []


def test_a_dead_service_is_restarted_until_it_keeps_dying(running_up: RunningUp) -> None:
    lines: list[str] = []
    assert running_up.process.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(running_up.process.stdout or ()))
    reader.start()
    killed: list[int] = []
    for attempt in range(MAX_RESTARTS + 1):
        _until(functools.partial(_restarts_seen, lines, attempt), "the restart")
        snapstore = _the_snapstore(running_up, not_these=killed)
        if attempt == 1:  # the platform serves on with the new one
            assert aenv("status", "--home", str(running_up.home)).returncode == 0
        os.kill(snapstore, signal.SIGKILL)
        killed.append(snapstore)
    pids = running_up.descendants()
    assert running_up.process.wait(timeout=60) == 1
    reader.join()
    output = "".join(lines)
    assert output.count("snapstore exited with code -9; restarting it") == MAX_RESTARTS
    assert f"snapstore died {MAX_RESTARTS + 1} times" in output
    assert "snapstore exited with code -9\n" in output
    assert [pid for pid in pids if alive(pid)] == []


def _restarts_seen(lines: list[str], count: int) -> bool:
    return "".join(lines).count("snapstore is back") == count


def _the_snapstore(running_up: RunningUp, not_these: list[int]) -> int:
    for pid in running_up.descendants():
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_text()
            if "AENV_SNAPSTORE_LISTEN" in cmdline and pid not in not_these and alive(pid):
                return pid
    raise AssertionError("no snapstore runs")


def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_status_reports_services_node_and_sandboxes(running_up: RunningUp) -> None:
    result = aenv("status", "--home", str(running_up.home))
    assert result.returncode == 0, result.stdout + result.stderr
    for service in ("etcd", "scheduler", "snapstore", "nodeagent", "gateway"):
        assert service in result.stdout
    assert "down" not in result.stdout
    assert f"pid {running_up.process.pid}" in result.stdout
    assert "standin-node" in result.stdout and "tcg" in result.stdout
    assert "cgroup" in result.stdout  # how the node confines its VMMs
    assert "sandboxes: 2" in result.stdout


def test_sandbox_list_and_kill_through_native_api(running_up: RunningUp) -> None:
    listed = aenv("sandbox", "list", "--home", str(running_up.home))
    assert listed.returncode == 0, listed.stderr
    assert "sbxaaaa" in listed.stdout and "sbxbbbb" in listed.stdout
    assert "running" in listed.stdout
    killed = aenv("sandbox", "kill", "sbxaaaa", "--home", str(running_up.home))
    assert killed.returncode == 0, killed.stderr
    after = aenv("sandbox", "list", "--home", str(running_up.home))
    assert "sbxaaaa" not in after.stdout and "sbxbbbb" in after.stdout
    missing = aenv("sandbox", "kill", "sbxaaaa", "--home", str(running_up.home))
    assert missing.returncode == 1
    assert "not found" in missing.stderr


def test_status_of_a_home_where_nothing_runs(tmp_path: Path) -> None:
    save_ports(tmp_path, free_platform_ports())  # nothing listens there
    result = aenv("status", "--home", str(tmp_path))
    assert result.returncode == 1
    assert "not running" in result.stdout
    assert "no API key" in result.stdout


async def test_client_rejects_bad_key_with_typed_error(running_up: RunningUp) -> None:
    from aenv_cli.client import GatewayClient
    from aenv_common.errors import Unauthenticated

    target = f"127.0.0.1:{load_ports(running_up.home).gateway_grpc}"
    async with GatewayClient(target, "e2b_wrong") as client:
        with pytest.raises(Unauthenticated):
            await client.list_sandboxes()
    async with GatewayClient.for_home(running_up.home) as client:
        record = await client.get_sandbox("sbxbbbb")
    assert record.template_id == "base"
