"""The header-rule relay end to end in one process, with real TLS on both sides: a guest client
trusting only the egress CA, `Interceptor.intercept` as the proxy calls it, and an h11 origin
with a CA of its own on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.egress.rules import parse_rules
from aenv_nodeagent.egress.certs import CA_COMMON_NAME, EgressCA, server_context
from aenv_nodeagent.egress.intercept import Interceptor

from .echo_upstream import EchoUpstream

HOST = "api.aenv-test.example"
SECRET = "sk-live-do-not-leak-4242"
RULES = parse_rules([cluster_pb2.NetworkRule(host=HOST, transforms=[
    cluster_pb2.HeaderTransform(set_headers={"Authorization": "Bearer ${e2b.secrets.openai}"},
                                remove_headers=["x-guest-secret"]),
    cluster_pb2.HeaderTransform(add_headers={"X-Via": "aenv"}),
])])


@dataclass
class World:
    egress_ca: EgressCA
    origin: EchoUpstream
    secrets: dict[str, str] = field(default_factory=lambda: {"openai": SECRET})
    port: int = 0

    def guest(self) -> GuestConnection:
        context = ssl.create_default_context(cadata=self.egress_ca.cert_pem.decode())
        context.set_alpn_protocols(["h2", "http/1.1"])
        return GuestConnection(HOST, self.port, context=context, timeout=30)

    def raw_guest(self) -> ssl.SSLSocket:
        context = ssl.create_default_context(cadata=self.egress_ca.cert_pem.decode())
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=30)
        return context.wrap_socket(sock, server_hostname=HOST)


class GuestConnection(http.client.HTTPSConnection):
    """Connects to the relay on loopback while naming the rule host (SNI and Host)."""

    def connect(self) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


@contextlib.asynccontextmanager
async def _running_world(tmp_path: Path, *, trust_origin: bool,
                         tls: bool = True) -> AsyncIterator[World]:
    origin_ca = EgressCA.generate()  # the origin's own CA, unknown to the system store
    origin = await EchoUpstream(tls=server_context(origin_ca.mint(HOST)) if tls else None).start()
    ca_file = tmp_path / "origin-ca.pem"
    ca_file.write_bytes(origin_ca.cert_pem)
    world = World(EgressCA.generate(), origin)
    interceptor = Interceptor(world.egress_ca, str(ca_file) if trust_origin else None)

    async def proxied(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        first = await reader.read(16384)  # what the proxy peeked to learn the name
        await interceptor.intercept(
            reader, writer, first, HOST, 443, RULES,
            lambda: asyncio.open_connection("127.0.0.1", origin.port), world.secrets.get)

    try:
        relay = await asyncio.start_server(proxied, "127.0.0.1", 0)
        world.port = relay.sockets[0].getsockname()[1]
        async with relay:
            yield world
    finally:
        await origin.stop()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with _running_world(tmp_path, trust_origin=True) as started:
        yield started


@pytest.fixture
def no_leak(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)
    yield
    assert SECRET not in caplog.text


def _get(conn: http.client.HTTPConnection, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


async def test_headers_are_injected_on_every_request_of_a_kept_alive_tls_connection(
    world: World, no_leak: None,
) -> None:
    conn = world.guest()
    try:
        for n in range(3):
            status, _ = await asyncio.to_thread(_get, conn, f"/v1/{n}", {
                "authorization": "Bearer from-the-guest", "X-Guest-Secret": "x", "X-Via": "g"})
            assert status == 200
        assert conn.sock is not None
        peer = conn.sock.getpeercert()
        assert peer is not None and (("commonName", CA_COMMON_NAME),) in peer["issuer"]
        assert conn.sock.selected_alpn_protocol() == "http/1.1"
    finally:
        conn.close()
    assert [seen.target for seen in world.origin.seen] == ["/v1/0", "/v1/1", "/v1/2"]
    assert world.origin.connections == 1  # kept alive on both sides
    for seen in world.origin.seen:
        assert seen.header("authorization") == [f"Bearer {SECRET}"]
        assert seen.header("x-guest-secret") == []
        assert seen.header("x-via") == ["g", "aenv"]


async def test_a_chunked_upload_streams_through_whole(world: World, no_leak: None) -> None:
    chunks = [b"a" * 1000, b"b" * 200_000, b"c"]

    def upload() -> tuple[int, dict[str, int]]:
        conn = world.guest()
        try:
            conn.request("POST", "/upload", body=iter(chunks), encode_chunked=True)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    status, answer = await asyncio.to_thread(upload)
    assert status == 200 and answer["body_bytes"] == 201_001
    (seen,) = world.origin.seen
    assert seen.body == b"".join(chunks)
    assert seen.header("transfer-encoding") == ["chunked"]
    assert seen.header("authorization") == [f"Bearer {SECRET}"]


async def test_a_secret_destroyed_mid_connection_is_refused_on_the_next_request(
    world: World, no_leak: None,
) -> None:
    conn = world.guest()
    try:
        assert (await asyncio.to_thread(_get, conn, "/before", {}))[0] == 200
        del world.secrets["openai"]
        status, body = await asyncio.to_thread(_get, conn, "/after", {})
    finally:
        conn.close()
    assert status == 403
    assert json.loads(body) == {
        "code": 403, "message": "secret 'openai' is not available", "secret": "openai"}
    assert [seen.target for seen in world.origin.seen] == ["/before"]


async def test_a_request_naming_another_host_than_the_sni_is_421(world: World) -> None:
    conn = world.guest()
    try:
        status, body = await asyncio.to_thread(_get, conn, "/", {"Host": "evil.example"})
    finally:
        conn.close()
    assert status == 421 and HOST in json.loads(body)["message"]
    assert world.origin.seen == []


async def test_expect_100_continue_waits_for_the_origins_go_ahead(world: World) -> None:
    def exchange() -> bytes:
        with world.raw_guest() as sock:
            sock.sendall(f"PUT /put HTTP/1.1\r\nHost: {HOST}\r\nContent-Length: 5\r\n"
                         "Expect: 100-continue\r\n\r\n".encode())
            interim = sock.recv(4096)
            assert interim.startswith(b"HTTP/1.1 100 ")
            sock.sendall(b"hello")
            return _read_response(sock)

    final = await asyncio.to_thread(exchange)
    assert final.startswith(b"HTTP/1.1 200 ")
    assert world.origin.seen[0].body == b"hello"


async def test_an_upgrade_is_passed_through_after_the_rules(world: World) -> None:
    def exchange() -> tuple[bytes, bytes]:
        with world.raw_guest() as sock:
            sock.sendall(f"GET /ws HTTP/1.1\r\nHost: {HOST}\r\nConnection: Upgrade\r\n"
                         "Upgrade: echo\r\n\r\n".encode())
            head = _read_head(sock)
            sock.sendall(b"ping")
            return head, sock.recv(4096)

    head, echoed = await asyncio.to_thread(exchange)
    assert head.startswith(b"HTTP/1.1 101 ") and echoed == b"ping"
    assert world.origin.seen[0].header("authorization") == [f"Bearer {SECRET}"]


async def test_an_http_1_0_request_without_host_reaches_the_origin_named(world: World) -> None:
    def exchange() -> bytes:
        with world.raw_guest() as sock:
            sock.sendall(b"GET /old HTTP/1.0\r\n\r\n")
            return _read_response(sock)

    assert (await asyncio.to_thread(exchange)).startswith(b"HTTP/1.1 200 ")
    (seen,) = world.origin.seen
    assert seen.header("host") == [HOST] and seen.header("authorization") == [f"Bearer {SECRET}"]


async def test_connect_is_refused(world: World) -> None:
    def exchange() -> bytes:
        with world.raw_guest() as sock:
            sock.sendall(f"CONNECT {HOST}:443 HTTP/1.1\r\nHost: {HOST}:443\r\n\r\n".encode())
            return _read_response(sock)

    assert (await asyncio.to_thread(exchange)).startswith(b"HTTP/1.1 405 ")


async def test_an_origin_that_fails_verification_is_a_502(tmp_path: Path) -> None:
    async with _running_world(tmp_path, trust_origin=False) as world:
        conn = world.guest()
        try:
            status, body = await asyncio.to_thread(_get, conn, "/", {})
        finally:
            conn.close()
    assert status == 502
    assert "certificate" in json.loads(body)["message"]
    assert world.origin.seen == []


async def test_plain_http_gets_the_rules_without_tls(tmp_path: Path, no_leak: None) -> None:
    async with _running_world(tmp_path, trust_origin=True, tls=False) as world:
        conn = http.client.HTTPConnection("127.0.0.1", world.port, timeout=30)
        try:
            status, _ = await asyncio.to_thread(_get, conn, "/plain", {"Host": HOST})
        finally:
            conn.close()
    assert status == 200
    assert world.origin.seen[0].header("authorization") == [f"Bearer {SECRET}"]


def _read_head(sock: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _read_response(sock: ssl.SSLSocket) -> bytes:
    """A response with a Content-Length, read whole."""
    data = _read_head(sock)
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
               if line.lower().startswith(b"content-length:")]
    assert lengths, head
    while len(body) < lengths[0] and (chunk := sock.recv(4096)):
        body += chunk
    return head + b"\r\n\r\n" + body
