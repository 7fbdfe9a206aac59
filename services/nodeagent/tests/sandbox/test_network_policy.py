"""A sandbox's egress policy on the node: every path that gives a sandbox a slot hands the slot
the record's whole policy (names, rules, proxy, owner), the record keeps it exactly, and an
update is all or nothing."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Internal, InvalidArgument
from aenv_nodeagent.network import EgressPolicy
from aenv_nodeagent.sandbox import fork
from aenv_nodeagent.sandbox.model import Sandbox

from .conftest import FILESYSTEM, Wing

OWNER = "key-owner"


def rich_policy() -> cluster_pb2.NetworkPolicy:
    """Names, a wildcard, a rule with a secret placeholder, a proxy, DNS servers."""
    return cluster_pb2.NetworkPolicy(
        allow_internet_access=True,
        allow_out=["api.example.com", "*.pkg.example", "198.51.100.0/24"],
        deny_out=["0.0.0.0/0", "bad.example"],
        dns_servers=["203.0.113.53"],
        rules=[cluster_pb2.NetworkRule(host="api.example.com", transforms=[
            cluster_pb2.HeaderTransform(
                set_headers={"Authorization": "Bearer ${e2b.secrets.openai}"},
                add_headers={"X-Trace": "1"}, remove_headers=["Cookie"])])],
        egress_proxy=cluster_pb2.EgressProxy(
            address="203.0.113.9:1080", username="u", sealed_password=b"\x01sealed", tls=True),
        private_traffic=True, https_ports=[8443],
    )


async def rich_sandbox(wing: Wing) -> Sandbox:
    return await wing.create(network=rich_policy(), owner_key_id=OWNER)


def applied(wing: Wing, sandbox: Sandbox) -> EgressPolicy:
    return wing.network.policies[sandbox.slot.netns]


def assert_enforces(policy: EgressPolicy, network: cluster_pb2.NetworkPolicy) -> None:
    assert policy == EgressPolicy(network, OWNER)
    assert policy.network == network  # the proto the egress process gets, whole
    assert policy.needs_proxy and policy.rules.proxy is not None
    assert policy.rules.proxy.sealed_password == b"\x01sealed"


async def test_a_create_hands_the_slot_the_whole_policy(wing: Wing) -> None:
    sandbox = await rich_sandbox(wing)
    policy = applied(wing, sandbox)
    assert_enforces(policy, rich_policy())
    assert [str(p) for p in policy.rules.allow_names] == ["api.example.com", "*.pkg.example"]
    assert [rule.host for rule in policy.rules.rules] == ["api.example.com"]


async def test_pause_resume_and_a_restart_keep_the_policy_exactly(wing: Wing) -> None:
    sandbox = await rich_sandbox(wing)
    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    await wing.settled()

    resumed = await wing.service.pauses.resume(sandbox.sandbox_id)
    assert resumed.record.network == rich_policy()
    assert_enforces(applied(wing, resumed), rich_policy())

    await wing.service.pauses.pause(sandbox.sandbox_id, FILESYSTEM)
    successor = await wing.restart()
    successor.service.takeback.load()
    again = await successor.service.pauses.resume(sandbox.sandbox_id)
    assert again.record.network == rich_policy()
    assert wing.records.records[sandbox.sandbox_id].network == rich_policy()
    assert_enforces(successor.network.policies[again.slot.netns], rich_policy())


async def test_a_reset_keeps_slot_and_policy(wing: Wing) -> None:
    sandbox = await rich_sandbox(wing)
    meta = await wing.service.snapshots.create(sandbox.sandbox_id, filesystem_only=True)
    record = await wing.service.forks.reset(sandbox.sandbox_id, meta.snapshot_id)
    assert record.network == rich_policy()
    assert_enforces(applied(wing, wing.service.registry.get(sandbox.sandbox_id)), rich_policy())


async def test_a_create_from_a_snapshot_enforces_its_own_create_policy(wing: Wing) -> None:
    parent = await rich_sandbox(wing)
    meta = await wing.service.snapshots.create(parent.sandbox_id, filesystem_only=True)
    child = await wing.create(template_id=meta.snapshot_id, network=rich_policy(),
                              owner_key_id=OWNER)
    assert child.record.network == rich_policy()
    assert_enforces(applied(wing, child), rich_policy())


def test_fork_children_get_the_parents_policy() -> None:
    parent = cluster_pb2.SandboxRecord(sandbox_id="parent", network=rich_policy())
    spec = fork._child_spec(parent, "child", "token", 60)
    assert spec.network == rich_policy()


async def test_an_update_with_a_bad_entry_changes_nothing(wing: Wing) -> None:
    sandbox = await rich_sandbox(wing)
    before, puts = applied(wing, sandbox), len(wing.records.puts)
    bad = cluster_pb2.NetworkPolicy(
        allow_internet_access=True, deny_out=["*.example.com"],
        rules=[cluster_pb2.NetworkRule(host="api.example.com", transforms=[
            cluster_pb2.HeaderTransform(set_headers={"X-A": "1"})])])
    with pytest.raises(InvalidArgument, match=r"network.rules\['api.example.com'\]: the host is "
                       "denied by network.denyOut"):
        await wing.service.changes.update_network(sandbox.sandbox_id, bad)
    assert applied(wing, sandbox) is before
    assert sandbox.record.network == rich_policy() and len(wing.records.puts) == puts


async def test_an_update_whose_record_cannot_be_stored_puts_the_old_rules_back(
    wing: Wing,
) -> None:
    sandbox = await rich_sandbox(wing)
    wing.records.put_failures.append(Internal("etcd is gone"))
    closed = cluster_pb2.NetworkPolicy(allow_internet_access=False)
    with pytest.raises(Internal):
        await wing.service.changes.update_network(sandbox.sandbox_id, closed)
    assert_enforces(applied(wing, sandbox), rich_policy())
    assert sandbox.record.network == rich_policy()


async def test_an_update_replaces_the_egress_fields_and_keeps_the_ingress_ones(
    wing: Wing,
) -> None:
    sandbox = await rich_sandbox(wing)
    names = cluster_pb2.NetworkPolicy(allow_internet_access=True, allow_out=["other.example"],
                                      deny_out=["0.0.0.0/0"])
    record = await wing.service.changes.update_network(sandbox.sandbox_id, names)
    assert list(record.network.allow_out) == ["other.example"]
    assert not record.network.rules and not record.network.HasField("egress_proxy")
    assert record.network.private_traffic and list(record.network.https_ports) == [8443]
    policy = applied(wing, sandbox)
    assert policy.owner_key_id == OWNER and policy.rules.proxy is None
    assert wing.records.records[sandbox.sandbox_id].network == record.network
