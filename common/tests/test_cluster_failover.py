"""A cluster store configured with every member of a real 3-member etcd keeps working when the
member it is connected to dies: writes, reads, lists and a node's lease keep-alive go on
through another member (before, the store held one member's channel and failed until that
member came back)."""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.cluster import ClusterStore
from aenv_common.cluster.registration import NodeRegistration
from aenv_common.cluster.target import grpc_target
from aenv_common.config import CommonSettings
from aenv_common.errors import AenvError, Unavailable
from aenv_testing.etcd_cluster import EtcdCluster, etcd_cluster

__all__ = ["etcd_cluster"]  # the fixture

FAILOVER_S = 20.0  # a new leader is elected in ~1 s; the channel moves on its next call


def test_every_endpoint_is_one_target() -> None:
    assert grpc_target([("10.0.0.1", 2379)]) == ("10.0.0.1", 2379)
    assert grpc_target([("etcd", 2379)]) == ("etcd", 2379)  # gRPC resolves it, again and again
    host, port = grpc_target([("10.0.0.1", 2379), ("localhost", 2479), ("10.0.0.3", 2579)])
    assert f"{host}:{port}" == "ipv4:10.0.0.1:2379,127.0.0.1:2479,10.0.0.3:2579"


async def test_an_unresolvable_member_name_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unresolvable(host: str) -> str:  # no lookup leaves the host
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: Name or service not known")

    monkeypatch.setattr(socket, "gethostbyname", unresolvable)
    settings = CommonSettings(etcd_endpoints="127.0.0.1:1,etcd-member-b:2379")
    with pytest.raises(Unavailable, match="etcd-member-b: Name or service not known"):
        await ClusterStore.connect(settings)


async def _eventually(call: Callable[[], Awaitable[object]], what: str) -> float:
    started = time.monotonic()
    while True:
        try:
            await call()
            return time.monotonic() - started
        except AenvError:
            assert time.monotonic() - started < FAILOVER_S, f"not within {FAILOVER_S} s: {what}"
            await asyncio.sleep(0.2)


@pytest.mark.etcd
async def test_the_store_outlives_the_member_it_was_connected_to(
    etcd_cluster: EtcdCluster,
) -> None:
    store = await ClusterStore.connect(
        etcd_cluster.settings(prefix=f"/aenv-test/{uuid.uuid4().hex}/v1")
    )
    node = cluster_pb2.NodeRecord(node_id="n1", nodeagent_address="127.0.0.1:1")
    registration = NodeRegistration(store, lambda: node, ttl=4)
    try:
        await registration.start()
        await store.put_sandbox(cluster_pb2.SandboxRecord(sandbox_id="s1", node_id="n1"))
        etcd_cluster.kill(0)  # listed first: the member the store's channel uses

        took = await _eventually(
            lambda: store.put_sandbox(cluster_pb2.SandboxRecord(sandbox_id="s2", node_id="n1")),
            "a write",
        )
        assert {rec.sandbox_id for rec in await store.list_sandboxes()} == {"s1", "s2"}
        await asyncio.sleep(6)  # past the lease's TTL: its keep-alives went to another member
        assert await store.get_node("n1") is not None
        print(f"first write after the member died: {took:.1f} s")
    finally:
        await registration.stop()
        await store.close()
