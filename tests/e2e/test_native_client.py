"""The native client (aenv_client) against the single node: a batch create of 4 real sandboxes,
the same call sent again with its idempotency key answering the same 4, a sandbox killed by
another caller reported as SandboxDied, and the rest killed."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_client import AenvError, NotFound, SandboxDied, new_idempotency_key

pytestmark = [pytest.mark.vm, pytest.mark.etcd, pytest.mark.netns,
              pytest.mark.asyncio(loop_scope="session")]


def _made(outcomes: list[cluster_pb2.SandboxRecord | AenvError]) -> list[str]:
    errors = [o for o in outcomes if isinstance(o, AenvError)]
    assert not errors, errors
    return [o.sandbox_id for o in outcomes if not isinstance(o, AenvError)]


async def test_batch_create_is_idempotent_and_deaths_are_told_apart(platform: Platform) -> None:
    key = new_idempotency_key()
    run = {"e2e": key}
    async with GatewayClient.for_home(platform.home, timeout_s=300) as client:
        ids: list[str] = []
        try:
            ids = _made(await client.create_sandboxes(
                "base", count=4, metadata=run, timeout_seconds=300, idempotency_key=key))
            assert len(set(ids)) == 4
            again = _made(await client.create_sandboxes(
                "base", count=4, metadata=run, timeout_seconds=300, idempotency_key=key))
            assert again == ids
            listed = await client.list_sandboxes(run)
            assert sorted(r.sandbox_id for r in listed) == sorted(ids)
            for sandbox_id in ids:
                record = await client.get_sandbox(sandbox_id)
                assert record.state == cluster_pb2.SANDBOX_STATE_RUNNING

            async with GatewayClient.for_home(platform.home) as other:
                await other.kill_sandbox(ids[0])
            with pytest.raises(SandboxDied):
                await client.get_sandbox(ids[0])
        finally:
            for sandbox_id in ids[1:]:
                await client.kill_sandbox(sandbox_id)
        for sandbox_id in ids:
            with pytest.raises(NotFound) as gone:
                await client.get_sandbox(sandbox_id)
            assert type(gone.value) is NotFound  # killed by us, or already reported dead
        assert await client.list_sandboxes(run) == []
