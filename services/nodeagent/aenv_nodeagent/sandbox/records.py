"""A sandbox's cluster record: where records are published, and how one is made and checked
from a request."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import InvalidArgument
from aenv_common.ids import is_valid_sandbox_id
from aenv_common.leases import LEASES, expiry_action
from aenv_common.limits import DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S
from aenv_nodeagent.network import EgressPolicy
from aenv_nodeagent.templates import TemplateSnapshot
from aenv_nodeagent.volumes import check_mounts

M = TypeVar("M", bound=Message)
NO_LEASE_ACTION = cluster_pb2.LEASE_EXPIRY_ACTION_UNSPECIFIED


class SandboxRecords(Protocol):
    """Where sandbox records are published (etcd in production); this node is their only writer."""

    async def put_sandbox(self, rec: cluster_pb2.SandboxRecord) -> object: ...
    async def delete_sandbox(self, sandbox_id: str) -> None: ...


class ClusterRecords(SandboxRecords, Protocol):
    """The cluster state a claim of a paused sandbox reads and swaps
    (snapshots/paused_claims.py)."""

    async def get_sandbox(self, sandbox_id: str) -> cluster_pb2.SandboxRecord | None: ...

    async def update_sandbox(
        self, sandbox_id: str, mutate: Callable[[cluster_pb2.SandboxRecord], None]
    ) -> cluster_pb2.SandboxRecord: ...

    async def get_node(self, node_id: str) -> cluster_pb2.NodeRecord | None: ...

    async def get_record(self, kind: str, record_id: str, record_type: type[M]) -> M | None: ...


async def lease_on_expiry(
    records: ClusterRecords, lease_id: str
) -> cluster_pb2.LeaseExpiryAction:
    """What the lapse of `lease_id` will do to a sandbox created under it, kept on the sandbox's
    record so that an agent that was down when the lease lapsed still knows. Unspecified: no
    lease, or one gone already (the reaper's default then applies).

    :raise Unavailable: etcd did not answer.
    """
    if not lease_id:
        return NO_LEASE_ACTION
    lease = await records.get_record(LEASES, lease_id, cluster_pb2.LeaseRecord)
    return expiry_action(lease.on_expiry) if lease is not None else NO_LEASE_ACTION


def timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def end_at(timeout_s: int) -> Timestamp:
    """When a sandbox given `timeout_s` (0: the default) from now expires."""
    return timestamp(time.time() + (timeout_s or DEFAULT_TIMEOUT_S))


def egress_policy(net: cluster_pb2.NetworkPolicy, owner_key_id: str) -> EgressPolicy:
    """What a sandbox's slot enforces (a copy: later edits of the record do not leak into it).

    :raise InvalidArgument: the policy holds an entry no node may enforce.
    """
    network = cluster_pb2.NetworkPolicy()
    network.CopyFrom(net)
    return EgressPolicy(network, owner_key_id)


def validate_spec(spec: cluster_pb2.SandboxSpec) -> None:
    """:raise InvalidArgument: the id, template, timeout or a volume mount is not one a sandbox
    may have."""
    if not is_valid_sandbox_id(spec.sandbox_id):
        raise InvalidArgument(f"invalid sandbox id {spec.sandbox_id!r}")
    if not spec.template_id:
        raise InvalidArgument("templateID is required")
    if spec.timeout_seconds > MAX_TIMEOUT_S:
        raise InvalidArgument(f"timeout must be at most {MAX_TIMEOUT_S} seconds")
    check_mounts(spec.volume_mounts)


def check_resources(spec: cluster_pb2.SandboxSpec, template: TemplateSnapshot) -> None:
    """A restore maps the template's RAM as it is: a sandbox has exactly the template's size.

    :raise InvalidArgument: the spec asks for another size.
    """
    asked = spec.resources
    if asked.vcpus and asked.vcpus != template.vcpus:
        raise InvalidArgument(f"template '{template.template_id}' has {template.vcpus} vCPUs")
    if asked.memory_mib and asked.memory_mib != template.memory_mib:
        raise InvalidArgument(
            f"template '{template.template_id}' has {template.memory_mib} MiB of memory"
        )


def new_record(
    spec: cluster_pb2.SandboxSpec, node_id: str, template: TemplateSnapshot, envd_version: str
) -> cluster_pb2.SandboxRecord:
    """The record of a sandbox made from `spec` on this node, running from now."""
    now = time.time()
    return cluster_pb2.SandboxRecord(
        sandbox_id=spec.sandbox_id,
        node_id=node_id,
        template_id=spec.template_id,
        state=cluster_pb2.SANDBOX_STATE_RUNNING,
        resources=cluster_pb2.Resources(
            vcpus=template.vcpus, memory_mib=template.memory_mib, disk_mib=template.disk_mib
        ),
        metadata=dict(spec.metadata),
        started_at=timestamp(now),
        end_at=end_at(spec.timeout_seconds),
        envd_access_token=spec.envd_access_token,
        envd_version=envd_version,
        alias=spec.alias or spec.template_id,
        catalog_template_id=spec.catalog_template_id,
        network=spec.network,
        lifecycle=spec.lifecycle,
        env_vars=dict(spec.env_vars),
        traffic_access_token=spec.traffic_access_token,
        base_template_id=template.template_id,
        owner_key_id=spec.owner_key_id,
        # The experiment lease it lives under: node agents end it when the lease lapses.
        lease_id=spec.lease_id,
        # With their tickets: the record is secret-bearing already (envd_access_token).
        volume_mounts=spec.volume_mounts,
        # Its later operations (timeout, death) are spans of its creator's trace.
        trace_parent=spec.trace_parent,
    )
