"""Switching a real slot between IP-only and by-name policies: one nft transaction each way,
the egress process attached before the redirect exists and detached after it is gone, and an
IP-only policy back to exactly the ruleset it had (no redirect, no sets)."""

from __future__ import annotations

import asyncio
import random
import string
from collections.abc import AsyncIterator

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkConfig, NetworkManager
from aenv_nodeagent.network.firewall import EgressPorts
from aenv_nodeagent.network.nft import NftError, run_nft
from aenv_testing.subnets import free_subnet

from ..network.helpers import in_netns, remove_everything_named

pytestmark = pytest.mark.netns

IP_ONLY = EgressPolicy(cluster_pb2.NetworkPolicy(
    allow_internet_access=True, deny_out=["198.51.100.0/24"]))
BY_NAME = EgressPolicy(cluster_pb2.NetworkPolicy(
    allow_internet_access=False, allow_out=["allowed.example.com"]), owner_key_id="k1")
BY_OTHER_NAME = EgressPolicy(cluster_pb2.NetworkPolicy(
    allow_internet_access=False, allow_out=["*.example.org"]), owner_key_id="k1")


class RecordingEgress:
    """Stands in for the egress supervisor; notes each call with what nft held at that time."""

    def __init__(self, slot_netns: list[str]) -> None:
        self.calls: list[tuple[str, str, bool]] = []  # (op, netns, redirect present)
        self._netns = slot_netns
        self.fail_attach = False

    @property
    def ports(self) -> EgressPorts:
        return EgressPorts()

    async def attach(self, netns: str, owner_key_id: str,
                     policy: cluster_pb2.NetworkPolicy) -> None:
        if self.fail_attach:
            raise OSError("attach refused")
        self.calls.append(("attach", netns, await _redirects(netns)))

    async def update(self, netns: str, policy: cluster_pb2.NetworkPolicy) -> None:
        self.calls.append(("update", netns, await _redirects(netns)))

    async def detach(self, netns: str) -> None:
        self.calls.append(("detach", netns, await _redirects(netns)))


async def _ruleset(netns: str) -> str:
    return str(await in_netns(netns, lambda: run_nft("list table inet aenv")))


async def _redirects(netns: str) -> bool:
    try:
        return "redirect" in await _ruleset(netns)
    except NftError:  # the slot is being built or is gone
        return False


@pytest.fixture
async def built() -> AsyncIterator[tuple[NetworkManager, RecordingEgress, NetSlot]]:
    prefix = "p3s" + "".join(random.choices(string.ascii_lowercase, k=4))
    config = NetworkConfig(prefix=prefix, pool_cidr=free_subnet(28))
    egress = RecordingEgress([])
    manager = NetworkManager(config, egress=egress)
    try:
        slot = await manager.create_slot(IP_ONLY)
        yield manager, egress, slot
    finally:
        await manager.destroy_orphans(keep=set())
        assert not await asyncio.to_thread(remove_everything_named, prefix)


async def test_switching_to_names_and_back_restores_the_ip_only_ruleset(
    built: tuple[NetworkManager, RecordingEgress, NetSlot],
) -> None:
    manager, egress, slot = built
    ip_only = await _ruleset(slot.netns)
    assert "redirect" not in ip_only and "resolved4" not in ip_only
    assert egress.calls == []  # an IP-only slot never involves the egress process

    await manager.update_policy(slot, BY_NAME)
    by_name = await _ruleset(slot.netns)
    assert 'th dport 53 redirect to :15053' in by_name
    assert "meta l4proto tcp redirect to :15001" in by_name
    assert "ct status dnat meta l4proto { tcp, udp } th dport { 15001, 15053 } accept" in by_name
    assert "ip daddr @resolved4 accept" in by_name
    assert "set resolved4" in by_name and "flags timeout" in by_name
    # Attached while nothing redirected yet: no guest connection lands on a missing listener.
    assert egress.calls == [("attach", slot.netns, False)]

    await manager.update_policy(slot, BY_OTHER_NAME)
    assert egress.calls[-1] == ("update", slot.netns, True)

    await manager.update_policy(slot, IP_ONLY)
    assert egress.calls[-1] == ("detach", slot.netns, False)  # after the redirect went
    assert await _ruleset(slot.netns) == ip_only

    await manager.update_policy(slot, BY_NAME)
    await manager.destroy_slot(slot)
    assert egress.calls[-1][:2] == ("detach", slot.netns)


async def test_a_failed_attach_leaves_the_old_rules(
    built: tuple[NetworkManager, RecordingEgress, NetSlot],
) -> None:
    manager, egress, slot = built
    before = await _ruleset(slot.netns)
    egress.fail_attach = True
    with pytest.raises(OSError):
        await manager.update_policy(slot, BY_NAME)
    assert await _ruleset(slot.netns) == before
    egress.fail_attach = False
    await manager.update_policy(slot, BY_NAME)  # not mistaken for applied: it really applies
    assert "redirect" in await _ruleset(slot.netns)


async def test_a_by_name_slot_is_built_attached(
    built: tuple[NetworkManager, RecordingEgress, NetSlot],
) -> None:
    manager, egress, _ = built
    slot = await manager.create_slot(BY_NAME)
    assert "redirect to :15001" in await _ruleset(slot.netns)
    assert egress.calls == [("attach", slot.netns, True)]
    await manager.destroy_slot(slot)


async def test_a_restarted_agent_restores_what_it_finds_whatever_the_slot_holds(
    built: tuple[NetworkManager, RecordingEgress, NetSlot],
) -> None:
    manager, _, slot = built
    ip_only = await _ruleset(slot.netns)
    await NetworkManager(manager.config).restore_policy(slot, IP_ONLY)  # no sets to remove
    assert await _ruleset(slot.netns) == ip_only
    await manager.update_policy(slot, BY_NAME)
    by_name = await _ruleset(slot.netns)
    # The next agent knows nothing of what the last one applied: it rewrites and re-attaches.
    egress = RecordingEgress([])
    successor = NetworkManager(manager.config, egress=egress)
    await successor.restore_policy(slot, BY_NAME)
    assert await _ruleset(slot.netns) == by_name
    assert egress.calls == [("attach", slot.netns, True)]  # its redirect never went away
    await NetworkManager(manager.config, egress=egress).restore_policy(slot, IP_ONLY)
    assert await _ruleset(slot.netns) == ip_only
    assert egress.calls[-1] == ("detach", slot.netns, False)
