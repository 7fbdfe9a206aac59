"""Sandbox lifecycle through the official Python SDK (sync): create options, v1 and v2 create
routes, list filters and pages, info, timeouts and expiry, metrics, kill, connect, network."""

from __future__ import annotations

import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from e2b import Sandbox, SandboxMetrics, SandboxQuery, SandboxState
from e2b.exceptions import SandboxException, SandboxNotFoundException

from aenv_cli.platform import Platform

from ..conftest import METRICS_INTERVAL_S

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]


def test_create_with_options_is_seen_by_info_and_commands(e2b_vars: dict[str, str]) -> None:
    tag = uuid.uuid4().hex[:8]
    sandbox = Sandbox.create(
        "base", timeout=120, metadata={"suite": "conformance", "tag": tag},
        envs={"FOO": "bar baz"}, allow_internet_access=False,
    )
    try:
        info = sandbox.get_info()
        assert info.sandbox_id == sandbox.sandbox_id and info.template_id == "base"
        assert info.metadata == {"suite": "conformance", "tag": tag}
        assert info.state == SandboxState.RUNNING
        remaining = (info.end_at - datetime.now(UTC)).total_seconds()
        assert 100 < remaining <= 121
        assert info.cpu_count >= 1 and info.memory_mb >= 128
        assert sandbox.commands.run("echo $FOO").stdout == "bar baz\n"
        assert Sandbox.get_info(sandbox.sandbox_id).metadata["tag"] == tag
    finally:
        assert sandbox.kill() is True


def test_idempotency_key_returns_the_same_sandbox(e2b_vars: dict[str, str]) -> None:
    key = "conf-" + uuid.uuid4().hex
    first = Sandbox.create(idempotency_key=key)
    try:
        second = Sandbox.create(idempotency_key=key)
        assert second.sandbox_id == first.sandbox_id
    finally:
        first.kill()


