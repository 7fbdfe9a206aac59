"""Test-only network plumbing: a fake guest and a fake internet, each in its own netns.

The fake guest replaces a slot's tap0 by a veth also named tap0 (same MAC and address), so the
slot's real nft rules, which match on interface names, see exactly what a VM's traffic would.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Awaitable, Callable

from pyroute2 import IPRoute

from aenv_nodeagent.network import NetSlot, netlink
from aenv_nodeagent.network.namespaces import (
    create_and_enter_netns,
    enter_netns,
    list_netns,
    remove_netns,
    run_in_fresh_thread,
)
from aenv_nodeagent.network.slots import GATEWAY_IP, GUEST_MAC, TAP_MAC, TAP_NAME

INTERNET_NS_IP = "198.18.0.1"  # slot-netns side of the fake internet link
INTERNET_SERVER_IP = "198.18.0.2"  # benchmarking range: not private, so policy treats it as public


def _link(ipr: IPRoute, name: str, address: str, prefixlen: int, mac: str | None = None) -> None:
    index = ipr.link_lookup(ifname=name)[0]
    if mac:
        ipr.link("set", index=index, address=mac)
    ipr.addr("add", index=index, address=address, prefixlen=prefixlen)
    ipr.link("set", index=index, state="up")


def _new_peer_netns(name: str) -> int:
    """Create a netns (entering it) and return an fd of it; caller closes."""
    create_and_enter_netns(name)
    fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    with IPRoute() as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
    return fd


def attach_fake_guest(slot: NetSlot, guest_ns: str) -> None:
    fd = _new_peer_netns(guest_ns)
    try:
        enter_netns(slot.netns)
        with IPRoute() as ns:
            netlink.delete_link(ns, TAP_NAME)
            ns.link("add", ifname=TAP_NAME, kind="veth", peer={"ifname": "eth0", "net_ns_fd": fd})
            _link(ns, TAP_NAME, GATEWAY_IP, 30, TAP_MAC)
        enter_netns(guest_ns)
        with IPRoute() as guest:
            _link(guest, "eth0", slot.guest_ip, 30, GUEST_MAC)
            guest.route("add", dst="0.0.0.0/0", gateway=GATEWAY_IP)
    finally:
        os.close(fd)


def attach_fake_internet(slot: NetSlot, internet_ns: str) -> None:
    fd = _new_peer_netns(internet_ns)
    try:
        enter_netns(slot.netns)
        with IPRoute() as ns:
            ns.link("add", ifname="inet0", kind="veth", peer={"ifname": "eth0", "net_ns_fd": fd})
            _link(ns, "inet0", INTERNET_NS_IP, 30)
        enter_netns(internet_ns)
        with IPRoute() as internet:
            _link(internet, "eth0", INTERNET_SERVER_IP, 30)
            internet.route("add", dst="0.0.0.0/0", gateway=INTERNET_NS_IP)
    finally:
        os.close(fd)


def remove_everything_named(prefix: str) -> list[str]:
    """Remove every netns and root-netns link whose name starts with ``prefix``."""
    removed = []
    with IPRoute() as root:
        for name in netlink.link_names(root):
            if name.startswith(prefix) and netlink.delete_link(root, name):
                removed.append(name)
    for name in list_netns():
        if name.startswith(prefix) and remove_netns(name):
            removed.append(name)
    return removed


async def in_netns(netns: str, fn: Callable[[], object]) -> object:
    def run() -> object:
        enter_netns(netns)
        return fn()

    return await run_in_fresh_thread(run, name=f"test-{netns}")


async def try_connect(netns: str | None, host: str, port: int, wait_s: float = 0.5) -> str:
    """Connect from inside ``netns`` (None: the root netns); returns what came back: the payload,
    'refused' or 'timeout'."""

    def connect() -> str:
        if netns:
            enter_netns(netns)
        try:
            with socket.create_connection((host, port), timeout=wait_s) as conn:
                return conn.recv(100).decode()
        except ConnectionRefusedError:
            return "refused"
        except TimeoutError:
            return "timeout"

    return await run_in_fresh_thread(connect, name="test-connect")


ServerStopper = Callable[[], Awaitable[None]]


async def serve_payload(netns: str | None, host: str, payload: str) -> tuple[int, ServerStopper]:
    """A TCP server in ``netns`` that sends ``payload`` to each client; returns (port, stop)."""

    def listen() -> socket.socket:
        if netns:
            enter_netns(netns)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((host, 0))
        sock.listen()
        return sock

    sock = await run_in_fresh_thread(listen, name="test-listen")

    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(payload.encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, sock=sock)

    async def stop() -> None:
        server.close()
        await server.wait_closed()

    return int(sock.getsockname()[1]), stop
