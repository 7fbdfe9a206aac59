"""Metrics history without VMs: the per-sandbox ring, windows, the periodic sampler, and the
sandbox service's and servicer's answers, against fakes of envd, the network and the VM."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import InvalidArgument, NotFound, Unavailable
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.network import NetworkManager
from aenv_nodeagent.sandbox.context import SandboxSettings, WingContext
from aenv_nodeagent.sandbox.model import Chain, Paused, Sandbox
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.sandbox_metrics import MetricSample, MetricsHistory, MetricsSampler, Window
from aenv_nodeagent.servicer import NodeAgentServicer
from aenv_nodeagent.templates import TemplateStore
from aenv_nodeagent.templates.builds import TemplateBuilds
from aenv_nodeagent.vmm.driver import VmmDriver
from aenv_testing.records import MemoryRecords

# These tests never build templates.
NO_BUILDS = cast(TemplateBuilds, None)


def _sample(ts: float, cpu: float = 1.0) -> MetricSample:
    return MetricSample(ts=ts, cpu_count=2, cpu_used_pct=cpu, mem_used=100, mem_total=512,
                        mem_cache=10, disk_used=300, disk_total=1000)


# --- ring and windows ---------------------------------------------------------------------------


def test_ring_keeps_only_the_newest_samples() -> None:
    history = MetricsHistory(max_samples=3)
    for ts in range(10, 15):
        history.add("a", _sample(ts))
    assert [s.ts for s in history.window("a")] == [12, 13, 14]
    assert history.latest("a") == _sample(14)
    assert history.window("nobody") == [] and history.latest("nobody") is None
    with pytest.raises(InvalidArgument):
        MetricsHistory(max_samples=0)


def test_window_is_inclusive_on_whole_seconds() -> None:
    history = MetricsHistory()
    for ts in (100.2, 101.9, 102.5, 103.0, 104.7):
        history.add("a", _sample(ts))

    def stamps(window: Window) -> list[float]:
        return [s.ts for s in history.window("a", window)]

    assert stamps(Window(101, 103)) == [101.9, 102.5, 103.0]
    assert stamps(Window(start=103)) == [103.0, 104.7]
    assert stamps(Window(end=100)) == [100.2]
    assert stamps(Window(105, 200)) == []
    assert stamps(Window(102, 102)) == [102.5]
    with pytest.raises(InvalidArgument):
        Window(5, 4)


def test_window_from_request_tells_unset_from_zero() -> None:
    assert Window.of(nodeagent_pb2.GetSandboxMetricsRequest(sandbox_id="a")) == Window()
    request = nodeagent_pb2.GetSandboxMetricsRequest(sandbox_id="a", start=0, end=7)
    assert Window.of(request) == Window(0, 7)
    with pytest.raises(InvalidArgument):
        Window.of(nodeagent_pb2.GetSandboxMetricsRequest(sandbox_id="a", start=8, end=7))


def test_retain_and_drop_forget_sandboxes() -> None:
    history = MetricsHistory()
    for sid in ("a", "b", "c"):
        history.add(sid, _sample(1))
    history.retain({"a", "b"})
    history.drop("a")
    assert history.ids() == ["b"] and not history.has("a")


def test_sample_from_envd_and_to_proto() -> None:
    data = {"ts": 1, "cpu_count": 2, "cpu_used_pct": 12.5, "mem_used": 100, "mem_total": 512,
            "mem_cache": 10, "disk_used": 300, "disk_total": 1000, "mem_used_mib": 0}
    sample = MetricSample.from_envd(data, ts=1700000000.25)
    assert sample == MetricSample(1700000000.25, 2, 12.5, 100, 512, 10, 300, 1000)
    proto = sample.to_proto()
    assert proto.timestamp.seconds == 1700000000 and proto.timestamp.nanos == 250_000_000
    assert proto.cpu_used_pct == 12.5 and proto.disk_total == 1000
    with pytest.raises(ValueError):
        MetricSample.from_envd({**data, "mem_used": "lots"}, ts=1)


# --- sampler ------------------------------------------------------------------------------------


class FakeSandboxes:
    """The sampler's view of the manager: running ids, and a probe per sandbox."""

    def __init__(self, *running: str) -> None:
        self.running = set(running)
        self.busy: set[str] = set()
        self.probes: dict[str, int] = {}
        self.fail: dict[str, BaseException] = {}
        self.delay: dict[str, float] = {}

    def sampling_targets(self) -> list[str]:
        return sorted(self.running - self.busy)

    def is_running(self, sandbox_id: str) -> bool:
        return sandbox_id in self.running

    async def sample(self, sandbox_id: str) -> MetricSample:
        self.probes[sandbox_id] = self.probes.get(sandbox_id, 0) + 1
        await asyncio.sleep(self.delay.get(sandbox_id, 0))
        if sandbox_id in self.fail:
            raise self.fail[sandbox_id]
        return _sample(time.time())


