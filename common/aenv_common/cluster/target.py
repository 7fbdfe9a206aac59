"""One gRPC target for every etcd endpoint, so a client fails over when its member dies.

aetcd opens one channel to f"{host}:{port}". Several endpoints become one `ipv4:` target listing
them all: gRPC's pick_first balancer holds one connection and, when that member goes away, moves
to the next that answers. Names are resolved to their IPv4 addresses once, here; a single name
is left to gRPC's DNS resolver, which resolves it again after a failure (with Kubernetes, name
the headless Service of the etcd members: every member's address, kept current).
"""

from __future__ import annotations

import ipaddress
import socket


def grpc_target(endpoints: list[tuple[str, int]]) -> tuple[str, int]:
    """(host, port) for aetcd.Client whose joined target reaches every one of `endpoints`."""
    if len(endpoints) == 1:
        return endpoints[0]
    *others, (last_host, last_port) = [(_ipv4(host), port) for host, port in endpoints]
    listed = [f"{host}:{port}" for host, port in others]
    # aetcd appends ":<port>" itself: the last address's port goes in as the port.
    return "ipv4:" + ",".join([*listed, last_host]), last_port


def _ipv4(host: str) -> str:
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        return socket.gethostbyname(host)
