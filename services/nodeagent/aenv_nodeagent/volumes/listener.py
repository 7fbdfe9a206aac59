"""The relay's listening socket, opened by the agent inside a slot's netns.

A socket stays in the netns it was created in, so a fresh thread enters the slot's netns, binds
``GATEWAY_IP:2049`` there and ends (as the egress listeners are made, egress/listeners.py); the
agent's own event loop then accepts on it, while everything the relay dials leaves from the
agent's netns, where the volume server is reachable and the guest is not.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Awaitable, Callable
from functools import partial

from aenv_nodeagent.network.namespaces import enter_netns, run_in_fresh_thread

from .config import NFS_PORT, RELAY_IP

# How a relay gets its listener for a netns: (netns, backlog) -> a bound, listening socket.
OpenListener = Callable[[str, int], Awaitable[socket.socket]]


async def open_in_netns(netns: str, backlog: int) -> socket.socket:
    """A non-blocking TCP listener on ``RELAY_IP:NFS_PORT`` inside ``netns``."""
    return await run_in_fresh_thread(partial(_open_in, netns, backlog),
                                     name=f"volume-relay-listen-{netns}")


def _open_in(netns: str, backlog: int) -> socket.socket:
    enter_netns(netns)
    return listen_on(RELAY_IP, NFS_PORT, backlog)


def listen_on(host: str, port: int, backlog: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # A relay started again (an agent restart's adoption) rebinds while the last one's
        # connections linger in TIME_WAIT.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        with contextlib.suppress(OSError):
            sock.close()
        raise
    return sock
