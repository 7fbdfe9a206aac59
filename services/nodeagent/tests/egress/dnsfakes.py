"""Policies and messages for the resolver's tests, and a loopback UDP server that answers as
a scripted upstream (to forge what a real server would never send)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, cast

import dns.message
import dns.rdatatype

from aenv.cluster.v1 import cluster_pb2
from aenv_common.egress import EgressRules

Script = Callable[[dns.message.Message], list[bytes]]


def rules(
    allow: Sequence[str] = (), deny: Sequence[str] = (), dns_servers: Sequence[str] = (),
) -> EgressRules:
    return EgressRules.from_proto(cluster_pb2.NetworkPolicy(
        allow_internet_access=True, allow_out=list(allow), deny_out=list(deny),
        dns_servers=list(dns_servers)))


def query(name: str, rdtype: str = "A", **kwargs: Any) -> dns.message.QueryMessage:
    return dns.message.make_query(name, dns.rdatatype.from_text(rdtype), **kwargs)


class ScriptedUpstream(asyncio.DatagramProtocol):
    """Answers every datagram with what ``script`` returns for the parsed query, in order."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.queries: list[dns.message.Message] = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Python 3.11's selector transport is not a DatagramTransport subclass, though it is one.
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        asked = dns.message.from_wire(data)
        self.queries.append(asked)
        assert self.transport is not None
        for wire in self.script(asked):
            self.transport.sendto(wire, addr)


async def scripted_upstream(script: Script) -> tuple[ScriptedUpstream, str]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.create_datagram_endpoint(
        lambda: ScriptedUpstream(script), local_addr=("127.0.0.1", 0))
    port = transport.get_extra_info("sockname")[1]
    return protocol, f"127.0.0.1:{port}"
