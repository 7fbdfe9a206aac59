from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2_grpc
from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_common.grpc_server import start_grpc_server
from aenv_gateway.cluster.directory import InMemoryClusterView
from aenv_gateway.config import GatewaySettings
from aenv_gateway.core.idempotency import KeyClaims
from aenv_gateway.core.templates.records import InMemoryTemplateRecords, TemplateRecords
from aenv_gateway.server import RunningGateway, start_gateway

from .fakes import NODE_ID, FakeNodeAgent, FakeScheduler
from .upstreams import GuestApp, MiniNodeProxy, serve

API_KEY = "e2b_" + "0123456789abcdef" * 2 + "01234567"


@dataclass
class Stack:
    gateway: RunningGateway
    view: InMemoryClusterView
    scheduler: FakeScheduler
    nodeagent: FakeNodeAgent
    guest: GuestApp
    guest_port: int
    templates: TemplateRecords

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gateway.http_port}"


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async with running_stack() as running:
        yield running


@contextlib.asynccontextmanager
async def running_stack(**settings: Any) -> AsyncIterator[Stack]:
    """A gateway over fake scheduler and node agent; `settings` add to its GatewaySettings."""
    async with stack_over(InMemoryTemplateRecords(), **settings) as running:
        yield running


@contextlib.asynccontextmanager
async def stack_over(
    records: TemplateRecords, key_claims: KeyClaims | None = None, **settings: Any
) -> AsyncIterator[Stack]:
    """`running_stack` with the template catalog kept in `records` (and the idempotency keys
    in `key_claims`)."""
    view = InMemoryClusterView()
    guest = GuestApp()
    async with contextlib.AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession(auto_decompress=False))
        guest_port = await stack.enter_async_context(serve(guest.app))
        proxy_port = await stack.enter_async_context(serve(MiniNodeProxy(session)))
        templates = {"base"}
        nodeagent = FakeNodeAgent(view, templates)
        na_server, na_port = await start_grpc_server(
            "127.0.0.1:0",
            [
                (
                    nodeagent_pb2_grpc.add_NodeAgentServiceServicer_to_server,
                    nodeagent,
                    "aenv.nodeagent.v1.NodeAgentService",
                )
            ],
        )
        stack.push_async_callback(na_server.stop, None)
        na_address = f"127.0.0.1:{na_port}"
        view.node_records[NODE_ID] = cluster_pb2.NodeRecord(
            node_id=NODE_ID, nodeagent_address=na_address, proxy_address=f"127.0.0.1:{proxy_port}"
        )
        scheduler = FakeScheduler(
            templates,
            scheduler_pb2.Placement(
                node_id=NODE_ID,
                nodeagent_address=na_address,
                proxy_address=f"127.0.0.1:{proxy_port}",
            ),
        )
        sch_server, sch_port = await start_grpc_server(
            "127.0.0.1:0",
            [
                (
                    scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server,
                    scheduler,
                    "aenv.scheduler.v1.SchedulerService",
                )
            ],
        )
        stack.push_async_callback(sch_server.stop, None)
        gateway_settings = GatewaySettings(
            listen="127.0.0.1:0",
            grpc_listen="127.0.0.1:0",
            scheduler_address=f"127.0.0.1:{sch_port}",
            domain="aenv.test",
            **settings,
        )
        gateway = await start_gateway(
            gateway_settings, view, records, API_KEY, key_claims=key_claims
        )
        stack.push_async_callback(gateway.stop)
        yield Stack(gateway, view, scheduler, nodeagent, guest, guest_port, records)


@pytest.fixture
def e2b_env(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Stack:
    monkeypatch.setenv("E2B_API_KEY", API_KEY)
    monkeypatch.setenv("E2B_API_URL", stack.url)
    monkeypatch.setenv("E2B_SANDBOX_URL", stack.url)
    monkeypatch.delenv("E2B_DEBUG", raising=False)
    return stack
