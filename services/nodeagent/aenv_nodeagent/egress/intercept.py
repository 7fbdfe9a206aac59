"""Connections to a host with header rules: TLS terminated with the cluster CA, HTTP relayed.

The proxy (`proxy.py`) hands a guest connection here once the policy allowed it and
`rules_for(name)` is non-empty. When the guest's first bytes are a TLS ClientHello, the
connection is terminated with a leaf for `name` minted by the cluster's egress CA (TLS 1.2+,
ALPN `http/1.1` only, the only protocol the relay speaks), and the upstream connection is TLS
again, verified against the system trust store plus the node's `egress_upstream_ca_file`, with
SNI = `name`: a guest trusting the platform's CA never loses the upstream's authentication.
Plain HTTP is relayed as it is. Either way `relay.Relay` applies the rules to every request.

`Interceptor` is made once per egress process, from the CA and upstream trust of `configure`;
its bound `intercept` is the contract's
`intercept(client_reader, client_writer, first_bytes, name, port, rules, dial, secrets)`:
`dial()` opens a connection to the destination the proxy already vetted (through the sandbox's
dialer: direct or its SOCKS5 proxy), called again when an upstream keep-alive connection ends;
`secrets(name)` is the sandbox owner's secret value or None (`SecretValues.value` bound to the
sandbox's owner key id).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence

import h11

from aenv_common.egress.rules import NetworkRule

from .certs import EgressCA, LeafContexts
from .relay import Relay
from .streams import ByteStream, PlainStream, TlsStream
from .transforms import SecretLookup

log = logging.getLogger(__name__)

Dial = Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
# A TLS record of type handshake: how every ClientHello starts.
_TLS_HANDSHAKE = 0x16
HANDSHAKE_TIMEOUT_S = 15.0
IDLE_TIMEOUT_S = 300.0


def upstream_context(extra_ca_file: str | None) -> ssl.SSLContext:
    """Verifying TLS toward rule hosts: the system store, plus the node's extra CAs."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    if extra_ca_file:
        context.load_verify_locations(cafile=extra_ca_file)
    return context


def is_tls(first_bytes: bytes) -> bool:
    return bool(first_bytes) and first_bytes[0] == _TLS_HANDSHAKE


class Interceptor:
    def __init__(self, ca: EgressCA, upstream_ca_file: str | None = None, *,
                 idle_timeout_s: float = IDLE_TIMEOUT_S) -> None:
        self._leaves = LeafContexts(ca)
        self._upstream = upstream_context(upstream_ca_file)
        self._idle = idle_timeout_s

    async def intercept(
        self,
        client_reader: asyncio.StreamReader,
        client_writer: asyncio.StreamWriter,
        first_bytes: bytes,
        name: str,
        port: int,
        rules: Sequence[NetworkRule],
        dial: Dial,
        secrets: SecretLookup,
    ) -> None:
        """Serves the guest connection until it ends; closes it and any upstream connection."""
        guest: ByteStream = PlainStream(client_reader, client_writer, first_bytes)
        tls = is_tls(first_bytes)
        try:
            if tls:
                async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                    guest = await TlsStream.accept(guest, self._leaves.context_for(name))
            relay = Relay(guest, name, rules, secrets,
                          lambda: self._open_upstream(dial, name, tls), self._idle)
            await relay.run()
        except (ssl.SSLError, ConnectionError, TimeoutError, h11.ProtocolError) as exc:
            log.debug("egress rule connection ended",
                      extra={"host": name, "port": port, "error": type(exc).__name__})
        finally:
            await guest.close()

    async def _open_upstream(self, dial: Dial, name: str, tls: bool) -> ByteStream:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
            reader, writer = await dial()
            stream = PlainStream(reader, writer)
            if not tls:
                return stream
            try:
                return await TlsStream.connect(stream, self._upstream, name)
            except BaseException:
                await stream.close()
                raise
