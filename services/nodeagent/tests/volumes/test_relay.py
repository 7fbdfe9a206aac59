"""One slot's volume relay against a fake NFS server, on loopback (no netns): the preamble comes
first, bytes are spliced both ways, both sides close together, many connections come and go
without leaking a descriptor, and a stop ends everything."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import AsyncIterator

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, InvalidArgument
from aenv_nodeagent.volumes import RelaySettings, VolumeEndpoint, VolumeRelays

from ..fakes.volumes import FakeNfsServer, FixedEndpoint, loopback_listener

NETNS = "aenv-7"
TICKETS = ["tkA.sig-1", "tkB.sig_2"]
MOUNTS = [cluster_pb2.VolumeMount(path=f"/v{i}", volume_id=f"vol-{i}", ticket=t)
          for i, t in enumerate(TICKETS)]


@pytest.fixture
async def nfs() -> AsyncIterator[FakeNfsServer]:
    server = await FakeNfsServer().start()
    yield server
    await server.stop()


@pytest.fixture
async def relays(nfs: FakeNfsServer) -> AsyncIterator[VolumeRelays]:
    made = VolumeRelays(FixedEndpoint(nfs.address), open_listener=loopback_listener)
    yield made
    await made.close()


def relay_address(relays: VolumeRelays, netns: str = NETNS) -> tuple[str, int]:
    relay = relays.running()[netns]
    host, port = relay._listener.getsockname()[:2]
    return host, port


async def guest(relays: VolumeRelays) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*relay_address(relays))


async def until(check: object, what: str, within_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + within_s
    while not check():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not {what} within {within_s}s")
        await asyncio.sleep(0.01)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_the_preamble_comes_first_then_bytes_flow_both_ways(
    relays: VolumeRelays, nfs: FakeNfsServer
) -> None:
    await relays.start(NETNS, MOUNTS)
    reader, writer = await guest(relays)
    writer.write(b"\x80\x00\x00\x28rpc-call")
    assert await reader.readexactly(12) == b"\x80\x00\x00\x28rpc-call"
    assert nfs.preambles == [b"AENV-VOLUMES 1 tkA.sig-1 tkB.sig_2\n"]
    writer.close()


async def test_megabytes_pass_both_ways_through_bounded_buffers(
    nfs: FakeNfsServer,
) -> None:
    small = VolumeRelays(FixedEndpoint(nfs.address), RelaySettings(chunk_bytes=4096),
                         open_listener=loopback_listener)
    try:
        await small.start(NETNS, MOUNTS)
        reader, writer = await guest(small)
        payload = os.urandom(8 << 20)

        async def send() -> None:
            writer.write(payload)
            await writer.drain()

        sending = asyncio.create_task(send())
        assert await reader.readexactly(len(payload)) == payload
        await sending
        writer.close()
    finally:
        await small.close()


async def test_a_guest_that_closes_closes_the_server_side_too(
    relays: VolumeRelays, nfs: FakeNfsServer
) -> None:
    await relays.start(NETNS, MOUNTS)
    reader, writer = await guest(relays)
    writer.write(b"x")
    await reader.readexactly(1)
    assert nfs.open_connections == 1
    writer.close()
    await asyncio.wait_for(nfs.closed.wait(), 5)
    await until(lambda: relays.running()[NETNS].connections == 0, "the relay let go")


async def test_a_server_that_closes_closes_the_guest_side_too(relays: VolumeRelays) -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()  # a bad ticket: the server closes at once
        writer.close()

    refusing = await asyncio.start_server(refuse, "127.0.0.1", 0)
    try:
        endpoint = relays.endpoint
        assert isinstance(endpoint, FixedEndpoint)
        endpoint.nfs_address = f"127.0.0.1:{refusing.sockets[0].getsockname()[1]}"
        await relays.start(NETNS, MOUNTS)
        reader, writer = await guest(relays)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # EOF: the relay closed it
        writer.close()
    finally:
        refusing.close()
        await refusing.wait_closed()


async def test_a_hundred_connections_leak_no_descriptor(
    relays: VolumeRelays, nfs: FakeNfsServer
) -> None:
    await relays.start(NETNS, MOUNTS)
    before = open_fds()
    for batch in range(4):  # 25 at once, four times
        conns = [await guest(relays) for _ in range(25)]
        for n, (_, writer) in enumerate(conns):
            writer.write(f"{batch}:{n};".encode())
        for n, (reader, _) in enumerate(conns):
            expected = f"{batch}:{n};".encode()
            assert await reader.readexactly(len(expected)) == expected
        for _, writer in conns:
            writer.close()
            await writer.wait_closed()
        await asyncio.wait_for(nfs.closed.wait(), 5)
    assert len(nfs.preambles) == 100
    await until(lambda: relays.running()[NETNS].connections == 0, "every connection ended")
    await until(lambda: open_fds() <= before, "every descriptor closed")


async def test_a_stop_closes_the_listener_and_every_connection(
    relays: VolumeRelays, nfs: FakeNfsServer
) -> None:
    await relays.start(NETNS, MOUNTS)
    address = relay_address(relays)
    reader, writer = await guest(relays)
    writer.write(b"ping")
    await reader.readexactly(4)
    await relays.stop(NETNS)
    assert relays.running() == {}
    assert await asyncio.wait_for(reader.read(), 5) == b""
    await asyncio.wait_for(nfs.closed.wait(), 5)
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection(*address)
    writer.close()
    await relays.stop(NETNS)  # safe to repeat


async def test_more_connections_than_allowed_are_closed(nfs: FakeNfsServer) -> None:
    few = VolumeRelays(FixedEndpoint(nfs.address), RelaySettings(max_connections=2),
                       open_listener=loopback_listener)
    try:
        await few.start(NETNS, MOUNTS)
        kept = [await guest(few) for _ in range(2)]
        for reader, writer in kept:
            writer.write(b"k")
            await reader.readexactly(1)
        reader, writer = await guest(few)
        assert await asyncio.wait_for(reader.read(), 5) == b""
        for _, w in [*kept, (reader, writer)]:
            w.close()
    finally:
        await few.close()


async def test_a_slot_started_again_presents_the_new_tickets(
    relays: VolumeRelays, nfs: FakeNfsServer
) -> None:
    await relays.start(NETNS, MOUNTS)
    first = relays.running()[NETNS]
    await relays.start(NETNS, MOUNTS[:1])  # a reset keeps its slot
    assert relays.running()[NETNS] is first
    reader, writer = await guest(relays)
    writer.write(b"x")
    await reader.readexactly(1)
    assert nfs.preambles == [b"AENV-VOLUMES 1 tkA.sig-1\n"]
    writer.close()


async def test_no_mounts_no_relay(relays: VolumeRelays) -> None:
    await relays.start(NETNS, [])
    assert relays.running() == {}


async def test_without_snapstore_a_mount_is_refused_before_anything() -> None:
    opened: list[str] = []

    async def never(netns: str, backlog: int) -> socket.socket:
        opened.append(netns)
        raise AssertionError("no listener without a snapstore")

    nowhere = VolumeRelays(VolumeEndpoint(""), open_listener=never)
    with pytest.raises(Conflict, match="volumes need a snapstore"):
        await nowhere.start(NETNS, MOUNTS)
    assert opened == []


async def test_a_bad_mount_is_refused_before_anything(relays: VolumeRelays) -> None:
    with pytest.raises(InvalidArgument):
        await relays.start(NETNS, [cluster_pb2.VolumeMount(path="/x", volume_id="vol-1",
                                                           ticket="bad ticket")])
    assert relays.running() == {}


async def test_a_volume_server_that_moved_is_asked_again_and_no_ticket_is_logged(
    relays: VolumeRelays, nfs: FakeNfsServer, caplog: pytest.LogCaptureFixture
) -> None:
    endpoint = relays.endpoint
    assert isinstance(endpoint, FixedEndpoint)
    await relays.start(NETNS, MOUNTS)
    assert endpoint.asked == 1
    with socket.socket() as closed_port:  # a port nothing listens on
        closed_port.bind(("127.0.0.1", 0))
        moved_from = f"127.0.0.1:{closed_port.getsockname()[1]}"
    endpoint.nfs_address, live = moved_from, endpoint.nfs_address
    endpoint.forget()
    caplog.set_level(logging.DEBUG)
    reader, writer = await guest(relays)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # dial refused: closed
    writer.close()
    assert endpoint.asked == 2
    endpoint.nfs_address = live  # the next connection asks again and gets through
    reader, writer = await guest(relays)
    writer.write(b"y")
    assert await reader.readexactly(1) == b"y"
    assert endpoint.asked == 3
    writer.close()
    assert "did not answer" in caplog.text
    assert all(ticket not in caplog.text for ticket in TICKETS)
