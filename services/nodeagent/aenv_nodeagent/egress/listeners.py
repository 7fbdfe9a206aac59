"""The listening sockets of one slot's egress, made by the node agent inside the slot's netns.

The egress process never enters a netns (it has no capability to), so the agent binds, in each
slot that needs the proxy, a TCP listener for redirected guest connections and a UDP and a TCP
socket for redirected DNS, all on the tap's address (the guest's gateway: nft's ``redirect``
rewrites the destination to it), and hands them over with SCM_RIGHTS. Sockets stay in the netns
they were created in, so the egress process accepts guest connections there while everything it
dials leaves from its own netns.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from functools import partial

from aenv_nodeagent.network.firewall import EgressPorts
from aenv_nodeagent.network.namespaces import enter_netns, run_in_fresh_thread
from aenv_nodeagent.network.slots import GATEWAY_IP

_BACKLOG = 1024


@dataclass
class SlotListeners:
    """A slot's three sockets, in the order ``attach`` passes them."""

    proxy: socket.socket
    dns_udp: socket.socket
    dns_tcp: socket.socket

    def fds(self) -> list[int]:
        return [self.proxy.fileno(), self.dns_udp.fileno(), self.dns_tcp.fileno()]

    def close(self) -> None:
        """The agent's copies: closed once passed (the egress process holds its own)."""
        for sock in (self.proxy, self.dns_udp, self.dns_tcp):
            sock.close()


async def open_listeners(netns: str, ports: EgressPorts) -> SlotListeners:
    """Bind the slot's sockets inside ``netns`` (in a thread that enters it and then ends)."""
    return await run_in_fresh_thread(partial(_open_in, netns, ports),
                                     name=f"egress-listen-{netns}")


def _open_in(netns: str, ports: EgressPorts) -> SlotListeners:
    enter_netns(netns)
    opened: list[socket.socket] = []
    try:
        proxy = _tcp_listener(ports.proxy, opened)
        dns_udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        opened.append(dns_udp)
        _share_port(dns_udp)
        dns_udp.bind((GATEWAY_IP, ports.dns))
        dns_tcp = _tcp_listener(ports.dns, opened)
    except BaseException:
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.close()
        raise
    return SlotListeners(proxy, dns_udp, dns_tcp)


def _tcp_listener(port: int, opened: list[socket.socket]) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    opened.append(sock)
    # A listener of a restarted egress process rebinds while the last one's flows linger.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _share_port(sock)
    sock.bind((GATEWAY_IP, port))
    sock.listen(_BACKLOG)
    return sock


def _share_port(sock: socket.socket) -> None:
    """A slot re-attached while attached (another owner key) gets new sockets beside the old
    ones, which serve until the egress process drops them: the guest never meets a closed
    port. Only sockets made by the same uid (this agent's) can share it."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