async def _settle() -> None:
    await asyncio.sleep(0.01)


async def test_a_tick_samples_every_running_idle_sandbox() -> None:
    fake, history = FakeSandboxes("a", "b", "c"), MetricsHistory()
    fake.busy.add("c")  # being paused: left alone
    sampler = MetricsSampler(fake, history, interval_s=60, timeout_s=1)
    sampler.tick()
    await _settle()
    assert fake.probes == {"a": 1, "b": 1}
    assert sorted(history.ids()) == ["a", "b"]


async def test_a_silent_guest_costs_a_sample_and_nothing_else() -> None:
    fake, history = FakeSandboxes("ok", "down", "slow", "broken"), MetricsHistory()
    fake.fail["down"] = Unavailable("envd did not answer")
    fake.fail["broken"] = aiohttp.ClientConnectionError("reset")
    fake.delay["slow"] = 10
    sampler = MetricsSampler(fake, history, interval_s=60, timeout_s=0.05)
    sampler.tick()
    await _settle()
    # The slow one is still in flight: the next tick does not pile a second probe on it.
    sampler.tick()
    await _settle()
    assert fake.probes == {"ok": 2, "down": 2, "slow": 1, "broken": 2}
    await asyncio.sleep(0.1)  # its timeout passes
    assert history.ids() == ["ok"] and len(history.window("ok")) == 2
    sampler.tick()
    await _settle()
    assert fake.probes["slow"] == 2
    await sampler.close()


async def test_no_sample_is_recorded_for_a_sandbox_killed_meanwhile() -> None:
    fake, history = FakeSandboxes("a"), MetricsHistory()
    fake.delay["a"] = 0.02
    sampler = MetricsSampler(fake, history, interval_s=60, timeout_s=1)
    sampler.tick()
    fake.running.clear()
    await asyncio.sleep(0.05)
    assert history.ids() == []


async def test_history_is_kept_for_paused_and_dropped_for_gone_sandboxes() -> None:
    fake, history = FakeSandboxes("running"), MetricsHistory()
    history.add("paused", _sample(1))
    history.add("killed", _sample(1))
    sampler = MetricsSampler(fake, history, interval_s=60, timeout_s=1,
                             kept=lambda: {"running", "paused"})
    sampler.tick()
    await _settle()
    assert sorted(history.ids()) == ["paused", "running"]
    assert fake.probes == {"running": 1}  # a paused sandbox produces no samples


async def test_run_samples_periodically_until_cancelled() -> None:
    fake, history = FakeSandboxes("a"), MetricsHistory()
    sampler = MetricsSampler(fake, history, interval_s=0.02, timeout_s=1)
    task = asyncio.create_task(sampler.run())
    await asyncio.sleep(0.15)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stamps = [s.ts for s in history.window("a")]
    assert len(stamps) >= 3 and stamps == sorted(stamps)


# --- manager and servicer -----------------------------------------------------------------------


class FakeEnvd:
    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    async def metrics(self, host: str, access_token: str) -> dict[str, float]:
        self.calls += 1
        if self.down:
            raise aiohttp.ClientConnectionError("no route")
        return {"cpu_count": 1, "cpu_used_pct": 3.0, "mem_used": 1, "mem_total": 2,
                "mem_cache": 0, "disk_used": 1, "disk_total": 2}


class FakeVm:
    async def shutdown(self) -> None:
        return None


class FakeNetwork:
    async def destroy_slot(self, slot: object) -> None:
        return None


