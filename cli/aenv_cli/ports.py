"""The loopback ports of a single-node platform."""

from __future__ import annotations

from dataclasses import dataclass

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class PlatformPorts:
    """Every listen port of the platform; the defaults are the project's conventions."""

    etcd_client: int = 2379
    etcd_peer: int = 2380
    gateway_http: int = 3000
    gateway_grpc: int = 50050
    scheduler: int = 50051
    nodeagent: int = 50052
    nodeagent_proxy: int = 50080
    snapstore: int = 50053
    # Snapstore's volume NFS server (not 2049: a host's own NFS server may hold that).
    volume_nfs: int = 50054
    # Prometheus /metrics of the gRPC services (the gateway's is on gateway_http).
    scheduler_metrics: int = 9101
    nodeagent_metrics: int = 9102
    snapstore_metrics: int = 9103


def address(port: int) -> str:
    return f"{LOOPBACK}:{port}"

