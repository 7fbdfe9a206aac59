"""The single-node launcher with real etcd and stand-in services."""

from __future__ import annotations

import json
import os
import signal
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from aenv_cli_testkit import PlatformFactory, standin

from aenv_cli.homelock import lock_holder
from aenv_cli.platform import Platform, PlatformStartError
from aenv_cli.state import load_ports
from aenv_common.errors import Conflict

pytestmark = pytest.mark.etcd


def alive(pid: int) -> bool:
    """True while the PID exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


async def test_start_writes_e2b_env_and_stop_leaves_nothing(
    make_platform: PlatformFactory,
) -> None:
    platform = make_platform()
    await platform.start()
    pids = [child.pid for child in platform.children]
    assert [c.name for c in platform.children] == [
        "etcd", "scheduler", "snapstore", "nodeagent", "gateway"
    ]
    assert all(alive(pid) for pid in pids)

    key = (platform.home / "api-key").read_text().strip()
    assert key.startswith("e2b_") and platform.api_key == key
    env_file = platform.home / "e2b.env"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert env_file.read_text().splitlines() == [
        f"E2B_API_KEY={key}",
        f"E2B_API_URL=http://127.0.0.1:{platform.ports.gateway_http}",
        f"E2B_SANDBOX_URL=http://127.0.0.1:{platform.ports.gateway_http}",
        f"E2B_VOLUME_API_URL=http://127.0.0.1:{platform.ports.gateway_http}",
    ]
    assert load_ports(platform.home) == platform.ports
    assert lock_holder(platform.home) == os.getpid()
    assert (platform.home / "logs" / "etcd.log").stat().st_size > 0

    await platform.stop()
    assert not any(alive(pid) for pid in pids)
    assert lock_holder(platform.home) is None


async def test_services_get_the_wiring_environment(make_platform: PlatformFactory) -> None:
    platform = make_platform()
    await platform.start()
    ports = platform.ports
    seen = json.loads((platform.home / "standin-nodeagent.json").read_text())
    assert seen["AENV_HOME"] == str(platform.home)
    assert seen["AENV_ETCD_ENDPOINTS"] == f"127.0.0.1:{ports.etcd_client}"
    assert seen["AENV_OTEL_TRACE_DIR"] == str(platform.home / "traces")
    assert seen["AENV_NODEAGENT_LISTEN"] == f"127.0.0.1:{ports.nodeagent}"
    assert seen["AENV_NODEAGENT_PROXY_LISTEN"] == f"127.0.0.1:{ports.nodeagent_proxy}"
    assert seen["AENV_NODEAGENT_SNAPSTORE_ADDRESS"] == f"127.0.0.1:{ports.snapstore}"
    gateway = json.loads((platform.home / "standin-gateway.json").read_text())
    assert gateway["AENV_GATEWAY_SCHEDULER_ADDRESS"] == f"127.0.0.1:{ports.scheduler}"
    assert gateway["AENV_GATEWAY_GRPC_LISTEN"] == f"127.0.0.1:{ports.gateway_grpc}"


async def test_child_failing_at_start_aborts_cleanly_with_its_log_tail(
    make_platform: PlatformFactory,
) -> None:
    platform = make_platform(overrides={"snapstore": standin("crash")})
    with pytest.raises(PlatformStartError) as caught:
        await platform.start()
    assert caught.value.service == "snapstore"
    assert "exited with code 3" in caught.value.message
    assert "fatal: cannot open /dev/imaginary" in caught.value.log_tail
    assert platform.children == []
    assert lock_holder(platform.home) is None
    assert not (platform.home / "e2b.env").exists()


async def test_second_instance_on_same_home_is_refused(make_platform: PlatformFactory) -> None:
    first = make_platform()
    await first.start()
    second = make_platform(home=first.home)
    with pytest.raises(Conflict, match=f"already running.*pid {os.getpid()}"):
        await second.start()
    assert all(alive(child.pid) for child in first.children)


async def test_service_ignoring_sigterm_is_killed(make_platform: PlatformFactory) -> None:
    platform = make_platform(
        overrides={
            "scheduler": standin(
                "grpc_service", "scheduler", "AENV_SCHEDULER_LISTEN", "--ignore-sigterm"
            )
        }
    )
    platform.services = [
        replace(spec, stop_timeout_s=0.5) if spec.name == "scheduler" else spec
        for spec in platform.services
    ]
    await platform.start()
    scheduler = next(c for c in platform.children if c.name == "scheduler")
    await platform.stop()
    assert scheduler.returncode == -9
    assert not alive(scheduler.pid)


async def test_gateway_without_api_key_fails_start(
    make_platform: PlatformFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("aenv_cli.platform.API_KEY_WAIT_S", 0.3)
    platform = make_platform(overrides={"gateway": standin("gateway", "--no-api-key")})
    with pytest.raises(PlatformStartError, match="wrote no API key"):
        await platform.start()
    assert platform.children == []


def test_unknown_service_in_command_table_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such services"):
        Platform(tmp_path, commands={"gatewya": ["true"]})


def _with_nodeagent_cleanup(platform: Platform) -> Path:
    """The stand-in node agent gets a cleanup; returns the file it leaves when it ran."""
    platform.services = [
        replace(spec, cleanup_argv=standin("cleanup", spec.name))
        if spec.name == "nodeagent" else spec
        for spec in platform.services
    ]
    return platform.home / "cleaned-nodeagent"


async def test_a_service_that_died_is_cleaned_up_after_at_stop(
    make_platform: PlatformFactory,
) -> None:
    platform = make_platform()
    cleaned = _with_nodeagent_cleanup(platform)
    await platform.start()
    nodeagent = next(c for c in platform.children if c.name == "nodeagent")
    os.kill(nodeagent.pid, signal.SIGKILL)
    await nodeagent.wait()
    await platform.stop()
    assert cleaned.read_text() == "cleaned"
    assert (platform.home / "logs" / "nodeagent-cleanup.log").exists()


async def test_a_service_that_stopped_by_itself_needs_no_cleanup(
    make_platform: PlatformFactory,
) -> None:
    platform = make_platform()
    cleaned = _with_nodeagent_cleanup(platform)
    await platform.start()
    await platform.stop()
    assert not cleaned.exists()


def test_a_replaced_command_drops_the_real_cleanup(tmp_path: Path) -> None:
    real = {spec.name: spec for spec in Platform(tmp_path).services}
    assert real["nodeagent"].cleanup_argv is not None
    assert real["nodeagent"].cleanup_argv[-2:] == ["aenv_nodeagent", "cleanup"]
    replaced = Platform(tmp_path, commands={"nodeagent": ["true"]}).services
    assert all(spec.cleanup_argv is None for spec in replaced)