def test_v1_create_with_secure_then_connect(platform: Platform, e2b_vars: dict[str, str]) -> None:
    """Older SDKs create through `POST /sandboxes` with `secure`; today's SDK connects to it."""
    created = httpx.post(
        f"{platform.api_url}/sandboxes", headers={"X-API-Key": platform.api_key},
        json={"templateID": "base", "secure": True, "timeout": 120}, timeout=120,
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["envdAccessToken"]
    sandbox = Sandbox.connect(body["sandboxID"])
    try:
        assert sandbox.commands.run("echo v1").stdout == "v1\n"
        # The token really is enforced by envd: a request without it is refused.
        refused = httpx.post(
            f"{platform.sandbox_url}/filesystem.Filesystem/Stat",
            headers={"E2b-Sandbox-Id": body["sandboxID"], "E2b-Sandbox-Port": "49983"},
            json={"path": "/"}, timeout=30,
        )
        assert refused.status_code == 401
    finally:
        sandbox.kill()


def test_list_filters_by_metadata_and_state_with_pages(e2b_vars: dict[str, str]) -> None:
    tag = uuid.uuid4().hex[:8]
    sandboxes = [Sandbox.create(metadata={"list": tag, "n": str(i)}) for i in range(3)]
    try:
        query = SandboxQuery(metadata={"list": tag}, state=[SandboxState.RUNNING])
        paginator = Sandbox.list(query=query, limit=2)
        first = paginator.next_items()
        assert len(first) == 2 and paginator.has_next
        second = paginator.next_items()
        assert len(second) == 1 and not paginator.has_next
        seen = {s.sandbox_id for s in first + second}
        assert seen == {s.sandbox_id for s in sandboxes}
        assert all(s.state == SandboxState.RUNNING for s in first + second)
        one = Sandbox.list(query=SandboxQuery(metadata={"list": tag, "n": "1"})).next_items()
        assert [s.sandbox_id for s in one] == [sandboxes[1].sandbox_id]
        paused = Sandbox.list(
            query=SandboxQuery(metadata={"list": tag}, state=[SandboxState.PAUSED])
        ).next_items()
        assert paused == []
    finally:
        for sandbox in sandboxes:
            sandbox.kill()


def test_set_timeout_moves_end_and_unknown_id_is_not_found(sbx: Sandbox) -> None:
    sbx.set_timeout(60)
    end = sbx.get_info().end_at
    assert abs((end - datetime.now(UTC)).total_seconds() - 60) < 10
    sbx.set_timeout(600)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.set_timeout("nosuchsandbox0000000", 60)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info("nosuchsandbox0000000")


def _real_figures(metric: SandboxMetrics, cpu_count: int) -> None:
    assert metric.cpu_count == cpu_count
    assert 0 <= metric.cpu_used_pct <= 100
    assert 0 < metric.mem_used < metric.mem_total
    assert 0 < metric.disk_used < metric.disk_total


def test_metrics_are_real_guest_figures(sbx: Sandbox) -> None:
    metric = sbx.get_metrics()[-1]
    info = sbx.get_info()
    _real_figures(metric, info.cpu_count)
    assert abs(metric.mem_total / 2**20 - info.memory_mb) < 128
    assert abs((metric.timestamp - datetime.now(UTC)).total_seconds()) < 30
    # The figures are the guest's own: writing 64 MiB to its disk shows up in disk_used.
    sbx.commands.run("dd if=/dev/zero of=/home/user/metrics.bin bs=1M count=64 && sync")
    try:
        # The samples of the next whole second onwards are surely taken after the write.
        written = datetime.now(UTC) + timedelta(seconds=1)
        deadline = time.monotonic() + 10 * METRICS_INTERVAL_S + 20
        while not (later := sbx.get_metrics(start=written)) and time.monotonic() < deadline:
            time.sleep(METRICS_INTERVAL_S / 2)
        assert later, "no sample after the write"
        assert later[-1].disk_used - metric.disk_used > 48 * 2**20
    finally:
        sbx.commands.run("rm -f /home/user/metrics.bin")


def test_metrics_history_is_sampled_periodically_and_windowed(sbx: Sandbox) -> None:
    """The node agent samples every running sandbox's envd each interval (E2B: 5 s; the test
    platform: METRICS_INTERVAL_S) and keeps the samples; start/end select a window."""
    cpu_count = sbx.get_info().cpu_count
    before = len(sbx.get_metrics())
    time.sleep(2.5 * METRICS_INTERVAL_S)
    samples = sbx.get_metrics()
    assert len(samples) >= max(2, before + 2)
    stamps = [m.timestamp for m in samples]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    for metric in samples:
        _real_figures(metric, cpu_count)
    # Windows compare whole seconds, inclusive: wait until the history spans a few of them.
    deadline = time.monotonic() + 10 * METRICS_INTERVAL_S + 20
    while (samples[-1].timestamp - samples[0].timestamp).total_seconds() < 2.5:
        assert time.monotonic() < deadline, "the history does not grow"
        time.sleep(METRICS_INTERVAL_S)
        samples = sbx.get_metrics()
    first, last = samples[0].timestamp, samples[-1].timestamp
    earliest = sbx.get_metrics(end=first)
    assert earliest and all(m.timestamp < first + timedelta(seconds=1) for m in earliest)
    assert earliest[0].timestamp == first and len(earliest) < len(samples)
    newest = sbx.get_metrics(start=last)
    assert newest and all(m.timestamp >= last - timedelta(seconds=1) for m in newest)
    assert last in [m.timestamp for m in newest] and first not in [m.timestamp for m in newest]
    middle = sbx.get_metrics(start=first + timedelta(seconds=1), end=last - timedelta(seconds=1))
    inside = [m.timestamp for m in middle]
    assert inside and first not in inside and last not in inside
    assert set(inside) <= {m.timestamp for m in samples}
    assert sbx.get_metrics(start=datetime.now(UTC) + timedelta(hours=1)) == []
    # start after end is refused by the API.
    with pytest.raises(SandboxException):
        sbx.get_metrics(start=last, end=first - timedelta(seconds=1))


def test_batch_metrics_of_several_sandboxes(
    platform: Platform, sbx: Sandbox, fresh_sbx: Sandbox
) -> None:
    """`GET /sandboxes/metrics?sandbox_ids=a,b` (generated in the SDKs, no SDK method calls it):
    the newest sample of each sandbox, unknown ones left out."""
    ids = [sbx.sandbox_id, fresh_sbx.sandbox_id, "nosuchsandbox0000000"]
    response = httpx.get(
        f"{platform.api_url}/sandboxes/metrics", params={"sandbox_ids": ",".join(ids)},
        headers={"X-API-Key": platform.api_key}, timeout=60,
    )
    assert response.status_code == 200, response.text
    sandboxes = response.json()["sandboxes"]
    assert set(sandboxes) == set(ids[:2])
    for metric in sandboxes.values():
        assert 0 < metric["memUsed"] < metric["memTotal"] and metric["timestampUnix"] > 0


def test_is_running_kill_and_commands_after_kill(fresh_sbx: Sandbox) -> None:
    assert fresh_sbx.is_running()
    assert Sandbox.kill(fresh_sbx.sandbox_id) is True
    assert fresh_sbx.is_running() is False
    assert fresh_sbx.kill() is False
    started = time.monotonic()
    with pytest.raises(SandboxException, match="was not found"):
        fresh_sbx.commands.run("echo never")
    assert time.monotonic() - started < 10


def test_connect_by_id_shares_the_sandbox(sbx: Sandbox) -> None:
    sbx.files.write("/home/user/connect.txt", "same sandbox")
    other = Sandbox.connect(sbx.sandbox_id)
    assert other.sandbox_id == sbx.sandbox_id
    assert other.files.read("/home/user/connect.txt") == "same sandbox"
    # A running sandbox's TTL is only ever raised by connect.
    before = sbx.get_info().end_at
    Sandbox.connect(sbx.sandbox_id, timeout=30)
    assert sbx.get_info().end_at == before
    with pytest.raises(SandboxNotFoundException):
        Sandbox.connect("nosuchsandbox0000000")


def test_expiry_kills_the_sandbox(e2b_vars: dict[str, str]) -> None:
    sandbox = Sandbox.create(timeout=3)
    try:
        assert sandbox.is_running()
        deadline = time.monotonic() + 20
        while sandbox.is_running() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not sandbox.is_running()
        with pytest.raises(SandboxNotFoundException):
            sandbox.get_info()
        with pytest.raises(SandboxException, match="was not found"):
            sandbox.commands.run("true")
    finally:
        sandbox.kill()


def _rulesets(net_prefix: str) -> list[str]:
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    rulesets = []
    for line in names.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(net_prefix + "-"):
            rulesets.append(subprocess.run(
                ["ip", "netns", "exec", name, "nft", "list", "ruleset"],
                capture_output=True, text=True,
            ).stdout)
    return rulesets


def test_update_network_replaces_the_egress_policy(
    fresh_sbx: Sandbox, net_prefix: str
) -> None:
    marker = "198.51.100.0/24"
    fresh_sbx.update_network({"deny_out": [marker]})
    info = fresh_sbx.get_info()
    assert info.network is not None and marker in str(info.network)
    assert sum(marker in r for r in _rulesets(net_prefix)) == 1
    # A full replacement: what is omitted is cleared.
    fresh_sbx.update_network({})
    assert sum(marker in r for r in _rulesets(net_prefix)) == 0
    with pytest.raises(SandboxNotFoundException):
        Sandbox.update_network("nosuchsandbox0000000", {})