async def _manager(tmp_path: Path, envd: FakeEnvd) -> SandboxWing:
    manager = SandboxWing(WingContext.of(
        SandboxSettings(tmp_path, ready_timeout_s=1, metrics_max_samples=4),
        SandboxRegistry("node"), MemoryRecords(), cast(TemplateStore, None),
        cast(NetworkManager, FakeNetwork()), cast(EnvdClient, envd),
    ), cast(VmmDriver, None))
    record = cluster_pb2.SandboxRecord(sandbox_id="sbx1", state=cluster_pb2.SANDBOX_STATE_RUNNING)
    slot: Any = SimpleNamespace(ns_ip="10.0.0.2")
    manager.registry.add_running(
        Sandbox(record, slot, cast(Any, FakeVm()), tmp_path / "sbx1"), Chain("base", []))
    return manager


async def test_a_fresh_sandbox_answers_with_one_live_sample(tmp_path: Path) -> None:
    envd = FakeEnvd()
    manager = await _manager(tmp_path, envd)
    [sample] = await manager.guest_metrics.metrics("sbx1")
    assert sample.cpu_used_pct == 3.0 and abs(sample.ts - time.time()) < 5
    # Later reads are the history; the live sample is part of it.
    assert await manager.guest_metrics.metrics("sbx1") == [sample] and envd.calls == 1
    assert await manager.guest_metrics.metrics("sbx1", Window(end=int(sample.ts) - 1)) == []
    with pytest.raises(NotFound):
        await manager.guest_metrics.metrics("nosuch")


async def test_a_busy_or_silent_sandbox_is_not_probed_by_a_read(tmp_path: Path) -> None:
    envd = FakeEnvd()
    manager = await _manager(tmp_path, envd)
    with manager.registry.exclusive("sbx1"):
        assert await manager.guest_metrics.metrics("sbx1") == [] and envd.calls == 0
        assert manager.guest_metrics.sampling_targets() == []
    envd.down = True
    with pytest.raises(Unavailable):
        await manager.guest_metrics.metrics("sbx1")
    assert await manager.guest_metrics.latest("sbx1") is None
    assert await manager.guest_metrics.latest("nosuch") is None


async def test_kill_drops_the_history(tmp_path: Path) -> None:
    manager = await _manager(tmp_path, FakeEnvd())
    for ts in range(6):
        manager.guest_metrics.history.add("sbx1", _sample(ts))
    kept = await manager.guest_metrics.metrics("sbx1")
    assert [s.ts for s in kept] == [2, 3, 4, 5]  # the ring's bound
    await manager.kills.kill("sbx1")
    assert not manager.guest_metrics.history.has("sbx1")


async def test_servicer_windows_and_paused_history(tmp_path: Path) -> None:
    manager = await _manager(tmp_path, FakeEnvd())
    servicer = NodeAgentServicer(manager, cluster_pb2.NodeRecord, NO_BUILDS)
    context: Any = None
    for ts in (100.0, 105.0, 110.0):
        manager.guest_metrics.history.add("sbx1", _sample(ts))
    request = nodeagent_pb2.GetSandboxMetricsRequest
    got = await servicer.GetSandboxMetrics(request(sandbox_id="sbx1", start=101), context)
    assert [m.timestamp.seconds for m in got.metrics] == [105, 110]
    got = await servicer.GetSandboxMetrics(request(sandbox_id="sbx1"), context)
    assert len(got.metrics) == 3
    # Paused: what was kept, never a probe of the stopped guest.
    manager.guest_metrics.history.add("paused1", _sample(50.0))
    manager.registry.add_paused(Paused(cluster_pb2.SandboxRecord(
        sandbox_id="paused1", state=cluster_pb2.SANDBOX_STATE_PAUSED), tmp_path / "p1",
        Chain("base", [])))
    got = await servicer.GetSandboxMetrics(request(sandbox_id="paused1", end=60), context)
    assert [m.timestamp.seconds for m in got.metrics] == [50]
    with pytest.raises(NotFound):
        await servicer.GetSandboxMetrics(request(sandbox_id="nosuch"), context)
    latest = await servicer.GetLatestSandboxMetrics(
        nodeagent_pb2.GetLatestSandboxMetricsRequest(
            sandbox_ids=["sbx1", "paused1", "nosuch", "sbx1"]), context)
    assert {sid: m.timestamp.seconds for sid, m in latest.metrics.items()} == {
        "sbx1": 110, "paused1": 50}
