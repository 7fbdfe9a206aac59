"""E2B's lifecycle webhooks on the real platform: a webhook registered over HTTP with E2B's own
JSON receives `sandbox.lifecycle.created` and `sandbox.lifecycle.killed` of a sandbox the
unmodified `e2b` SDK creates and kills, each signed as E2B's docs verify, and the delivery log
shows them; deleted, it gets nothing more. The receiver is a real HTTP server on loopback (the
test platform allows private webhook targets)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from e2b import AsyncSandbox

from aenv_cli.platform import Platform
from aenv_testing.webhook_receiver import Receiver, serving

from .conftest import until

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]

CREATED, KILLED = "sandbox.lifecycle.created", "sandbox.lifecycle.killed"
SECRET = "e2e-webhook-secret"


async def test_a_webhook_gets_the_created_and_killed_of_an_sdk_sandbox(
    platform: Platform, sdk_env: None
) -> None:
    headers = {"X-API-Key": platform.api_key}
    async with serving(Receiver()) as receiver, httpx.AsyncClient(
            base_url=platform.api_url, headers=headers, timeout=30) as http:
        registered = await http.post("/events/webhooks", json={
            "name": "e2e", "url": receiver.url, "enabled": True,
            "events": [CREATED, KILLED], "signatureSecret": SECRET})
        assert registered.status_code == 201, registered.text
        hook = registered.json()
        try:
            sandbox = await AsyncSandbox.create(timeout=120)
            try:
                assert (await sandbox.commands.run("echo up")).stdout.strip() == "up"
            finally:
                await sandbox.kill()

            def mine() -> list[dict[str, object]]:
                return [d for d in receiver.accepted() if d["sandboxId"] == sandbox.sandbox_id]

            async def both() -> bool:
                return {d["type"] for d in mine()} >= {CREATED, KILLED}

            await until(both, 60, "created and killed at the receiver")
            assert [d["type"] for d in mine()][:1] == [CREATED]
            assert receiver.unsigned(SECRET) == []
            assert all(h["e2b-webhook-id"] == hook["id"] for h, _, _ in receiver.requests)
            logged = (await http.get(f"/events/webhooks/{hook['id']}/deliveries")).json()
            delivered = {d["eventId"] for d in logged if d["delivered"]}
            assert {d["id"] for d in mine()} <= delivered
        finally:
            gone = await http.delete(f"/events/webhooks/{hook['id']}")
            assert gone.status_code == 200
            seen = len(receiver.requests)
            other = await AsyncSandbox.create(timeout=60)
            await other.kill()
            assert (await http.get(f"/events/webhooks/{hook['id']}")).status_code == 404
            await asyncio.sleep(3)  # what a webhook still registered would have been sent by now
            assert receiver.requests[seen:] == []
