"""A restarted node agent enforces each adopted sandbox's recorded egress policy again."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Internal
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkConfig, NetworkManager
from aenv_nodeagent.network.slots import slot_for
from aenv_nodeagent.restart.recovery import Adopted, restore_egress


class RecordingNetwork:
    def __init__(self, failing: set[str]) -> None:
        self.restored: list[tuple[str, EgressPolicy]] = []
        self._failing = failing

    async def restore_policy(self, slot: NetSlot, policy: EgressPolicy) -> None:
        if slot.netns in self._failing:
            raise Internal("nft refused")
        self.restored.append((slot.netns, policy))


def adopted(index: int, network: cluster_pb2.NetworkPolicy, owner: str) -> Adopted:
    record = cluster_pb2.SandboxRecord(sandbox_id=f"sb{index}", network=network,
                                       owner_key_id=owner)
    return Adopted(record, Path("/nonexistent"), slot_for(NetworkConfig(), index),
                   cast(Any, None))


async def test_each_adopted_policy_is_restored_and_a_failure_stops_no_other() -> None:
    by_name = cluster_pb2.NetworkPolicy(allow_out=["api.example.com"],
                                        rules=[cluster_pb2.NetworkRule(host="api.example.com")])
    ip_only = cluster_pb2.NetworkPolicy(allow_internet_access=True, deny_out=["192.0.2.0/24"])
    found = [adopted(1, by_name, "key-a"), adopted(2, ip_only, "key-b"),
             adopted(3, ip_only, "key-c")]
    network = RecordingNetwork(failing={"aenv-2"})
    await restore_egress(found, cast(NetworkManager, network))
    assert [(netns, p.owner_key_id, p.needs_proxy) for netns, p in network.restored] == [
        ("aenv-1", "key-a", True), ("aenv-3", "key-c", False)]
    assert network.restored[0][1].network == by_name
