"""Free loopback ports for tests and benchmarks that start servers in other processes.

A port the kernel picks with bind(0) comes from the ephemeral range, and is released before the
server binds it. In that gap any outgoing connection on the host (an etcd client, an SDK) may be
given the same port as its source, and the server then fails with "address in use". Ports below
the ephemeral range are never handed out as source ports, so picking there at random leaves only
the far smaller chance of another test's listener choosing the same one.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOOPBACK = "127.0.0.1"
LOWEST = 20000  # above the well-known and registered ports that services on a host tend to use
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback TCP port nothing listens on now, and not handed out before by this process."""
    candidates = list(range(LOWEST, _ephemeral_start()))
    random.shuffle(candidates)
    for port in candidates:
        if port not in _handed_out and _bindable(port):
            _handed_out.add(port)
            return port
    raise RuntimeError(f"no free loopback port in {LOWEST}-{_ephemeral_start() - 1}")


def _ephemeral_start() -> int:
    try:
        return int(_EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True
