"""Template builds through several gateway replicas over one real etcd: a name makes one
template, equal inputs build once (the others follow), and a build whose gateway died is taken
over; deleting the template marks its node-side template retired. Each gateway has its own etcd
connection and its own fake node, as replicas would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest
from e2b import AsyncTemplate, BuildException, TemplateClass

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import RETIRED_TEMPLATES, ClusterStore
from aenv_common.config import CommonSettings
from aenv_gateway.core.templates import builds
from aenv_gateway.core.templates.catalog import TemplateCatalog
from aenv_gateway.core.templates.names import parse_name
from aenv_gateway.core.templates.records import NAMES, EtcdTemplateRecords

from .conftest import API_KEY, Stack, stack_over

pytestmark = [pytest.mark.etcd, pytest.mark.sdk]
READY = cluster_pb2.BUILD_STATUS_READY


@pytest.fixture
async def replicas(etcd_settings: CommonSettings) -> AsyncIterator[list[Stack]]:
    async with contextlib.AsyncExitStack() as stack:
        gateways = []
        for _ in range(2):
            store = await ClusterStore.connect(etcd_settings)
            stack.push_async_callback(store.close)
            records = await EtcdTemplateRecords.open(store)
            stack.push_async_callback(records.close)
            gateways.append(await stack.enter_async_context(stack_over(records)))
        yield gateways


def _node_builds(gateways: list[Stack]) -> int:
    return sum(len(g.nodeagent.builds) for g in gateways)


async def _build(gateway: Stack, template: TemplateClass, name: str) -> str:
    info = await AsyncTemplate.build(template, name, api_key=API_KEY, api_url=gateway.url)
    return f"{info.template_id}/{info.build_id}"


async def test_concurrent_builds_through_two_gateways_build_once(
    replicas: list[Stack], etcd_settings: CommonSettings,
) -> None:
    for gateway in replicas:
        gateway.nodeagent.build_gate = asyncio.Event()
    template = AsyncTemplate().from_image("alpine:3").run_cmd("echo replicas")
    calls = [asyncio.ensure_future(_build(g, template, "shared")) for g in replicas * 2]
    started = [asyncio.ensure_future(g.nodeagent.build_started.wait()) for g in replicas]
    await asyncio.wait(started, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    await asyncio.sleep(2.0)  # the others ask meanwhile, through both gateways
    for gateway in replicas:
        assert gateway.nodeagent.build_gate is not None
        gateway.nodeagent.build_gate.set()
    done = await asyncio.wait_for(asyncio.gather(*calls), 60)
    for waiter in started:
        waiter.cancel()
    assert _node_builds(replicas) == 1
    assert len({d.split("/")[0] for d in done}) == 1  # one template of that name
    built = next(g for g in replicas if g.nodeagent.builds).nodeagent.builds[0].template_id
    records = replicas[1].templates
    for build_id in (d.split("/")[1] for d in done):
        record = await records.get_build(build_id)
        assert record is not None and record.status == READY and record.image_id == built
    # Both gateways' watched catalogs resolve the name to what the one node built.
    for gateway in replicas:
        catalog = TemplateCatalog(gateway.templates)
        assert await catalog.resolve("shared") == built

    # Deleted through either: the node-side template is marked retired for the nodes.
    store = await ClusterStore.connect(etcd_settings)
    try:
        await store.put_template(cluster_pb2.TemplateRecord(template_id=built))
        async with httpx.AsyncClient(base_url=replicas[0].url,
                                     headers={"X-API-Key": API_KEY}) as http:
            assert (await http.delete("/templates/shared")).status_code == 204
        assert await store.get_template(built) is None
        assert await store.get_record(RETIRED_TEMPLATES, built, cluster_pb2.TemplateRecord)
    finally:
        await store.close()


async def test_the_followers_of_a_failed_build_fail_with_its_reason(
    replicas: list[Stack],
) -> None:
    for gateway in replicas:
        gateway.nodeagent.build_gate = asyncio.Event()
    failing = AsyncTemplate().from_image("alpine:3").run_cmd("false")
    calls = [asyncio.ensure_future(_build(g, failing, "doomed")) for g in replicas]
    started = [asyncio.ensure_future(g.nodeagent.build_started.wait()) for g in replicas]
    try:
        await asyncio.wait(started, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.sleep(2.0)  # the other asks meanwhile, and follows
        for gateway in replicas:
            assert gateway.nodeagent.build_gate is not None
            gateway.nodeagent.build_gate.set()
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 60)
    finally:
        for task in calls + started:
            task.cancel()
    assert _node_builds(replicas) == 1
    for result in results:
        assert isinstance(result, BuildException)
        assert "step 1 (RUN): exited with code 1" in str(result)


async def test_a_name_asked_for_through_replicas_at_once_is_one_template(
    etcd_settings: CommonSettings,
) -> None:
    stores = [await ClusterStore.connect(etcd_settings) for _ in range(2)]
    try:
        catalogs = [TemplateCatalog(EtcdTemplateRecords(s)) for s in stores]
        asked = await asyncio.gather(*(
            catalogs[i % 2].request_build(parse_name("one"), [], cluster_pb2.Resources())
            for i in range(12)))
        assert len({template.template_id for template, _ in asked}) == 1
        template = await catalogs[0].require("one")
        assert template.build_count == 12  # no count lost to a concurrent write
        assert template.latest_build_id in {build.build_id for _, build in asked}
        # Deleted through one replica, the name is free for a new template through the other.
        assert await catalogs[1].delete("one", lambda _: False) is not None
        assert await catalogs[0].records.get_claim(NAMES, "one") is None
        again, _ = await catalogs[0].request_build(parse_name("one"), [], cluster_pb2.Resources())
        assert again.template_id != template.template_id
    finally:
        for store in stores:
            await store.close()


async def test_a_build_whose_gateway_stopped_writing_is_taken_over(
    replicas: list[Stack], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = replicas
    first.nodeagent.build_gate = asyncio.Event()
    # The first gateway's build stops writing its record, as a gateway that died would.
    monkeypatch.setattr(builds, "STALE_S", 1.0)
    monkeypatch.setattr(builds, "HEARTBEAT_S", 3600.0)
    template = AsyncTemplate().from_image("alpine:3").run_cmd("echo orphaned")
    stuck = asyncio.ensure_future(_build(first, template, "orphaned"))
    try:
        await asyncio.wait_for(first.nodeagent.build_started.wait(), 30)
        await asyncio.sleep(2.0)
        await asyncio.wait_for(_build(second, template, "orphaned"), 60)
        assert len(second.nodeagent.builds) == 1  # built again, not following the dead one
    finally:
        first.nodeagent.build_gate.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(stuck, 30)
