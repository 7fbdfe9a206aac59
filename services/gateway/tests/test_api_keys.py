"""Several API keys: created, listed and revoked while the gateway runs, by the admin
(configured) key only; stored as SHA-256 digests, never logged; a revoked key stops working at
once, on REST and gRPC, and the streams it opened are cut."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest

from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_gateway.keys.records import key_digest

from .conftest import API_KEY, Stack

ADMIN = {"X-API-Key": API_KEY}


async def _create(http: httpx.AsyncClient, name: str) -> dict[str, str]:
    created = await http.post("/admin/keys", headers=ADMIN, json={"name": name})
    assert created.status_code == 201, created.text
    body: dict[str, str] = created.json()
    return body


async def test_keys_are_created_listed_and_revoked_without_a_restart(
    stack: Stack, caplog: pytest.LogCaptureFixture,
) -> None:
    records = stack.gateway.api_keys
    caplog.set_level(logging.DEBUG)
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        ci, laptop = await _create(http, "ci"), await _create(http, "laptop")
        assert ci["key"] != laptop["key"] and ci["key"].startswith("e2b_")
        for key in (ci["key"], laptop["key"]):
            listed = await http.get("/v2/sandboxes", headers={"X-API-Key": key})
            assert listed.status_code == 200, listed.text
        # Stored as digests only.
        stored = {r.key_id: r for r in records.records()}
        assert stored[ci["keyID"]].sha256 == key_digest(ci["key"])
        assert all(ci["key"] not in str(r) for r in stored.values())
        shown = (await http.get("/admin/keys", headers=ADMIN)).json()
        assert [k["name"] for k in shown] == ["the configured key", "ci", "laptop"]
        assert all("key" not in k for k in shown)

        revoked = await http.delete(f"/admin/keys/{ci['keyID']}", headers=ADMIN)
        assert revoked.status_code == 204
        refused = await http.get("/v2/sandboxes", headers={"X-API-Key": ci["key"]})
        assert refused.status_code == 401
        still = await http.get("/v2/sandboxes", headers={"X-API-Key": laptop["key"]})
        assert still.status_code == 200
        assert (await http.get("/v2/sandboxes", headers=ADMIN)).status_code == 200
        again = await http.delete(f"/admin/keys/{ci['keyID']}", headers=ADMIN)
        assert again.status_code == 404
    logged = "\n".join(r.getMessage() + str(r.__dict__) for r in caplog.records)
    assert ci["key"] not in logged and laptop["key"] not in logged


async def test_only_the_admin_key_manages_keys(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        user = await _create(http, "user")
        as_user = {"X-API-Key": user["key"]}
        assert (await http.post("/admin/keys", headers=as_user, json={})).status_code == 403
        assert (await http.get("/admin/keys", headers=as_user)).status_code == 403
        delete = await http.delete(f"/admin/keys/{user['keyID']}", headers=as_user)
        assert delete.status_code == 403
        assert (await http.get("/admin/keys")).status_code == 401
        admin = await http.delete("/admin/keys/admin", headers=ADMIN)
        assert admin.status_code == 400  # the configured key is not revoked here


async def test_a_revoked_key_stops_working_on_grpc(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        key = await _create(http, "grpc")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.gateway.grpc_port}") as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)  # type: ignore[no-untyped-call]
            metadata = (("x-api-key", key["key"]),)
            await stub.ListSandboxes(gateway_pb2.ListSandboxesRequest(), metadata=metadata)
            assert (await http.delete(f"/admin/keys/{key['keyID']}", headers=ADMIN)).status_code \
                == 204
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.ListSandboxes(gateway_pb2.ListSandboxesRequest(), metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_revoking_a_key_cuts_the_streams_it_opened(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=10) as http:
        key = await _create(http, "streams")
        created = await http.post("/v2/sandboxes", headers=ADMIN, json={"templateID": "base"})
        sandbox_id = created.json()["sandboxID"]
        other = await _create(http, "other")
        headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": str(stack.guest_port)}

        async def open_stream(api_key: str) -> tuple[httpx.Response, AsyncIterator[str]]:
            request = http.build_request("GET", "/stream",
                                         headers={**headers, "X-API-Key": api_key})
            response = await http.send(request, stream=True)
            lines = response.aiter_lines()
            assert await anext(lines) == "first"
            return response, lines

        revoked_stream, revoked_lines = await open_stream(key["key"])
        kept_stream, kept_lines = await open_stream(other["key"])
        assert (await http.delete(f"/admin/keys/{key['keyID']}", headers=ADMIN)).status_code \
            == 204
        stack.guest.release.set()
        # The revoked key's stream ends at once (cut mid-body); the other key's flows on.
        with pytest.raises(httpx.HTTPError):
            async with asyncio.timeout(5):
                async for _ in revoked_lines:
                    pass
        async with asyncio.timeout(5):
            assert await anext(kept_lines) == "second"
        await revoked_stream.aclose()
        await kept_stream.aclose()
