"""Group fork and paged listing of the native API (gRPC, through aenv_client) on the single
node: one ForkSandbox call makes 3 children with one result each (running, each its own id,
with the parent's files and metadata), a count out of range is refused whole; the 4 sandboxes
are listed in pages of 3 then 1 by metadata, in the same stable order as one full listing,
none twice, and filtered by state and template; a malformed token or page size is refused."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_client import AenvError, InvalidArgument, new_idempotency_key

pytestmark = [
    pytest.mark.vm,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="session"),
]

RUNNING = cluster_pb2.SANDBOX_STATE_RUNNING
PAUSED = cluster_pb2.SANDBOX_STATE_PAUSED


async def test_group_fork_results_and_paged_listing(platform: Platform) -> None:
    run = {"e2e-fork": new_idempotency_key()}
    async with GatewayClient.for_home(platform.home, timeout_s=600) as client:
        parent = await client.create_sandbox("base", metadata=run, timeout_seconds=600)
        made = [parent.sandbox_id]
        try:
            await client.put_file(parent.sandbox_id, "/tmp/origin", b"parent")
            outcomes = await client.fork_sandbox(parent.sandbox_id, 3, timeout_seconds=600)
            errors = [o for o in outcomes if isinstance(o, AenvError)]
            assert not errors, errors
            children = [o for o in outcomes if not isinstance(o, AenvError)]
            made += [c.sandbox_id for c in children]
            assert len(set(made)) == 4
            for child in children:
                assert child.state == RUNNING and dict(child.metadata) == run
                assert await client.get_file(child.sandbox_id, "/tmp/origin") == b"parent"
            with pytest.raises(InvalidArgument):
                await client.fork_sandbox(parent.sandbox_id, 101)

            everything = await client.list_sandboxes(run)
            assert sorted(r.sandbox_id for r in everything) == sorted(made)
            first = await client.list_sandboxes_page(run, page_size=3)
            assert len(first.sandboxes) == 3 and first.next_page_token
            second = await client.list_sandboxes_page(
                run, page_size=3, page_token=first.next_page_token
            )
            assert len(second.sandboxes) == 1 and second.next_page_token == ""
            paged = [r.sandbox_id for r in [*first.sandboxes, *second.sandboxes]]
            assert paged == [r.sandbox_id for r in everything]  # one stable order, no repeats

            assert len(await client.list_sandboxes(run, states=[RUNNING])) == 4
            assert await client.list_sandboxes(run, states=[PAUSED]) == []
            assert len(await client.list_sandboxes(run, template_id="base")) == 4
            assert await client.list_sandboxes(run, template_id="no-such-template") == []
            with pytest.raises(InvalidArgument):
                await client.list_sandboxes_page(run, page_token="!not-a-token!")
            with pytest.raises(InvalidArgument):
                await client.list_sandboxes_page(run, page_size=101)
            with pytest.raises(InvalidArgument):
                await client.list_sandboxes(run, states=[cluster_pb2.SANDBOX_STATE_KILLING])
        finally:
            for sandbox_id in made:
                await client.kill_sandbox(sandbox_id)
        assert await client.list_sandboxes(run) == []
