"""etcd restarts under a running platform (SIGKILLed, down past the node lease's TTL, started
again on its data): every service recovers by itself — no service is restarted, creates work
again, the sandbox made before is still listed and answering, the node still registered. And a
node agent stopped while etcd is down stops its VMs all the same; back, it marks their records
lost."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings
from aenv_common.errors import NotFound

from ..conftest import (
    lone_platform_env,
    netns_names,
    qemu_pids_under,
    running_platform,
)
from .conftest import FAULTS_NODE, create_once_back

pytestmark = [pytest.mark.vm, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

PREFIX = "aef" + secrets.token_hex(2) + "x"
ETCD_DOWN_S = 15.0  # past the node lease's TTL (10 s)


@pytest_asyncio.fixture(loop_scope="session")
async def lone_platform(tmp_path: Path) -> AsyncIterator[Platform]:
    """A platform of its own: a fault here must not reach the other tests' platform."""
    env = lone_platform_env(
        PREFIX, AENV_NODEAGENT_NODE_ID=FAULTS_NODE, AENV_NODEAGENT_WARM_POOL_VMS="0",
        AENV_NODEAGENT_WARM_POOL_GUESTS="0"
    )
    async with running_platform(tmp_path / "home", env, PREFIX) as platform:
        yield platform


async def test_every_service_recovers_by_itself_after_an_etcd_restart(
    lone_platform: Platform,
) -> None:
    platform = lone_platform
    services = {c.name: c for c in platform.children if c.name != "etcd"}
    made: list[str] = []
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
        try:
            before = await client.create_sandbox("base", timeout_seconds=600)
            made.append(before.sandbox_id)
            async with platform.service_down("etcd", crash=True):
                await asyncio.sleep(ETCD_DOWN_S)
            after, took_s = await create_once_back(client)
            made.append(after.sandbox_id)

            listed = {rec.sandbox_id for rec in await client.list_sandboxes()}
            assert {before.sandbox_id, after.sandbox_id} <= listed
            result = await client.run(before.sandbox_id, "echo still here")
            assert result.stdout == b"still here\n"
            store = await ClusterStore.connect(
                CommonSettings(etcd_endpoints=platform.etcd_endpoints))
            try:
                assert await store.get_node(FAULTS_NODE) is not None
            finally:
                await store.close()
            # Nobody restarted a service: the same processes, all still running.
            for name, child in services.items():
                assert child.returncode is None, name
                assert next(c for c in platform.children if c.name == name) is child
            print(f"first create after etcd came back: {took_s:.1f} s")
        finally:
            for sandbox_id in made:
                await client.kill_sandbox(sandbox_id)


async def test_a_node_agent_stopped_while_etcd_is_down_leaves_no_vm(
    lone_platform: Platform,
) -> None:
    platform = lone_platform
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
        sandbox = await client.create_sandbox("base", timeout_seconds=600)
        try:
            etcd_down = platform.service_down("etcd", crash=True)
            await etcd_down.__aenter__()
            agent_down = platform.service_down("nodeagent")  # a clean stop, etcd gone
            try:
                await agent_down.__aenter__()
                # Its exit was clean (the platform runs no cleanup for it): it stopped its VMs.
                assert qemu_pids_under(platform.home) == []
                assert netns_names(PREFIX) == []
            finally:
                await etcd_down.__aexit__(None, None, None)
                await agent_down.__aexit__(None, None, None)
            store = await ClusterStore.connect(
                CommonSettings(etcd_endpoints=platform.etcd_endpoints))
            try:  # its record, left at the stop, marked lost by the restarted agent's recovery
                record = await store.get_sandbox(sandbox.sandbox_id)
                assert record is not None and record.state == cluster_pb2.SANDBOX_STATE_LOST
            finally:
                await store.close()
            with pytest.raises(NotFound):  # the API's clear answer: it is gone
                await client.get_sandbox(sandbox.sandbox_id)
        finally:
            with contextlib.suppress(NotFound):
                await client.kill_sandbox(sandbox.sandbox_id)
