"""HTTP/1.1 relay of one guest connection to a rule host, request by request (h11 both ways).

For each request the guest sends: its Host must be the connection's host name (the TLS SNI, or
the Host the proxy decided on) else 421; CONNECT is 405; the host's rules rewrite the headers
(a secret that no longer resolves: 403 naming it, no upstream contact); then the request goes
to the upstream connection (opened on first need, again after the upstream closed one), bodies
stream both ways with backpressure (content-length, chunked, `Expect: 100-continue` answered by
the upstream's own 100), and the connection is kept alive as both sides allow. An upgrade
(`101 Switching Protocols`, e.g. a WebSocket) is passed through: the handshake request gets the
rules, after which bytes are spliced unchanged. Answers the relay makes itself close the
connection (the guest's request body is not read). Header values are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import cast
from urllib.parse import urlsplit

import h11

from aenv_common import errors
from aenv_common.egress.rules import NetworkRule

from .streams import ByteStream
from .transforms import SecretLookup, SecretUnavailable, apply_rules

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
OpenUpstream = Callable[[], Awaitable[ByteStream]]


class UpstreamFailed(Exception):
    """The upstream could not be reached or did not prove to be the host; the message is for
    the guest (it names the host, never a header)."""


class _Side:
    """One h11 connection over its byte stream."""

    def __init__(self, role: type[h11.CLIENT] | type[h11.SERVER], stream: ByteStream,
                 idle_timeout_s: float) -> None:
        self.conn = h11.Connection(role, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.stream = stream
        self._idle = idle_timeout_s

    async def next_event(self) -> h11.Event | type[h11.PAUSED]:
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return cast(h11.Event | type[h11.PAUSED], event)
            async with asyncio.timeout(self._idle):
                self.conn.receive_data(await self.stream.read())

    async def send(self, event: h11.Event) -> None:
        data = self.conn.send(event)
        if data:
            await self.stream.write(data)

    @property
    def reusable(self) -> bool:
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE


class Relay:
    def __init__(self, guest: ByteStream, name: str, rules: Sequence[NetworkRule],
                 secrets: SecretLookup, open_upstream: OpenUpstream,
                 idle_timeout_s: float) -> None:
        self._guest = _Side(h11.SERVER, guest, idle_timeout_s)
        self._name = _normal(name)
        self._rules = rules
        self._secrets = secrets
        self._open_upstream = open_upstream
        self._idle = idle_timeout_s
        self._up: _Side | None = None

    async def run(self) -> None:
        try:
            while await self._one_exchange():
                self._guest.conn.start_next_cycle()
        finally:
            await self._drop_upstream()

    async def _one_exchange(self) -> bool:
        """Relays one request and its response; True when the guest connection can go on."""
        try:
            request = await self._guest.next_event()
        except h11.RemoteProtocolError as exc:
            await self._answer(exc.error_status_hint, "the request is not valid HTTP/1.1")
            return False
        if not isinstance(request, h11.Request):
            return False  # closed between requests
        refusal = self._refusal(request)
        if refusal is not None:
            await self._answer(*refusal)
            return False
        try:
            headers = apply_rules(request.headers.raw_items(), self._rules, self._secrets)
        except SecretUnavailable as exc:
            await self._answer(403, str(exc), secret=exc.secret_name)
            return False
        except errors.InvalidArgument as exc:
            await self._answer(502, f"a header rule of {self._name} cannot be applied: {exc}")
            return False
        if not any(name.lower() == b"host" for name, _ in headers):
            headers.append((b"Host", self._name.encode()))  # HTTP/1.0 has none; 1.1 must
        try:
            outgoing = h11.Request(method=request.method, target=request.target, headers=headers)
            return await self._forward(outgoing, bodiless=_bodiless(request))
        except UpstreamFailed as exc:
            await self._answer(502, str(exc))
        except (ConnectionError, TimeoutError, h11.ProtocolError) as exc:
            await self._answer(502, f"{self._name} broke off its answer ({type(exc).__name__})")
        return False

    async def _forward(self, request: h11.Request, *, bodiless: bool) -> bool:
        """Sends the request upstream and relays the answer. A bodiless request that a reused
        upstream connection fails before any answer (the upstream closed it while idle) is sent
        once more on a new connection, as browsers and proxies do."""
        if bodiless:
            await self._guest.next_event()  # its EndOfMessage: the guest side is DONE
        while True:
            fresh = self._up is None
            up = await self._upstream()
            try:
                await up.send(request)
                if bodiless:
                    await up.send(h11.EndOfMessage())
                return await self._exchange(up, bodiless=bodiless)
            except (ConnectionError, h11.RemoteProtocolError):
                await self._drop_upstream()
                answered = self._guest.conn.our_state is not h11.SEND_RESPONSE
                if fresh or not bodiless or answered:
                    raise

    def _refusal(self, request: h11.Request) -> tuple[int, str] | None:
        if request.method == b"CONNECT":
            return 405, "CONNECT is not relayed to a host with header rules"
        host = dict(request.headers).get(b"host", b"").decode("latin-1")
        if request.target.startswith((b"http://", b"https://")):
            host = urlsplit(request.target.decode("latin-1")).netloc or host
        if host and _normal(_without_port(host)) != self._name:
            return 421, f"this connection is for {self._name}; the request names another host"
        return None

    async def _exchange(self, up: _Side, *, bodiless: bool) -> bool:
        body = asyncio.create_task(self._pump_request_body(up, bodiless))
        response = asyncio.create_task(self._pump_response(up))
        try:
            await _until_answered(body, response)
            switched = response.result()
            if switched or self._guest.conn.their_state is h11.DONE:
                await body  # its last write may still be draining
        finally:
            # Left running only when the upstream answered before the whole body: no reuse.
            for task in (body, response):
                task.cancel()
            await asyncio.gather(body, response, return_exceptions=True)
        if switched:
            await self._splice(up)
            return False
        if up.reusable:
            up.conn.start_next_cycle()
        else:
            await self._drop_upstream()
        return self._guest.reusable

    async def _pump_request_body(self, up: _Side, bodiless: bool) -> None:
        while not bodiless:
            event = await self._guest.next_event()
            if not isinstance(event, h11.Data | h11.EndOfMessage):
                raise ConnectionResetError("the guest closed before its request ended")
            await up.send(event)
            if isinstance(event, h11.EndOfMessage):
                return

    async def _pump_response(self, up: _Side) -> bool:
        """Relays the upstream's answer; True when it switched protocols."""
        while True:
            event = await up.next_event()
            if isinstance(event, h11.InformationalResponse):
                await self._guest.send(event)
                if event.status_code == 101:
                    return True
            elif isinstance(event, h11.Response | h11.Data):
                if isinstance(event, h11.Response):
                    log.debug("egress rule request answered",
                              extra={"host": self._name, "status": event.status_code})
                await self._guest.send(event)
            elif isinstance(event, h11.EndOfMessage):
                await self._guest.send(event)
                return False
            else:
                raise ConnectionResetError("the upstream closed before its response ended")

    async def _splice(self, up: _Side) -> None:
        """After a 101: raw bytes both ways, starting with what h11 already read past it."""
        guest_rest, up_rest = self._guest.conn.trailing_data[0], up.conn.trailing_data[0]
        if guest_rest:
            await up.stream.write(guest_rest)
        if up_rest:
            await self._guest.stream.write(up_rest)
        copies = [asyncio.create_task(self._copy(self._guest.stream, up.stream)),
                  asyncio.create_task(self._copy(up.stream, self._guest.stream))]
        try:
            await asyncio.wait(copies, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for copy in copies:
                copy.cancel()
            await asyncio.gather(*copies, return_exceptions=True)

    async def _copy(self, source: ByteStream, sink: ByteStream) -> None:
        while True:
            async with asyncio.timeout(self._idle):
                data = await source.read()
            if not data:
                return
            await sink.write(data)

    async def _upstream(self) -> _Side:
        if self._up is None:
            try:
                stream = await self._open_upstream()
            except ssl.SSLCertVerificationError as exc:
                raise UpstreamFailed(
                    f"the certificate of {self._name} did not verify: {exc.verify_message}"
                ) from exc
            except (OSError, ssl.SSLError, TimeoutError, errors.AenvError) as exc:
                raise UpstreamFailed(
                    f"{self._name} could not be reached ({type(exc).__name__})") from exc
            self._up = _Side(h11.CLIENT, stream, self._idle)
        return self._up

    async def _drop_upstream(self) -> None:
        if self._up is not None:
            up, self._up = self._up, None
            await up.stream.close()

    async def _answer(self, status: int, message: str, *, secret: str | None = None) -> None:
        """A response of the relay's own (JSON, then close), when the guest can still take one."""
        log.info("egress rule relay refused a request",
                 extra={"host": self._name, "status": status, "secret": secret})
        if self._guest.conn.our_state is not h11.SEND_RESPONSE:
            return
        payload: dict[str, object] = {"code": status, "message": message}
        if secret is not None:
            payload["secret"] = secret
        body = json.dumps(payload).encode()
        headers = [("content-type", "application/json"), ("content-length", str(len(body))),
                   ("connection", "close")]
        with contextlib.suppress(OSError, ConnectionError, h11.LocalProtocolError):
            await self._guest.send(h11.Response(status_code=status, headers=headers))
            await self._guest.send(h11.Data(data=body))
            await self._guest.send(h11.EndOfMessage())


def _normal(host: str) -> str:
    return host.rstrip(".").lower()


def _without_port(authority: str) -> str:
    if authority.startswith("["):
        return authority[1:authority.find("]")] if "]" in authority else authority
    head, sep, tail = authority.rpartition(":")
    return head if sep and tail.isdigit() else authority


async def _until_answered(body: asyncio.Task[None], response: asyncio.Task[bool]) -> None:
    """Waits for the response to end, or for the request body's relay to fail first."""
    pending: set[asyncio.Task[None] | asyncio.Task[bool]] = {body, response}
    while response in pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        if body in done:
            body.result()  # raises the failure, if any


def _bodiless(request: h11.Request) -> bool:
    headers = dict(request.headers)
    return b"transfer-encoding" not in headers and headers.get(b"content-length", b"0") == b"0"
