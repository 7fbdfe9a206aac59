"""Real DNS for the resolver's netns tests: Debian's dnsmasq as the upstream in a netns of its
own (a veth to the root netns, where the resolver runs as the egress process does), and a real
slot whose netns holds the resolver's sockets and the nft sets.

Names answered (TTLs as given, so expiry can be watched): see ``UPSTREAM_RECORDS``; the second
server (the sandbox's own ``dnsServers``) answers ``allowed`` with another address.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import random
import socket
import string
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial

import dns.exception
import dns.message
import dns.query
from pyroute2 import IPRoute

from aenv_nodeagent.network import NetSlot, NetworkConfig, NetworkManager
from aenv_nodeagent.network.namespaces import (
    create_and_enter_netns,
    enter_netns,
    netns_path,
    run_in_fresh_thread,
)
from aenv_nodeagent.network.nft import run_nft
from aenv_nodeagent.network.slots import GATEWAY_IP
from aenv_testing.subnets import free_subnet

from ..network.helpers import INTERNET_SERVER_IP, remove_everything_named
from ..policies import egress

DOMAIN = "p4.aenv-test.example"
ALLOWED = f"allowed.{DOMAIN}"
MIXED = f"mixed.{DOMAIN}"  # one public, one private address
SHORT = f"short.{DOMAIN}"  # TTL 5 s
ALIAS = f"alias.{DOMAIN}"  # CNAME -> ALLOWED
DENIED = "denied.p4-deny.aenv-test.example"  # outside the allowed wildcard
OTHER = f"other.{DOMAIN}"
UDP_NAME = f"udp.{DOMAIN}"  # the fake internet's server (network/helpers.py), TTL 5 s
BIG = f"big.{DOMAIN}"  # a TXT answer too big for one UDP datagram upstream
BIG_TEXT = ["x" * 250] * 8
DNS_PORT = 15053

UPSTREAM_RECORDS = [
    f"--host-record={ALLOWED},203.0.113.10,300",
    f"--host-record={MIXED},203.0.113.11,300",
    f"--host-record={MIXED},10.1.2.3,300",
    f"--host-record={SHORT},203.0.113.12,5",
    f"--host-record={UDP_NAME},{INTERNET_SERVER_IP},5",
    f"--host-record={DENIED},203.0.113.13,300",
    f"--host-record={OTHER},203.0.113.14,300",
    f"--cname={ALIAS},{ALLOWED},300",
    "--txt-record=" + ",".join([BIG, *BIG_TEXT]),
]
OWN_SERVER_RECORDS = [f"--host-record={ALLOWED},203.0.113.99,300"]


@dataclass
class DnsNet:
    node_upstream: str  # the node's configured upstream (dnsmasq)
    own_server: str  # another dnsmasq: a sandbox's dnsServers
    slot: NetSlot
    config: NetworkConfig  # the slots' (for the agent's ResolvedSets)


def _prefix() -> str:
    return "p4" + "".join(random.choices(string.ascii_lowercase, k=4))


def make_upstream_netns(netns: str, root_link: str, subnet: str) -> list[str]:
    """A netns on a veth (``root_link``) from the root netns, which gets the /29's first
    address; returns the two addresses inside. Run in a fresh thread (it enters the netns)."""
    hosts = [str(h) for h in ipaddress.IPv4Network(subnet).hosts()]
    with IPRoute() as root:
        create_and_enter_netns(netns)
        fd = os.open(netns_path(netns), os.O_RDONLY)
        try:
            root.link("add", ifname=root_link, kind="veth",
                      peer={"ifname": "eth0", "net_ns_fd": fd})
        finally:
            os.close(fd)
        index = root.link_lookup(ifname=root_link)[0]
        root.addr("add", index=index, address=hosts[0], prefixlen=29)
        root.link("set", index=index, state="up")
    with IPRoute() as ns:
        for name in ("lo", "eth0"):
            ns.link("set", index=ns.link_lookup(ifname=name)[0], state="up")
        eth0 = ns.link_lookup(ifname="eth0")[0]
        for address in hosts[1:3]:
            ns.addr("add", index=eth0, address=address, prefixlen=29)
    return hosts[1:3]


async def start_dnsmasq(
    netns: str, address: str, records: list[str],
) -> asyncio.subprocess.Process:
    """Debian's dnsmasq on ``address``:53 in ``netns``, answering only ``records`` (its options:
    --host-record, --cname, ...); returns once it answers. The caller terminates it."""
    process = await asyncio.create_subprocess_exec(
        "ip", "netns", "exec", netns, "/usr/sbin/dnsmasq", "--keep-in-foreground",
        "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--bind-interfaces",
        f"--listen-address={address}", "--port=53", "--pid-file=", "--user=root",
        *records,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        await _wait_answering(netns, address, process)
    except BaseException:
        await stop_process(process)
        raise
    return process


async def stop_process(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        process.terminate()
    await process.wait()


async def _wait_answering(netns: str, address: str, process: asyncio.subprocess.Process) -> None:
    for _ in range(100):
        if process.returncode is not None:
            assert process.stderr is not None
            raise RuntimeError(f"dnsmasq exited: {(await process.stderr.read())!r}")
        try:
            await query_in(netns, dns.message.make_query(ALLOWED, "A"), address, port=53,
                           wait_s=0.2)
            return
        except (TimeoutError, dns.exception.Timeout, OSError):
            await asyncio.sleep(0.05)
    raise RuntimeError("dnsmasq never answered")


async def query_in(
    netns: str, query: dns.message.Message, address: str = GATEWAY_IP, port: int = DNS_PORT,
    tcp: bool = False, wait_s: float = 5,
) -> dns.message.Message:
    """Ask ``query`` from inside ``netns`` as a guest's stub would (a fresh thread there)."""
    def ask() -> dns.message.Message:
        enter_netns(netns)
        if tcp:
            return dns.query.tcp(query, address, timeout=wait_s, port=port)
        return dns.query.udp(query, address, timeout=wait_s, port=port)
    return await run_in_fresh_thread(ask, name="test-dns-query")


