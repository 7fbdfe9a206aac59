"""The volume relay in a real slot: a fake guest behind the slot's tap reaches the relay on
169.254.0.22:2049, which dials the (fake) volume server from the agent's netns with the tickets
first; the slot's firewall accepts that and still drops every other port of the netns, with an
IP-only policy and with one whose redirect puts the egress proxy on the guest's TCP; a slot's
destruction stops its relay."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkConfig, NetworkManager
from aenv_nodeagent.network.firewall import EgressPorts
from aenv_nodeagent.network.namespaces import enter_netns, list_netns, run_in_fresh_thread
from aenv_nodeagent.network.slots import GATEWAY_IP
from aenv_nodeagent.volumes import VolumeRelays

from ..fakes.volumes import FakeNfsServer, FixedEndpoint
from .helpers import (
    ServerStopper,
    attach_fake_guest,
    remove_everything_named,
    serve_payload,
    try_connect,
)

pytestmark = pytest.mark.netns

TICKET = "eyJ2Ijoidm9sLXgifQ.c2ln"
MOUNTS = [cluster_pb2.VolumeMount(path="/data", volume_id="vol-x", ticket=TICKET)]
IP_ONLY = EgressPolicy(cluster_pb2.NetworkPolicy(allow_internet_access=True))
BY_NAME = EgressPolicy(cluster_pb2.NetworkPolicy(allow_out=["allowed.example.com"]),
                       owner_key_id="k1")


class NoEgress:
    """The egress process stand-in: nothing listens on its ports but what the test opens."""

    @property
    def ports(self) -> EgressPorts:
        return EgressPorts()

    async def attach(self, netns: str, owner_key_id: str,
                     policy: cluster_pb2.NetworkPolicy) -> None:
        return None

    async def update(self, netns: str, policy: cluster_pb2.NetworkPolicy) -> None:
        return None

    async def detach(self, netns: str) -> None:
        return None


@dataclass
class World:
    manager: NetworkManager
    relays: VolumeRelays
    nfs: FakeNfsServer
    config: NetworkConfig


@pytest.fixture
async def world(net_config: NetworkConfig) -> AsyncIterator[World]:
    nfs = await FakeNfsServer().start()
    relays = VolumeRelays(FixedEndpoint(nfs.address))
    manager = NetworkManager(net_config, egress=NoEgress(), relays=relays)
    try:
        yield World(manager, relays, nfs, net_config)
    finally:
        await manager.destroy_orphans(keep=set())
        await relays.close()
        await nfs.stop()
        await asyncio.to_thread(remove_everything_named, net_config.prefix)


def _exchange(netns: str, host: str, port: int, payload: bytes, wait_s: float) -> bytes | str:
    """From inside ``netns``: connect, send, read the answer (or how it failed)."""
    enter_netns(netns)
    try:
        with socket.create_connection((host, port), timeout=wait_s) as conn:
            conn.sendall(payload)
            got = b""
            while len(got) < len(payload):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got += chunk
            return got
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"


async def exchange(netns: str, host: str, port: int, payload: bytes,
                   wait_s: float = 2.0) -> bytes | str:
    return await run_in_fresh_thread(partial(_exchange, netns, host, port, payload, wait_s),
                                     name="test-guest")


async def slot_with_guest(world: World, policy: EgressPolicy) -> tuple[NetSlot, str]:
    slot = await world.manager.create_slot(policy)
    guest = f"{world.config.prefix}g{slot.index}"
    await run_in_fresh_thread(partial(attach_fake_guest, slot, guest), name="test-guest-attach")
    return slot, guest


@pytest.mark.parametrize("policy", [IP_ONLY, BY_NAME], ids=["ip-only", "egress-proxy"])
async def test_the_guest_reaches_the_relay_and_nothing_else_of_the_netns(
    world: World, policy: EgressPolicy
) -> None:
    slot, guest = await slot_with_guest(world, policy)
    await world.relays.start(slot.netns, MOUNTS)
    # Something listens on other ports of the tap's address (and the redirect's target): the
    # firewall, not a missing listener, is what keeps the guest out.
    other_port, stop_other = await serve_payload(slot.netns, GATEWAY_IP, "other-port")
    stops = [stop_other]
    if policy.needs_proxy:
        stops.append(await serve_proxy(slot.netns))
    try:
        payload = b"\x80\x00\x00\x10" + bytes(range(256)) * 64
        assert await exchange(guest, GATEWAY_IP, 2049, payload) == payload
        assert world.nfs.preambles == [f"AENV-VOLUMES 1 {TICKET}\n".encode()]

        assert await try_connect(guest, GATEWAY_IP, other_port) == "timeout"
        assert await try_connect(guest, GATEWAY_IP, 15001) == "timeout"  # never directly
        assert await try_connect(guest, slot.ns_ip, 2049) == "timeout"  # the veth's end
        if policy.needs_proxy:  # the redirect is live: the guest's other TCP goes to it
            assert await try_connect(guest, "198.18.7.7", 80, wait_s=2) == "proxied"
    finally:
        for stop in stops:
            await stop()


async def test_a_slot_without_mounts_refuses_the_port(world: World) -> None:
    _, guest = await slot_with_guest(world, IP_ONLY)
    assert await try_connect(guest, GATEWAY_IP, 2049) == "refused"
    assert world.relays.running() == {}


async def test_destroying_the_slot_stops_its_relay_and_frees_the_netns(world: World) -> None:
    slot, guest = await slot_with_guest(world, IP_ONLY)
    await world.relays.start(slot.netns, MOUNTS)
    assert await exchange(guest, GATEWAY_IP, 2049, b"ping") == b"ping"
    await world.manager.destroy_slot(slot)
    assert world.relays.running() == {}
    # The netns went (a listener left in it would have kept it alive, unpinned).
    assert slot.netns not in await asyncio.to_thread(list_netns)


async def test_the_same_slot_serves_again_after_a_restart_of_the_relay(world: World) -> None:
    """An agent restart: the old listener is gone, the new one binds the same address."""
    slot, guest = await slot_with_guest(world, IP_ONLY)
    await world.relays.start(slot.netns, MOUNTS)
    await world.relays.stop(slot.netns)
    assert await try_connect(guest, GATEWAY_IP, 2049) == "refused"
    await world.relays.resume(slot.netns, MOUNTS)
    assert await exchange(guest, GATEWAY_IP, 2049, b"again") == b"again"


async def serve_proxy(netns: str) -> ServerStopper:
    """A stand-in for the egress proxy's listener on the redirect's port."""

    def listen() -> socket.socket:
        enter_netns(netns)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((GATEWAY_IP, EgressPorts().proxy))
        sock.listen()
        return sock

    sock = await run_in_fresh_thread(listen, name="test-proxy-listen")

    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"proxied")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, sock=sock)

    async def stop() -> None:
        server.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()

    return stop
