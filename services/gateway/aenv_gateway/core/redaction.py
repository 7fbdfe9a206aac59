"""Sandbox records as the APIs show them: without the secrets only node agents and snapstore see."""

from __future__ import annotations

from aenv.cluster.v1 import cluster_pb2


def without_proxy_secrets(record: cluster_pb2.SandboxRecord) -> cluster_pb2.SandboxRecord:
    """A record as the native API shows it: the egress proxy's sealed password and CA
    certificate left out, as from sandbox info, and its volume mounts' tickets (secrets that
    only node agents and snapstore see: volumes/mounts.py)."""
    tickets = any(m.ticket for m in record.volume_mounts)
    if not record.network.HasField("egress_proxy") and not tickets:
        return record
    shown = cluster_pb2.SandboxRecord()
    shown.CopyFrom(record)
    if shown.network.HasField("egress_proxy"):
        shown.network.egress_proxy.ClearField("sealed_password")
        shown.network.egress_proxy.ClearField("tls_ca_cert")
    for mount in shown.volume_mounts:
        mount.ClearField("ticket")
    return shown
