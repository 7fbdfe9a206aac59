"""The egress dialers against a SOCKS5 responder written here, so every protocol edge (refused
methods, bad credentials, reply codes, truncation, silence, TLS to the proxy) is exercised on a
real loopback socket. The same dialers against Debian's microsocks and stunnel run in
tests/e2e/egress/test_dialers_real.py."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import ssl
import struct
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.egress.blocked import IPAddress
from aenv_common.egress.policy import EgressRules
from aenv_common.egress.rules import PROXY_PASSWORD_AAD
from aenv_common.errors import DeadlineExceeded, PermissionDenied, Unavailable
from aenv_common.secrets.sealing import SecretsKey, seal
from aenv_nodeagent.egress.certs import EgressCA, server_context
from aenv_nodeagent.egress.dialers import (
    DirectDialer,
    ProxyTls,
    Socks5Dialer,
    blocked_by,
    connect_request,
    dialer_for,
)

LOOPBACK = ipaddress.ip_address("127.0.0.1")
PASSWORD = "pa55-w0rd-not-for-logs"


def nothing_blocked(_: IPAddress) -> bool:
    return False


@dataclass
class Responder:
    """A SOCKS5 server with knobs. After a successful CONNECT it echoes what it receives."""

    username: str = ""
    password: str = ""
    method_reply: int | None = None  # answer this method instead of the one offered
    version_reply: int = 5
    connect_reply: int = 0
    bound_atyp: int = 1
    silent: bool = False
    close_after_greeting: bool = False
    tls: ssl.SSLContext | None = None
    requests: list[bytes] = field(default_factory=list)
    credentials: list[tuple[str, str]] = field(default_factory=list)
    server_names: list[str | None] = field(default_factory=list)
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._session(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        _, count = await reader.readexactly(2)
        methods = await reader.readexactly(count)
        if self.silent:
            await asyncio.sleep(3600)
        if self.close_after_greeting:
            return
        chosen = self.method_reply if self.method_reply is not None else methods[0]
        writer.write(bytes([self.version_reply, chosen]))
        if chosen == 0x02:
            _, ulen = await reader.readexactly(2)
            user = (await reader.readexactly(ulen)).decode()
            (plen,) = await reader.readexactly(1)
            password = (await reader.readexactly(plen)).decode()
            self.credentials.append((user, password))
            ok = (user, password) == (self.username, self.password)
            writer.write(bytes([1, 0 if ok else 1]))
            if not ok:
                return
        head = await reader.readexactly(4)
        atyp = head[3]
        size = {1: 4, 4: 16}.get(atyp) or (await reader.readexactly(1))[0]
        body = await reader.readexactly(size + 2)
        self.requests.append(head + (bytes([size]) if atyp == 3 else b"") + body)
        bound = {1: b"\x01" + bytes(4), 4: b"\x04" + bytes(16), 3: b"\x03\x03abc"}.get(
            self.bound_atyp, bytes([self.bound_atyp]))
        writer.write(bytes([5, self.connect_reply, 0]) + bound + struct.pack("!H", 4242))
        while data := await reader.read(4096):
            writer.write(data)
            await writer.drain()


@contextlib.asynccontextmanager
async def running(responder: Responder) -> AsyncIterator[Responder]:
    def sni(sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        responder.server_names.append(name)

    if responder.tls is not None:
        responder.tls.sni_callback = sni
    server = await asyncio.start_server(responder.serve, "127.0.0.1", 0, ssl=responder.tls)
    responder.port = server.sockets[0].getsockname()[1]
    try:
        yield responder
    finally:
        server.close()
        await server.wait_closed()


def dialer(responder: Responder, **kwargs: object) -> Socks5Dialer:
    options: dict[str, object] = {"blocked": nothing_blocked, **kwargs}
    return Socks5Dialer("127.0.0.1", responder.port, **options)  # type: ignore[arg-type]


async def roundtrip(streams: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> bytes:
    reader, writer = streams
    writer.write(b"ping")
    await writer.drain()
    data = await reader.readexactly(4)
    writer.close()
    return data


def test_connect_request_encodes_ipv4_ipv6_and_names() -> None:
    assert connect_request(ipaddress.ip_address("203.0.113.7"), 443) == (
        b"\x05\x01\x00\x01" + bytes([203, 0, 113, 7]) + b"\x01\xbb")
    assert connect_request("2001:db8::1", 80) == (
        b"\x05\x01\x00\x04" + ipaddress.ip_address("2001:db8::1").packed + b"\x00\x50")
    assert connect_request("Api.Example.com.", 8080) == (
        b"\x05\x01\x00\x03\x0fApi.Example.com\x1f\x90")
    with pytest.raises(Unavailable):
        connect_request("a" * 256, 80)
    with pytest.raises(Unavailable):
        connect_request("example.com", 0)


async def test_no_auth_connect_by_name_then_bytes_flow() -> None:
    async with running(Responder()) as proxy:
        assert await roundtrip(await dialer(proxy).open("allowed.example", 443)) == b"ping"
    assert proxy.requests == [b"\x05\x01\x00\x03\x0fallowed.example\x01\xbb"]
    assert proxy.credentials == []


@pytest.mark.parametrize("atyp", [1, 3, 4])
async def test_every_bound_address_type_is_drained(atyp: int) -> None:
    async with running(Responder(bound_atyp=atyp)) as proxy:
        assert await roundtrip(await dialer(proxy).open("203.0.113.9", 80)) == b"ping"


async def test_user_password_auth_sends_the_credentials() -> None:
    async with running(Responder(username="alice", password=PASSWORD)) as proxy:
        streams = await dialer(proxy, username="alice", password=PASSWORD).open("x.example", 80)
        assert await roundtrip(streams) == b"ping"
    assert proxy.credentials == [("alice", PASSWORD)]


async def test_wrong_password_is_permission_denied_without_the_password() -> None:
    async with running(Responder(username="alice", password="right")) as proxy:
        with pytest.raises(PermissionDenied) as caught:
            await dialer(proxy, username="alice", password=PASSWORD).open("x.example", 80)
    assert "username/password" in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_password_and_ca_are_in_no_repr() -> None:
    ca_pem = EgressCA.generate().cert_pem.decode()
    d = Socks5Dialer("proxy.example", 1080, "alice", PASSWORD, ProxyTls("p", ca_pem))
    assert repr(d) == ("Socks5Dialer('proxy.example:1080', auth=user/password, "
                       "tls=ProxyTls(server_name='p', trust=own CA))")


@pytest.mark.parametrize(
    ("responder", "error", "text"),
    [
        (Responder(method_reply=0xFF), PermissionDenied, "authentication method"),
        (Responder(version_reply=4), Unavailable, "does not speak SOCKS5"),
        (Responder(connect_reply=2), Unavailable, "connection not allowed by ruleset"),
        (Responder(connect_reply=5), Unavailable, "connection refused"),
        (Responder(connect_reply=0x42), Unavailable, "reply code 66"),
        (Responder(bound_atyp=9), Unavailable, "address type 9"),
        (Responder(close_after_greeting=True), Unavailable, "closed the connection"),
    ],
)
async def test_proxy_failures_are_typed(
    responder: Responder, error: type[Exception], text: str
) -> None:
    async with running(responder) as proxy:
        with pytest.raises(error, match=text):
            await dialer(proxy).open("x.example", 80)


async def test_a_proxy_that_offers_no_auth_to_a_user_is_refused() -> None:
    # A proxy must not downgrade a configured username to "no authentication".
    async with running(Responder(method_reply=0x00)) as proxy:
        with pytest.raises(PermissionDenied):
            await dialer(proxy, username="alice", password=PASSWORD).open("x.example", 80)


async def test_a_silent_proxy_times_out() -> None:
    async with running(Responder(silent=True)) as proxy:
        with pytest.raises(DeadlineExceeded):
            await dialer(proxy, handshake_timeout_s=0.2).open("x.example", 80)


async def test_the_proxy_address_is_checked_against_blocked_ranges() -> None:
    async with running(Responder()) as proxy:
        with pytest.raises(PermissionDenied, match="blocked"):
            await Socks5Dialer("127.0.0.1", proxy.port).open("x.example", 80)
        extra = blocked_by(["198.51.100.0/24"])
        assert extra(ipaddress.ip_address("198.51.100.3")) and extra(LOOPBACK)
        assert not extra(ipaddress.ip_address("203.0.113.3"))


async def test_the_proxy_name_is_resolved_per_dial_and_pinned_to_an_unblocked_address() -> None:
    answers = [[ipaddress.ip_address("10.1.2.3"), LOOPBACK], [ipaddress.ip_address("10.1.2.3")]]
    asked: list[str] = []

    async def resolve(name: str) -> list[IPAddress]:
        asked.append(name)
        return answers.pop(0)

    def blocked(address: IPAddress) -> bool:
        return address in ipaddress.ip_network("10.0.0.0/8")

    async with running(Responder()) as proxy:
        d = Socks5Dialer("proxy.example", proxy.port, blocked=blocked, resolve=resolve)
        assert await roundtrip(await d.open("x.example", 80)) == b"ping"
        # The name now resolves into a blocked range (rebinding): nothing is dialled.
        with pytest.raises(PermissionDenied, match="blocked"):
            await d.open("x.example", 80)
    assert asked == ["proxy.example", "proxy.example"]
    assert len(proxy.requests) == 1


def _tls_proxy(ca: EgressCA, name: str, *, max_version: ssl.TLSVersion | None = None) -> Responder:
    context = server_context(ca.mint(name))
    context.set_alpn_protocols([])
    if max_version is not None:
        context.set_ciphers("DEFAULT:@SECLEVEL=0")
        context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
        context.maximum_version = max_version
    return Responder(tls=context)


async def test_tls_to_the_proxy_verifies_with_its_own_ca_and_sends_the_server_name() -> None:
    ca = EgressCA.generate()
    async with running(_tls_proxy(ca, "socks.example")) as proxy:
        tls = ProxyTls(server_name="socks.example", ca_cert_pem=ca.cert_pem.decode())
        assert await roundtrip(await dialer(proxy, tls=tls).open("x.example", 80)) == b"ping"
    assert proxy.server_names == ["socks.example"]


async def test_tls_sni_defaults_to_the_proxy_host() -> None:
    ca = EgressCA.generate()
    resolved: list[IPAddress] = [LOOPBACK]

    async def resolve(name: str) -> list[IPAddress]:
        return resolved

    async with running(_tls_proxy(ca, "socks.example")) as proxy:
        tls = ProxyTls(ca_cert_pem=ca.cert_pem.decode())
        d = Socks5Dialer("socks.example", proxy.port, tls=tls, blocked=nothing_blocked,
                         resolve=resolve)
        assert await roundtrip(await d.open("x.example", 80)) == b"ping"
    assert proxy.server_names == ["socks.example"]


@pytest.mark.parametrize(
    ("tls_for", "expect"),
    [
        # The system store does not hold the test CA.
        (lambda ca: ProxyTls(server_name="socks.example"), "unable to get local issuer"),
        # Another name than the certificate's.
        (lambda ca: ProxyTls("other.example", ca.cert_pem.decode()), "Hostname mismatch"),
    ],
)
async def test_tls_that_does_not_verify_fails_closed(
    tls_for: Callable[[EgressCA], ProxyTls], expect: str
) -> None:
    ca = EgressCA.generate()
    async with running(_tls_proxy(ca, "socks.example")) as proxy:
        with pytest.raises(Unavailable, match=expect):
            await dialer(proxy, tls=tls_for(ca)).open("x.example", 80)
    assert proxy.requests == []


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
async def test_tls_below_1_2_is_refused() -> None:
    ca = EgressCA.generate()
    responder = _tls_proxy(ca, "socks.example", max_version=ssl.TLSVersion.TLSv1_1)
    async with running(responder) as proxy:
        tls = ProxyTls("socks.example", ca.cert_pem.decode())
        with pytest.raises(Unavailable):
            await dialer(proxy, tls=tls).open("x.example", 80)
    assert proxy.requests == []
    assert tls.context().minimum_version is ssl.TLSVersion.TLSv1_2


def test_a_ca_that_is_not_pem_is_a_typed_error() -> None:
    with pytest.raises(Unavailable, match="CA certificate"):
        Socks5Dialer("p.example", 1080, tls=ProxyTls(ca_cert_pem="not a certificate"))


async def test_direct_dialer_pins_a_checked_address() -> None:
    received: list[bytes] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.readexactly(4))
        writer.write(received[-1])
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(PermissionDenied, match="blocked"):
            await DirectDialer().open(LOOPBACK, port)

        async def resolve(name: str) -> list[IPAddress]:
            return [ipaddress.ip_address("10.9.9.9"), LOOPBACK]

        d = DirectDialer(blocked=lambda a: a.packed[0] == 10, resolve=resolve)
        assert await roundtrip(await d.open("echo.example", port)) == b"ping"
    finally:
        server.close()
        await server.wait_closed()
    assert received == [b"ping"]


def _policy_with_proxy(sealed: bytes, **tls: object) -> EgressRules:
    proxy = cluster_pb2.EgressProxy(
        address="203.0.113.5:1080", username="alice", sealed_password=sealed, **tls)  # type: ignore[arg-type]
    return EgressRules.from_proto(
        cluster_pb2.NetworkPolicy(allow_internet_access=True, egress_proxy=proxy))


def test_dialer_for_opens_the_sealed_password() -> None:
    key = SecretsKey.generate()
    sealed = seal(key, PASSWORD.encode(), PROXY_PASSWORD_AAD)
    made = dialer_for(_policy_with_proxy(sealed, tls=True, tls_server_name="socks.example"), key)
    assert isinstance(made, Socks5Dialer)
    assert made.address == "203.0.113.5:1080" and PASSWORD not in repr(made)
    assert made._password == PASSWORD
    direct = EgressRules.from_proto(cluster_pb2.NetworkPolicy(allow_internet_access=True))
    assert isinstance(dialer_for(direct, key), DirectDialer)


def test_dialer_for_refuses_a_password_sealed_elsewhere() -> None:
    sealed = seal(SecretsKey.generate(), PASSWORD.encode(), PROXY_PASSWORD_AAD)
    with pytest.raises(Unavailable, match="cannot be opened") as caught:
        dialer_for(_policy_with_proxy(sealed), SecretsKey.generate())
    assert PASSWORD not in str(caught.value)
