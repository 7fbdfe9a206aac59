"""The control channel between agent and egress process (a real socketpair), and the supervisor
restarting a stand-in egress process that dies, with every slot re-attached."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Internal, NotFound
from aenv_nodeagent.egress.control import Channel, ChannelClosed, Configure, Message
from aenv_nodeagent.egress.listeners import SlotListeners
from aenv_nodeagent.egress.supervisor import EgressSupervisor, Listen, SupervisorSettings
from aenv_nodeagent.network.firewall import EgressPorts

FAKE = Path(__file__).with_name("fake_egress.py")


async def serve(op: str, body: Message, fds: list[int]) -> Message | None:
    """The far end's handler: echoes, reads passed pipes, fails on request."""
    if op == "echo":
        return {"echo": body["value"]}
    if op == "read":
        data = [os.read(fd, 100).decode() for fd in fds]
        for fd in fds:
            os.close(fd)
        return {"data": data}
    if op == "missing":
        raise NotFound("no such slot aenv-7")
    raise ValueError("a bug")


@pytest.fixture
async def pair() -> AsyncIterator[tuple[Channel, Channel]]:
    a, b = socket.socketpair()
    near, far = Channel(a, serve), Channel(b, serve)
    runs = [asyncio.ensure_future(near.run()), asyncio.ensure_future(far.run())]
    yield near, far
    await near.aclose()
    await far.aclose()
    await asyncio.gather(*runs)


async def test_requests_get_their_own_replies(pair: tuple[Channel, Channel]) -> None:
    near, far = pair
    replies = await asyncio.gather(*(near.request("echo", {"value": i}) for i in range(50)),
                                   far.request("echo", {"value": "back"}))
    assert [r["echo"] for r in replies] == [*range(50), "back"]


async def test_descriptors_travel_with_their_request(pair: tuple[Channel, Channel]) -> None:
    near, _ = pair
    pipes = [os.pipe() for _ in range(6)]
    try:
        for n, (_, w) in enumerate(pipes):
            os.write(w, f"pipe {n}".encode())
        first, second = await asyncio.gather(
            near.request("read", {}, [r for r, _ in pipes[:3]]),
            near.request("read", {"pad": "x" * 300_000}, [r for r, _ in pipes[3:]]))
        assert first["data"] == ["pipe 0", "pipe 1", "pipe 2"]
        assert second["data"] == ["pipe 3", "pipe 4", "pipe 5"]
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)


async def test_errors_cross_typed(pair: tuple[Channel, Channel]) -> None:
    near, _ = pair
    with pytest.raises(NotFound, match="no such slot aenv-7"):
        await near.request("missing")
    with pytest.raises(Internal, match="bug failed: ValueError"):
        await near.request("bug")


async def test_a_closed_peer_fails_what_waits() -> None:
    a, b = socket.socketpair()
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def hang(op: str, body: Message, fds: list[int]) -> Message | None:
        await never
        return None

    near, far = Channel(a, serve), Channel(b, hang)
    runs = [asyncio.ensure_future(near.run()), asyncio.ensure_future(far.run())]
    waiting = asyncio.ensure_future(near.request("echo", {"value": 1}))
    await asyncio.sleep(0.05)
    await far.aclose()
    with pytest.raises(ChannelClosed):
        await waiting
    await asyncio.wait_for(asyncio.gather(*runs), 5)
    with pytest.raises(ChannelClosed):
        await near.request("echo", {"value": 2})


def test_configure_round_trips_and_never_shows_its_secrets() -> None:
    configure = Configure(secrets_key=b"k" * 32, ca_cert_pem="CERT", ca_key_pem="PRIVATE KEY",
                          dns_upstreams=["192.0.2.53"], upstream_ca_file=None,
                          etcd_endpoints="127.0.0.1:2379", etcd_prefix="/aenv",
                          blocked_extra=["10.211.0.0/16"])
    assert Configure.from_message(configure.to_message()) == configure
    assert "PRIVATE" not in repr(configure) and "kkkk" not in repr(configure)


def fake_child(listen: Listen) -> EgressSupervisor:
    """A supervisor of the stand-in egress process (fake_egress.py)."""
    configure = Configure(secrets_key=b"k" * 32, ca_cert_pem="", ca_key_pem="",
                          dns_upstreams=[], upstream_ca_file=None, etcd_endpoints="",
                          etcd_prefix="/t", blocked_extra=[])

    async def sink(netns: str, addresses: list[str], ttl_s: float) -> None:
        return None

    return EgressSupervisor(SupervisorSettings(None, command=[sys.executable, str(FAKE)]),
                            configure, sink, listen=listen)


async def fake_listeners(netns: str, ports: EgressPorts) -> SlotListeners:
    socks = [socket.socket(socket.AF_INET, kind) for kind in
             (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_STREAM)]
    return SlotListeners(*socks)


async def test_the_supervisor_restarts_a_dead_egress_process_and_reattaches() -> None:
    supervisor = fake_child(fake_listeners)
    await supervisor.start()
    try:
        policy = cluster_pb2.NetworkPolicy(allow_out=["a.example"])
        await supervisor.attach("ns-a", "k1", policy)
        await supervisor.attach("ns-b", "k1", policy)
        await supervisor.update("ns-b", cluster_pb2.NetworkPolicy(allow_out=["b.example"]))
        first = await supervisor.stats()
        assert first["slots"] == ["ns-a", "ns-b"] and first["pid"] == supervisor.pid
        os.kill(first["pid"], signal.SIGKILL)
        second = await _after_restart(supervisor, first["pid"])
        assert second["slots"] == ["ns-a", "ns-b"]  # configured, then both re-attached
        await supervisor.detach("ns-a")
        assert (await supervisor.stats())["slots"] == ["ns-b"]
        with pytest.raises(NotFound):
            await supervisor.update("ns-a", policy)
    finally:
        pid = supervisor.pid
        await supervisor.stop()
    assert pid is not None and not _alive(pid)


async def _after_restart(supervisor: EgressSupervisor, old_pid: int) -> Message:
    for _ in range(200):
        if supervisor.restarts and supervisor.pid not in (None, old_pid):
            try:
                return await supervisor.stats()
            except ChannelClosed:
                pass
        await asyncio.sleep(0.05)
    raise AssertionError("the egress process was not restarted")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_a_failed_attach_is_forgotten() -> None:
    async def no_netns(netns: str, ports: EgressPorts) -> SlotListeners:
        raise FileNotFoundError(f"/run/netns/{netns}")

    supervisor = fake_child(no_netns)
    await supervisor.start()
    try:
        with pytest.raises(FileNotFoundError):
            await supervisor.attach("ns-gone", "k1", cluster_pb2.NetworkPolicy())
        assert supervisor.attached() == set()  # a restart will not try it again
        assert (await supervisor.stats())["slots"] == []
    finally:
        await supervisor.stop()