def resolver_sockets(netns: str) -> tuple[socket.socket, socket.socket]:
    """The UDP and listening TCP socket on the slot's gateway address, as the agent makes."""
    enter_netns(netns)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    udp.bind((GATEWAY_IP, DNS_PORT))
    tcp.bind((GATEWAY_IP, DNS_PORT))
    tcp.listen()
    return udp, tcp


def ensure_resolved_sets(netns: str) -> None:
    """The sets the egress ruleset declares (idempotent: `add set` of an equal set is a no-op)."""
    enter_netns(netns)
    run_nft("\n".join([
        "table inet aenv {",
        "  set resolved4 { type ipv4_addr; flags timeout; }",
        "  set resolved6 { type ipv6_addr; flags timeout; }",
        "}", ""]))


def set_elements(netns: str, name: str = "resolved4") -> Callable[[], str]:
    def listing() -> str:
        enter_netns(netns)
        return run_nft(f"list set inet aenv {name}")
    return listing


@contextlib.asynccontextmanager
async def dns_net() -> AsyncIterator[DnsNet]:
    prefix = _prefix()
    upstream_ns = f"{prefix}up"
    processes: list[asyncio.subprocess.Process] = []
    config = NetworkConfig(prefix=prefix, pool_cidr=free_subnet(22))
    manager = NetworkManager(config)
    try:
        node_upstream, own_server = await run_in_fresh_thread(
            # TEST-NET-2: public to the policy, so a sandbox may name it in dnsServers
            lambda: make_upstream_netns(upstream_ns, f"{prefix}u0",
                                        free_subnet(29, within="198.51.100.0/24")),
            name="test-upstream-netns")
        processes.append(await start_dnsmasq(upstream_ns, node_upstream, UPSTREAM_RECORDS))
        processes.append(await start_dnsmasq(upstream_ns, own_server, OWN_SERVER_RECORDS))
        slot = await manager.create_slot(egress())
        await run_in_fresh_thread(partial(ensure_resolved_sets, slot.netns), name="test-sets")
        yield DnsNet(node_upstream, own_server, slot, config)
    finally:
        for process in processes:
            await stop_process(process)
        await manager.destroy_orphans(keep=set())
        await asyncio.to_thread(remove_everything_named, prefix)
