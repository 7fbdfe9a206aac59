"""One member of a 3-member etcd dies under a running platform whose services know every
member: creates, lists and the sandboxes' traffic keep working through the other two, and the
member rejoins when it is started again. The platform's own etcd is member 0 — the first the
services list, the one their channels use — and the one killed."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_common.cluster import ClusterStore
from aenv_testing.etcd_cluster import EtcdCluster
from aenv_testing.platform_ports import free_platform_ports
from aenv_testing.ports import free_port

from ..conftest import lone_platform_env, netns_names, qemu_pids_under
from .conftest import FAULTS_NODE, create_once_back

pytestmark = [pytest.mark.vm, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]


@pytest_asyncio.fixture(loop_scope="session")
async def cluster_platform(tmp_path: Path) -> AsyncIterator[tuple[Platform, EtcdCluster]]:
    prefix = "aem" + secrets.token_hex(2) + "x"
    home = tmp_path / "home"
    ports = free_platform_ports()
    etcd = EtcdCluster([(ports.etcd_client, ports.etcd_peer),
                        (free_port(), free_port()), (free_port(), free_port())])
    env = lone_platform_env(
        prefix, AENV_NODEAGENT_NODE_ID=FAULTS_NODE, AENV_NODEAGENT_WARM_POOL_VMS="0",
        AENV_NODEAGENT_WARM_POOL_GUESTS="0"
    )
    platform = Platform(home, ports, base_env=env,
                        commands={"etcd": etcd.member_argv(0, home / "etcd")})
    # The platform wires its services to its own etcd only: here they get every member.
    platform._env["AENV_ETCD_ENDPOINTS"] = etcd.endpoints
    try:
        etcd.start(1, 2)  # they wait for member 0, which the platform starts
        await platform.start()
        try:
            yield platform, etcd
        finally:
            await platform.stop()
            assert netns_names(prefix) == [] and qemu_pids_under(home) == []
    finally:
        etcd.remove()


async def test_the_platform_keeps_working_with_one_etcd_member_down(
    cluster_platform: tuple[Platform, EtcdCluster],
) -> None:
    platform, etcd = cluster_platform
    made: list[str] = []
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
        try:
            before = await client.create_sandbox("base", timeout_seconds=600)
            made.append(before.sandbox_id)
            async with platform.service_down("etcd", crash=True):  # member 0
                during, took_s = await create_once_back(client)
                made.append(during.sandbox_id)
                listed = {rec.sandbox_id for rec in await client.list_sandboxes()}
                assert {before.sandbox_id, during.sandbox_id} <= listed
                result = await client.run(before.sandbox_id, "echo still here")
                assert result.stdout == b"still here\n"
                store = await ClusterStore.connect(etcd.settings())
                try:
                    assert await store.get_node(FAULTS_NODE) is not None
                finally:
                    await store.close()
            etcd.wait_healthy(0)  # rejoined
            print(f"first create with member 0 down: {took_s:.1f} s")
        finally:
            for sandbox_id in made:
                await client.kill_sandbox(sandbox_id)
