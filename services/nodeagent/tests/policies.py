"""Node egress policies for tests, built as a sandbox record's NetworkPolicy would be."""

from __future__ import annotations

from collections.abc import Sequence

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.network import EgressPolicy


def egress(
    allow_internet: bool = False,
    allow_out: Sequence[str] = (),
    deny_out: Sequence[str] = (),
    dns_servers: Sequence[str] = (),
) -> EgressPolicy:
    return EgressPolicy(cluster_pb2.NetworkPolicy(
        allow_internet_access=allow_internet, allow_out=allow_out, deny_out=deny_out,
        dns_servers=dns_servers))
