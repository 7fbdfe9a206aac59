"""A sandbox created under an experiment lease keeps the lease's expiry action on its record,
read from the lease's record at its create: an agent that was down when the lease lapsed
still knows whether to pause or kill it."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2 as c
from aenv_common.errors import Unavailable
from aenv_common.leases import KILL, LEASES, PAUSE
from aenv_nodeagent.leases import WingSandboxes

from .conftest import Wing

UNSPECIFIED = c.LEASE_EXPIRY_ACTION_UNSPECIFIED


async def _lease(wing: Wing, lease_id: str, action: int) -> None:
    await wing.records.put_record(LEASES, lease_id, c.LeaseRecord(
        lease_id=lease_id, on_expiry=action))  # type: ignore[arg-type]


@pytest.mark.parametrize("action", [PAUSE, KILL])
async def test_the_lease_s_action_is_on_the_published_record(wing: Wing, action: int) -> None:
    await _lease(wing, "lease-a", action)
    sandbox = await wing.create(lease_id="lease-a")
    assert sandbox.record.lease_on_expiry == action
    published = wing.records.records[sandbox.sandbox_id]
    assert (published.lease_id, published.lease_on_expiry) == ("lease-a", action)


async def test_no_lease_or_a_lease_gone_already_keeps_no_action(wing: Wing) -> None:
    unleased = await wing.create()
    orphan = await wing.create(lease_id="lease-gone")
    for sandbox in (unleased, orphan):
        assert wing.records.records[sandbox.sandbox_id].lease_on_expiry == UNSPECIFIED


async def test_a_lease_etcd_cannot_read_fails_the_create_leaving_nothing(
    wing: Wing, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def unavailable(*_: object) -> None:
        raise Unavailable("etcd unavailable")

    monkeypatch.setattr(wing.records, "get_record", unavailable)
    spec = wing.spec(lease_id="lease-a")
    with pytest.raises(Unavailable):
        await wing.service.creates.create(spec)
    assert not wing.service.registry.has(spec.sandbox_id)
    assert spec.sandbox_id not in wing.records.records


async def test_a_paused_sandbox_detached_from_its_lapsed_lease_forgets_its_action(
    wing: Wing,
) -> None:
    await _lease(wing, "lease-p", PAUSE)
    sandbox = await wing.create(lease_id="lease-p")
    sandboxes = WingSandboxes(wing.service, wing.records)
    await sandboxes.pause(sandbox.sandbox_id, detail="lease lease-p lapsed")
    await sandboxes.detach(sandbox.sandbox_id, "lease-p")
    published = wing.records.records[sandbox.sandbox_id]
    assert (published.lease_id, published.lease_on_expiry) == ("", UNSPECIFIED)
