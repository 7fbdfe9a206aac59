"""Two gateway processes (`python -m aenv_gateway`, as deployed) over one real etcd: the same new
template build asked through both at once runs once — one gateway claims its inputs
(`build-inputs/`) and its name (`catalog-names/`) in etcd, the other follows its record — and
every caller gets the one template. The scheduler and the node agent are this test's fakes (gRPC
on loopback), shared by both gateways, so the node agent counts every build either asked for."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from e2b import AsyncTemplate, TemplateClass

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2_grpc
from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_common.grpc_server import start_grpc_server
from aenv_gateway.cluster.directory import InMemoryClusterView
from aenv_gateway.core.templates.records import EtcdTemplateRecords
from aenv_testing.ports import free_port

from .conftest import API_KEY
from .fakes import NODE_ID, FakeNodeAgent, FakeScheduler

pytestmark = [pytest.mark.etcd, pytest.mark.sdk]
READY = cluster_pb2.BUILD_STATUS_READY


@dataclass
class Fakes:
    nodeagent: FakeNodeAgent
    scheduler_address: str


@contextlib.asynccontextmanager
async def _fakes(store: ClusterStore) -> AsyncIterator[Fakes]:
    templates = {"base"}
    nodeagent = FakeNodeAgent(InMemoryClusterView(), templates)
    na_server, na_port = await start_grpc_server("127.0.0.1:0", [(
        nodeagent_pb2_grpc.add_NodeAgentServiceServicer_to_server, nodeagent,
        "aenv.nodeagent.v1.NodeAgentService")])
    address = f"127.0.0.1:{na_port}"
    scheduler = FakeScheduler(templates, scheduler_pb2.Placement(
        node_id=NODE_ID, nodeagent_address=address, proxy_address="127.0.0.1:9"))
    sch_server, sch_port = await start_grpc_server("127.0.0.1:0", [(
        scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server, scheduler,
        "aenv.scheduler.v1.SchedulerService")])
    await store.put_node(cluster_pb2.NodeRecord(node_id=NODE_ID, nodeagent_address=address))
    try:
        yield Fakes(nodeagent, f"127.0.0.1:{sch_port}")
    finally:
        await sch_server.stop(None)
        await na_server.stop(None)


@contextlib.contextmanager
def _gateway(
    home: Path, settings: CommonSettings, scheduler: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A gateway process over `settings`' etcd; yields its URL."""
    home.mkdir(parents=True)
    (home / "api-key").write_text(API_KEY)
    port = free_port()
    env = {**os.environ, "AENV_HOME": str(home), "AENV_ETCD_ENDPOINTS": settings.etcd_endpoints,
           "AENV_ETCD_PREFIX": settings.etcd_prefix, "AENV_GATEWAY_LISTEN": f"127.0.0.1:{port}",
           "AENV_GATEWAY_GRPC_LISTEN": f"127.0.0.1:{free_port()}",
           "AENV_GATEWAY_SCHEDULER_ADDRESS": scheduler,
           "AENV_GATEWAY_API_KEY_FILE": str(home / "api-key")}
    with (home / "gateway.log").open("wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "aenv_gateway"], env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def _serving(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    async with httpx.AsyncClient(base_url=url) as http:
        for _ in range(300):
            assert process.poll() is None, log.read_text()[-2000:]
            with contextlib.suppress(httpx.TransportError):
                if (await http.get("/health")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError(f"gateway at {url} never answered: {log.read_text()[-2000:]}")


async def _build(url: str, template: TemplateClass, name: str) -> tuple[str, str]:
    info = await AsyncTemplate.build(template, name, api_key=API_KEY, api_url=url)
    return info.template_id, info.build_id


async def test_one_build_runs_for_the_same_template_asked_through_two_gateway_processes(
    etcd_settings: CommonSettings, tmp_path: Path,
) -> None:
    store = await ClusterStore.connect(etcd_settings)
    try:
        async with _fakes(store) as fakes:
            with _gateway(tmp_path / "a", etcd_settings, fakes.scheduler_address) as a, \
                    _gateway(tmp_path / "b", etcd_settings, fakes.scheduler_address) as b:
                await _serving(*a, tmp_path / "a" / "gateway.log")
                await _serving(*b, tmp_path / "b" / "gateway.log")
                nodeagent = fakes.nodeagent
                nodeagent.build_gate = asyncio.Event()  # the build holds until both asked
                template = AsyncTemplate().from_image("alpine:3").run_cmd("echo processes")
                calls = [asyncio.ensure_future(_build(url, template, "across"))
                         for url in (a[0], b[0], a[0], b[0])]
                try:
                    await asyncio.wait_for(nodeagent.build_started.wait(), 60)
                    await asyncio.sleep(2.0)  # the others ask meanwhile, through both
                    nodeagent.build_gate.set()
                    done = await asyncio.wait_for(asyncio.gather(*calls), 90)
                finally:
                    for call in calls:
                        call.cancel()
                assert len(nodeagent.builds) == 1
                assert len({template_id for template_id, _ in done}) == 1
                assert len({build_id for _, build_id in done}) == 4  # a build each, one run
                built = nodeagent.builds[0].template_id
                records = EtcdTemplateRecords(store)
                for _, build_id in done:
                    record = await records.get_build(build_id)
                    assert record is not None and record.status == READY
                    assert record.image_id == built
                assert a[1].poll() is None and b[1].poll() is None
    finally:
        await store.close()
