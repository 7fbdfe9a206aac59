"""How the egress process opens an upstream connection: directly, or through the sandbox's
SOCKS5 proxy (E2B's `network.egressProxy`).

Both dialers pin what they connect to: a name is resolved once per dial, every address is checked
against the blocked ranges (private, link-local, the node's own...) and the connection goes to a
checked address, never to a name the OS would resolve again. So a proxy whose name later resolves
into the host's networks (DNS rebinding) reaches nothing there.

`Socks5Dialer` speaks RFC 1928 CONNECT (the destination by IP or by name: the proxy resolves
names) with RFC 1929 user/password when a username is set, optionally inside TLS to the proxy
(TLS 1.2+, verified against the system store or the policy's own CA, which then replaces it).
Every failure is a typed error and the connection is closed: nothing falls back to a direct
dial. The password lives only in the dialer; it is never in a message, a log or a repr.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from aenv_common.egress.blocked import BLOCKED_NETWORKS, AddressSet, IPAddress
from aenv_common.egress.policy import EgressRules
from aenv_common.egress.rules import PROXY_PASSWORD_AAD
from aenv_common.errors import AenvError, DeadlineExceeded, PermissionDenied, Unavailable
from aenv_common.secrets.sealing import SealBroken, SecretsKey, open_sealed

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
# Resolves a name to its addresses (the node's upstream resolvers in the egress process).
Resolver = Callable[[str], Awaitable[list[IPAddress]]]
# True for an address no upstream connection may reach.
Blocked = Callable[[IPAddress], bool]

CONNECT_TIMEOUT_S = 10.0
HANDSHAKE_TIMEOUT_S = 10.0

_SOCKS_VERSION = 5
_NO_AUTH, _USER_PASS, _NO_ACCEPTABLE = 0x00, 0x02, 0xFF
_CMD_CONNECT = 1
_ATYP_IPV4, _ATYP_NAME, _ATYP_IPV6 = 1, 3, 4
_REPLY_ERRORS = {
    1: "general SOCKS server failure",
    2: "connection not allowed by ruleset",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}


class Dialer(Protocol):
    """Opens one upstream TCP connection for the egress process."""

    async def open(self, host: str | IPAddress, port: int) -> Streams: ...


def blocked_by(extra_cidrs: Iterable[str] = ()) -> Blocked:
    """The blocked-address test: ALWAYS_BLOCKED plus ``extra_cidrs`` (the node's own addresses
    and its slot pool, from the egress process's configure)."""
    networks = AddressSet(
        [*BLOCKED_NETWORKS, *(ipaddress.ip_network(c, strict=False) for c in extra_cidrs)])
    return networks.__contains__


async def system_resolve(name: str) -> list[IPAddress]:
    """The OS resolver (getaddrinfo); the egress process passes its own upstream resolver."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise Unavailable(f"cannot resolve {name!r}: {exc.strerror}") from exc
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))


@dataclass(frozen=True)
class ProxyTls:
    """TLS to the proxy. ``ca_cert_pem``: PEM certificates trusted instead of the system store;
    ``server_name``: the name verified and sent as SNI (default: the proxy address's host)."""

    server_name: str = ""
    ca_cert_pem: str = ""

    def __repr__(self) -> str:  # the CA is the user's: not echoed anywhere
        trust = "own CA" if self.ca_cert_pem else "system store"
        return f"ProxyTls(server_name={self.server_name!r}, trust={trust})"

    def context(self) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(cadata=self.ca_cert_pem or None)
        except (ssl.SSLError, ValueError) as exc:
            raise Unavailable("egress proxy tls: the CA certificate cannot be loaded") from exc
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        return ctx


class DirectDialer:
    """Connects from the egress process's own netns to a checked, pinned address."""

    def __init__(
        self,
        *,
        blocked: Blocked | None = None,
        resolve: Resolver = system_resolve,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> None:
        self._blocked = blocked or blocked_by()
        self._resolve = resolve
        self._connect_timeout_s = connect_timeout_s

    def __repr__(self) -> str:
        return "DirectDialer()"

    async def open(self, host: str | IPAddress, port: int) -> Streams:
        addresses = await _allowed_addresses(host, self._resolve, self._blocked, "destination")
        return await _connect(addresses, port, self._connect_timeout_s, None, None)


class Socks5Dialer:
    """Connects through the SOCKS5 proxy at ``host`` (a name or an address literal):``port``."""

    def __init__(
        self,
        host: str,
        port: int,
        username: str = "",
        password: str = "",
        tls: ProxyTls | None = None,
        *,
        blocked: Blocked | None = None,
        resolve: Resolver = system_resolve,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
    ) -> None:
        self._host, self._port = host, port
        if len(username.encode()) > 255 or len(password.encode()) > 255:
            raise Unavailable("egress proxy: username and password are at most 255 bytes each")
        if password and not username:
            raise Unavailable("egress proxy: a password needs a username")
        self._username = username
        self._password = password
        self._tls = tls
        self._tls_context = tls.context() if tls else None
        self._blocked = blocked or blocked_by()
        self._resolve = resolve
        self._connect_timeout_s = connect_timeout_s
        self._handshake_timeout_s = handshake_timeout_s

    def __repr__(self) -> str:
        auth = "user/password" if self._username else "none"
        return f"Socks5Dialer({self.address!r}, auth={auth}, tls={self._tls!r})"

    @property
    def address(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self._port}"

    async def open(self, host: str | IPAddress, port: int) -> Streams:
        addresses = await _allowed_addresses(self._host, self._resolve, self._blocked, "proxy")
        sni = (self._tls.server_name or self._host) if self._tls else None
        reader, writer = await _connect(
            addresses, self._port, self._connect_timeout_s, self._tls_context, sni)
        try:
            async with asyncio.timeout(self._handshake_timeout_s):
                await self._handshake(reader, writer, host, port)
        except BaseException as exc:
            writer.transport.abort()
            if isinstance(exc, TimeoutError):
                raise DeadlineExceeded(f"egress proxy {self.address}: no SOCKS5 answer") from exc
            if isinstance(exc, asyncio.IncompleteReadError | ConnectionError):
                raise Unavailable(f"egress proxy {self.address} closed the connection") from exc
            raise
        return reader, writer

    async def _handshake(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        host: str | IPAddress, port: int,
    ) -> None:
        method = _USER_PASS if self._username else _NO_AUTH
        writer.write(bytes([_SOCKS_VERSION, 1, method]))
        version, chosen = await reader.readexactly(2)
        if version != _SOCKS_VERSION:
            raise Unavailable(f"egress proxy {self.address} does not speak SOCKS5")
        if chosen != method:
            raise PermissionDenied(
                f"egress proxy {self.address} refused the authentication method "
                f"({'user/password' if self._username else 'none'})")
        if method == _USER_PASS:
            await self._authenticate(reader, writer)
        writer.write(connect_request(host, port))
        await _read_connect_reply(reader, self.address)

    async def _authenticate(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        user, password = self._username.encode(), self._password.encode()
        writer.write(bytes([1, len(user)]) + user + bytes([len(password)]) + password)
        _, status = await reader.readexactly(2)
        if status != 0:
            raise PermissionDenied(f"egress proxy {self.address} refused the username/password")


def connect_request(host: str | IPAddress, port: int) -> bytes:
    """RFC 1928 CONNECT for ``host`` (an address literal goes as an address, a name as a name)."""
    if not 0 < port < 65536:
        raise Unavailable(f"bad destination port {port}")
    head = bytes([_SOCKS_VERSION, _CMD_CONNECT, 0])
    address = _literal(host)
    if isinstance(address, ipaddress.IPv4Address):
        target = bytes([_ATYP_IPV4]) + address.packed
    elif isinstance(address, ipaddress.IPv6Address):
        target = bytes([_ATYP_IPV6]) + address.packed
    else:
        name = str(host).rstrip(".").encode("ascii", "replace")  # names are LDH (punycode)
        if not 0 < len(name) <= 255 or b"?" in name:
            raise Unavailable(f"destination name {str(host)!r} cannot be sent to a SOCKS5 proxy")
        target = bytes([_ATYP_NAME, len(name)]) + name
    return head + target + struct.pack("!H", port)


async def _read_connect_reply(reader: asyncio.StreamReader, proxy: str) -> None:
    version, reply, _, atyp = await reader.readexactly(4)
    if version != _SOCKS_VERSION:
        raise Unavailable(f"egress proxy {proxy} answered CONNECT with a non-SOCKS5 reply")
    if reply != 0:
        reason = _REPLY_ERRORS.get(reply, f"reply code {reply}")
        raise Unavailable(f"egress proxy {proxy} refused the connection: {reason}")
    # Drain the bound address so the stream starts at the destination's first byte.
    if atyp == _ATYP_IPV4:
        await reader.readexactly(4 + 2)
    elif atyp == _ATYP_IPV6:
        await reader.readexactly(16 + 2)
    elif atyp == _ATYP_NAME:
        (length,) = await reader.readexactly(1)
        await reader.readexactly(length + 2)
    else:
        raise Unavailable(f"egress proxy {proxy} answered with address type {atyp}")


def _literal(host: str | IPAddress) -> IPAddress | None:
    if isinstance(host, ipaddress.IPv4Address | ipaddress.IPv6Address):
        return host
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


async def _allowed_addresses(
    host: str | IPAddress, resolve: Resolver, blocked: Blocked, what: str
) -> list[IPAddress]:
    """``host``'s addresses that are not blocked (resolved now when a name); none is an error."""
    literal = _literal(host)
    addresses = [literal] if literal is not None else await resolve(str(host))
    allowed = [a for a in addresses if not blocked(a)]
    if not allowed:
        raise PermissionDenied(
            f"egress {what} {str(host)!r} is in a blocked address range" if addresses
            else f"egress {what} {str(host)!r} has no address")
    return allowed


async def _connect(
    addresses: list[IPAddress], port: int, timeout_s: float,
    ctx: ssl.SSLContext | None, server_name: str | None,
) -> Streams:
    """The first of ``addresses`` that answers (TLS handshake included when ``ctx``)."""
    last: AenvError = Unavailable("no address to connect to")
    for address in addresses:
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.open_connection(
                    str(address), port, ssl=ctx, server_hostname=server_name if ctx else None,
                    ssl_handshake_timeout=timeout_s if ctx else None)
        except ssl.SSLError as exc:
            # A certificate that does not verify is not retried on another address.
            reason = getattr(exc, "verify_message", None) or exc.reason
            raise Unavailable(f"tls to {_hostport(address, port)} failed: {reason}") from exc
        except TimeoutError:
            last = DeadlineExceeded(f"connect to {_hostport(address, port)} timed out")
        except OSError as exc:
            last = Unavailable(f"connect to {_hostport(address, port)}: {exc.strerror or exc}")
    raise last


def _hostport(address: IPAddress, port: int) -> str:
    return f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"


def dialer_for(
    rules: EgressRules,
    secrets_key: SecretsKey,
    *,
    blocked: Blocked | None = None,
    resolve: Resolver = system_resolve,
) -> Dialer:
    """The dialer of a sandbox's policy: its SOCKS5 proxy when it names one, else direct. The
    proxy password is opened here, inside the egress process, and kept only by the dialer."""
    proxy = rules.proxy
    if proxy is None:
        return DirectDialer(blocked=blocked, resolve=resolve)
    password = ""
    if proxy.sealed_password:
        try:
            password = open_sealed(secrets_key, proxy.sealed_password, PROXY_PASSWORD_AAD).decode()
        except (SealBroken, UnicodeDecodeError) as exc:
            raise Unavailable(
                f"egress proxy {proxy.address}: its password cannot be opened "
                "with this cluster's secrets key") from exc
    tls = ProxyTls(proxy.tls_server_name, proxy.tls_ca_cert) if proxy.tls else None
    return Socks5Dialer(
        proxy.host, proxy.port, proxy.username, password, tls, blocked=blocked, resolve=resolve)
