"""Exec, PutFile and GetFile on gRPC refuse what never reaches envd: a first message that is not
`start`, no sandbox or path, an unknown sandbox (NOT_FOUND) and a paused one
(FAILED_PRECONDITION). What envd does with the rest is tested end to end on a real guest
(tests/e2e/test_native_exec_files.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest

from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc

from .conftest import API_KEY, Stack

MD = (("x-api-key", API_KEY),)


async def _exec_status(
    stub: gateway_pb2_grpc.GatewayServiceStub, first: gateway_pb2.ExecRequest
) -> grpc.StatusCode:
    call = stub.Exec(metadata=MD)
    await call.write(first)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call.read()
    code: grpc.StatusCode = refused.value.code()
    return code


async def _put_status(
    stub: gateway_pb2_grpc.GatewayServiceStub, requests: list[gateway_pb2.PutFileRequest]
) -> grpc.StatusCode:
    async def stream() -> AsyncIterator[gateway_pb2.PutFileRequest]:
        for request in requests:
            yield request

    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.PutFile(stream(), metadata=MD)
    code: grpc.StatusCode = refused.value.code()
    return code


async def _get_status(
    stub: gateway_pb2_grpc.GatewayServiceStub, target: gateway_pb2.FileTarget
) -> grpc.StatusCode:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async for _ in stub.GetFile(gateway_pb2.GetFileRequest(file=target), metadata=MD):
            pass
    code: grpc.StatusCode = refused.value.code()
    return code


async def test_refusals_before_envd(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        created = await stub.CreateSandbox(
            gateway_pb2.CreateSandboxRequest(template_id="base"), metadata=MD
        )
        sid = created.sandbox.sandbox_id

        def start(sandbox_id: str) -> gateway_pb2.ExecRequest:
            return gateway_pb2.ExecRequest(
                start=gateway_pb2.ExecStart(sandbox_id=sandbox_id, cmd="/bin/true")
            )

        invalid = grpc.StatusCode.INVALID_ARGUMENT
        assert await _exec_status(stub, gateway_pb2.ExecRequest(stdin=b"x")) == invalid
        assert await _exec_status(stub, start("")) == invalid
        assert await _exec_status(stub, start("nope")) == grpc.StatusCode.NOT_FOUND
        data = gateway_pb2.PutFileRequest(data=b"x")
        assert await _put_status(stub, [data]) == invalid
        no_path = gateway_pb2.PutFileRequest(start=gateway_pb2.FileTarget(sandbox_id=sid))
        assert await _put_status(stub, [no_path, data]) == invalid
        assert await _get_status(stub, gateway_pb2.FileTarget(sandbox_id=sid)) == invalid
        unknown = gateway_pb2.FileTarget(sandbox_id="nope", path="/etc/hostname")
        assert await _get_status(stub, unknown) == grpc.StatusCode.NOT_FOUND

        await stub.PauseSandbox(gateway_pb2.PauseSandboxRequest(sandbox_id=sid), metadata=MD)
        paused = grpc.StatusCode.FAILED_PRECONDITION
        assert await _exec_status(stub, start(sid)) == paused
        target = gateway_pb2.FileTarget(sandbox_id=sid, path="/etc/hostname")
        assert await _get_status(stub, target) == paused
        with pytest.raises(grpc.aio.AioRpcError) as unauth:
            call = stub.Exec(metadata=(("x-api-key", "no"),))
            await call.write(start(sid))
            await call.read()
        assert unauth.value.code() == grpc.StatusCode.UNAUTHENTICATED
