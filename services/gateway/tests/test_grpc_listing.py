"""ListSandboxes on gRPC: pages in one stable order (newest first) with no repeats, the state
and template filters, and the malformed queries it refuses; a fork child's error names its
gRPC status."""

from __future__ import annotations

import grpc
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc

from .conftest import API_KEY, Stack

MD = (("x-api-key", API_KEY),)


async def test_pages_filters_and_refusals(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        made = []
        for _ in range(5):
            created = await stub.CreateSandbox(
                gateway_pb2.CreateSandboxRequest(template_id="base", metadata={"run": "p"}),
                metadata=MD,
            )
            made.append(created.sandbox.sandbox_id)

        async def page(
            token: str,
            states: list[cluster_pb2.SandboxState] | None = None,
            template_id: str = "",
        ) -> gateway_pb2.ListSandboxesResponse:
            request = gateway_pb2.ListSandboxesRequest(
                metadata={"run": "p"},
                page_size=2,
                page_token=token,
                states=states,
                template_id=template_id,
            )
            reply: gateway_pb2.ListSandboxesResponse = await stub.ListSandboxes(
                request, metadata=MD
            )
            return reply

        whole = await stub.ListSandboxes(
            gateway_pb2.ListSandboxesRequest(metadata={"run": "p"}), metadata=MD
        )
        assert whole.next_page_token == "" and len(whole.sandboxes) == 5
        paged: list[str] = []
        token = ""
        while True:
            reply = await page(token)
            assert len(reply.sandboxes) <= 2
            paged += [s.sandbox_id for s in reply.sandboxes]
            if not (token := reply.next_page_token):
                break
        assert paged == [s.sandbox_id for s in whole.sandboxes]
        assert sorted(paged) == sorted(made)

        paused = await page("", states=[cluster_pb2.SANDBOX_STATE_PAUSED])
        assert list(paused.sandboxes) == []
        other = await page("", template_id="other")
        assert list(other.sandboxes) == []
        for bad in (
            gateway_pb2.ListSandboxesRequest(page_token="%%%"),
            gateway_pb2.ListSandboxesRequest(page_size=101),
            gateway_pb2.ListSandboxesRequest(states=[cluster_pb2.SANDBOX_STATE_LOST]),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ListSandboxes(bad, metadata=MD)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_fork_childs_error_names_its_status(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        parent = await stub.CreateSandbox(
            gateway_pb2.CreateSandboxRequest(template_id="base"), metadata=MD
        )
        forked = await stub.ForkSandbox(
            gateway_pb2.ForkSandboxRequest(sandbox_id=parent.sandbox.sandbox_id, count=3),
            metadata=MD,
        )
        made, failed, again = forked.results
        assert made.HasField("sandbox") and again.HasField("sandbox")
        assert (failed.error.code, failed.error.status) == (503, "UNAVAILABLE")
