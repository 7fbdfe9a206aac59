"""The egress data plane end to end on real namespaces, without a VM: a real slot built by
NetworkManager, a fake guest behind its tap (a veth), the real egress process (unprivileged,
supervised) and a test "internet" netns on TEST-NET-2 reached from the root netns, where
dnsmasq answers the names and an HTTP server reports the Host it got."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import string
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import dns.message
import dns.query
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_nodeagent.egress.certs import EgressCA
from aenv_nodeagent.egress.control import Configure
from aenv_nodeagent.egress.supervisor import EgressSupervisor, SupervisorSettings
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkConfig, NetworkManager
from aenv_nodeagent.network.manager import host_blocked_extra
from aenv_nodeagent.network.namespaces import (
    enter_netns,
    run_in_fresh_thread,
)
from aenv_nodeagent.network.nft import run_nft
from aenv_nodeagent.network.resolved_sets import ResolvedSets
from aenv_testing.subnets import free_subnet

from ..network.helpers import attach_fake_guest, remove_everything_named
from .dnsnet import make_upstream_netns, query_in, start_dnsmasq

pytestmark = pytest.mark.netns

DOMAIN = "p3.aenv-test.example"
ALLOWED, DENIED, OTHER = (f"{n}.{DOMAIN}" for n in ("allowed", "denied", "other"))
EGRESS_UID = 999_999_999
BY_NAME = cluster_pb2.NetworkPolicy(allow_internet_access=False, allow_out=[ALLOWED],
                                    deny_out=[DENIED])
IP_ONLY = cluster_pb2.NetworkPolicy(allow_internet_access=True)


@dataclass
class World:
    slot: NetSlot
    guest: str  # the fake guest's netns
    dns_ip: str  # dnsmasq; also serves HTTP (an address no name resolves to)
    web_ip: str  # every name resolves here
    manager: NetworkManager
    egress: EgressSupervisor


async def _http_server(netns: str) -> asyncio.Server:
    """Answers every request with the Host it carried."""
    def listen() -> socket.socket:
        enter_netns(netns)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", 80))
        sock.listen()
        return sock

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        host = next((line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                     if line.lower().startswith(b"host:")), b"")
        body = b"hello " + host
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    sock = await run_in_fresh_thread(listen, name="test-http-listen")
    return await asyncio.start_server(answer, sock=sock)


async def in_guest(netns: str, fn: Callable[[], object]) -> object:
    def run() -> object:
        enter_netns(netns)
        return fn()
    return await run_in_fresh_thread(run, name="test-guest")


def http_get(address: str, host: str) -> str:
    """The body the guest gets, or 'reset' / 'refused'."""
    try:
        with socket.create_connection((address, 80), timeout=5) as conn:
            conn.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            data = b""
            while chunk := conn.recv(4096):
                data += chunk
    except ConnectionResetError:
        return "reset"
    except ConnectionRefusedError:
        return "refused"
    return data.split(b"\r\n\r\n", 1)[1].decode() if b"\r\n\r\n" in data else "empty"


def send_after_pause(address: str, request: bytes, before: int = 0) -> str:
    """``request``'s first ``before`` bytes, then a pause past the proxy's peek (it decides by
    the address alone), then the rest; what comes back, or 'reset'."""
    with socket.create_connection((address, 80), timeout=5) as conn:
        try:
            conn.sendall(request[:before])
            time.sleep(0.6)
            conn.sendall(request[before:])
            return conn.recv(4096).split(b"\r\n\r\n", 1)[-1].decode()
        except ConnectionResetError:
            return "reset"


def policy(network: cluster_pb2.NetworkPolicy) -> EgressPolicy:
    return EgressPolicy(network, owner_key_id="owner-1")


@pytest.fixture
async def world(request: pytest.FixtureRequest) -> AsyncIterator[World]:
    """Parametrized indirectly: the per-sandbox connection cap (default 1024)."""
    prefix = "p3e" + "".join(random.choices(string.ascii_lowercase, k=4))
    config = NetworkConfig(prefix=prefix, pool_cidr=free_subnet(28))
    stack = contextlib.AsyncExitStack()
    try:
        dns_ip, web_ip = await run_in_fresh_thread(
            lambda: make_upstream_netns(f"{prefix}up", f"{prefix}u0",
                                        free_subnet(29, within="198.51.100.0/24")),
            name="test-upstream")
        records = [f"--host-record={name},{web_ip},300" for name in (ALLOWED, DENIED, OTHER)]
        stack.push_async_callback(_end, await start_dnsmasq(f"{prefix}up", dns_ip, records))
        server = await _http_server(f"{prefix}up")
        stack.callback(server.close)
        ca = EgressCA.generate()
        resolved = ResolvedSets(config)
        egress = EgressSupervisor(SupervisorSettings(uid=EGRESS_UID), Configure(
            secrets_key=os.urandom(32), ca_cert_pem=ca.cert_pem.decode(),
            ca_key_pem=ca.key_pem().decode(), dns_upstreams=[dns_ip], upstream_ca_file=None,
            etcd_endpoints="", etcd_prefix="/p3", blocked_extra=await host_blocked_extra(config),
            max_connections_per_sandbox=getattr(request, "param", 1024),
        ), resolved.add)
        await egress.start()
        stack.push_async_callback(egress.stop)
        manager = NetworkManager(config, egress=egress, resolved=resolved)
        stack.push_async_callback(manager.destroy_orphans, set())
        slot = await manager.create_slot(policy(IP_ONLY))
        guest = f"{prefix}-g"
        await run_in_fresh_thread(lambda: attach_fake_guest(slot, guest), name="test-guest")
        await manager.update_policy(slot, policy(BY_NAME))
        yield World(slot, guest, dns_ip, web_ip, manager, egress)
    finally:
        await stack.aclose()
        await asyncio.to_thread(remove_everything_named, prefix)


async def _end(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    await process.wait()


async def test_names_decide_what_a_guest_reaches(world: World) -> None:
    # The guest may ask any resolver: nft hands the query to the platform's.
    answer = await query_in(world.guest, dns.message.make_query(ALLOWED, "A"), world.web_ip, 53)
    assert [str(r) for rrset in answer.answer for r in rrset] == [world.web_ip]
    resolved = await in_guest(world.slot.netns, lambda: run_nft("list set inet aenv resolved4"))
    assert world.web_ip in str(resolved)  # UDP to the allowed name's address may pass too

    async def get(address: str, host: str) -> object:
        return await in_guest(world.guest, lambda: http_get(address, host))

    assert await get(world.web_ip, ALLOWED) == f"hello {ALLOWED}"
    assert await get(world.web_ip, DENIED) == "reset"  # denied by name
    assert await get(world.web_ip, OTHER) == "reset"  # unlisted under deny-all
    assert await get(world.dns_ip, ALLOWED) == "reset"  # allowed name, another address
    assert await get(world.dns_ip, "") == "reset"  # raw IP the resolver never gave
    # Silent first: let through by the address (the resolver gave it for an allowed name),
    # then judged by the name its first bytes carry when they come.
    async def paused(request: bytes, before: int = 0) -> object:
        return await in_guest(world.guest,
                              lambda: send_after_pause(world.web_ip, request, before))

    def get_of(host: str) -> bytes:
        return f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()

    assert await paused(b"PING\r\n\r\n") == "hello "  # no name: the address decides
    assert await paused(get_of(ALLOWED)) == f"hello {ALLOWED}"
    assert await paused(get_of(DENIED)) == "reset"
    assert await paused(get_of(ALLOWED), before=18) == f"hello {ALLOWED}"  # cut in its head
    assert await paused(get_of(DENIED), before=18) == "reset"
    stats = await world.egress.stats()
    assert stats["slots"] == 1 and stats["rss_kib"] > 0


async def test_a_killed_egress_process_comes_back_with_the_slots_policy(world: World) -> None:
    await query_in(world.guest, dns.message.make_query(ALLOWED, "A"), world.web_ip, 53)
    first = world.egress.pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    for _ in range(200):
        if world.egress.pid not in (None, first) and world.egress.restarts:
            with contextlib.suppress(Exception):
                if (await world.egress.stats())["slots"] == 1:
                    break
        await asyncio.sleep(0.05)
    assert world.egress.pid not in (None, first)
    # A fresh process knows no answers yet: the guest resolves again, as its TTL would make it.
    await query_in(world.guest, dns.message.make_query(ALLOWED, "A"), world.web_ip, 53)
    assert await in_guest(world.guest, lambda: http_get(world.web_ip, ALLOWED)) == \
        f"hello {ALLOWED}"
    assert await in_guest(world.guest, lambda: http_get(world.web_ip, DENIED)) == "reset"


@pytest.mark.parametrize("world", [2], indirect=True)
async def test_connections_past_the_sandboxs_cap_are_reset(world: World) -> None:
    await query_in(world.guest, dns.message.make_query(ALLOWED, "A"), world.web_ip, 53)

    def hold_two_then_try() -> tuple[str, str]:
        held = [socket.create_connection((world.web_ip, 80), timeout=5) for _ in range(2)]
        time.sleep(0.6)  # both decided (by address, silent) and spliced to the server
        third = http_get(world.web_ip, ALLOWED)
        for conn in held:
            conn.close()
        time.sleep(0.3)
        return third, http_get(world.web_ip, ALLOWED)

    outcome = await in_guest(world.guest, hold_two_then_try)
    assert outcome == ("reset", f"hello {ALLOWED}")


async def test_a_new_owner_re_attaches_the_slot_in_place(world: World) -> None:
    """Another owner key (whose secrets the rules would fill) hands the slot fresh listeners
    while the old ones still serve: the guest never meets a closed port."""
    await world.manager.update_policy(world.slot, EgressPolicy(BY_NAME, owner_key_id="owner-2"))
    await query_in(world.guest, dns.message.make_query(ALLOWED, "A"), world.web_ip, 53)
    assert await in_guest(world.guest, lambda: http_get(world.web_ip, ALLOWED)) == \
        f"hello {ALLOWED}"
    assert (await world.egress.stats())["slots"] == 1
