"""Native gRPC API (same SandboxService as REST) and the API key file."""

from __future__ import annotations

import stat
from pathlib import Path

import grpc
import pytest

from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_gateway.keys.auth import load_or_create_api_key

from .conftest import API_KEY, Stack


async def test_grpc_create_get_list_kill(stack: Stack) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
        md = (("x-api-key", API_KEY),)
        created = await stub.CreateSandbox(
            gateway_pb2.CreateSandboxRequest(template_id="base", metadata={"a": "b"}), metadata=md
        )
        sid = created.sandbox.sandbox_id
        assert stack.nodeagent.specs[-1].timeout_seconds == 300
        got = await stub.GetSandbox(gateway_pb2.GetSandboxRequest(sandbox_id=sid), metadata=md)
        assert got.sandbox.template_id == "base"
        listed = await stub.ListSandboxes(
            gateway_pb2.ListSandboxesRequest(metadata={"a": "b"}), metadata=md
        )
        assert [s.sandbox_id for s in listed.sandboxes] == [sid]
        await stub.KillSandbox(gateway_pb2.KillSandboxRequest(sandbox_id=sid), metadata=md)
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await stub.GetSandbox(gateway_pb2.GetSandboxRequest(sandbox_id=sid), metadata=md)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        with pytest.raises(grpc.aio.AioRpcError) as unauth:
            await stub.ListSandboxes(
                gateway_pb2.ListSandboxesRequest(), metadata=(("x-api-key", "no"),)
            )
        assert unauth.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_api_key_created_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "home" / "api-key"
    key = load_or_create_api_key(path)
    assert key.startswith("e2b_") and len(key) == 44
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_api_key(path) == key
