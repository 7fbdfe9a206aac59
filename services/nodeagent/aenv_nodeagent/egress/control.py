"""The control channel between the node agent and its egress process.

One unix stream socketpair, symmetric: either side sends requests and answers the other's.
Each message is one JSON object on one line. A request is ``{"id", "op", "fds", ...body}``; its
reply is ``{"id", "ok": true, ...}`` or ``{"id", "ok": false, "error": {"code", "message"}}``
with the gRPC status name of the typed error raised (``aenv_common.errors``), so a refusal
crosses the channel as the same typed error. Ids are per sender.

A request carrying file descriptors (``attach``: a slot's listeners) sends them with
SCM_RIGHTS on the same sendmsg as the line's first bytes. A read may return them with earlier
bytes, never later ones, so the receiver queues descriptors in arrival order and gives each
complete line the first ``fds`` queued.

Operations (agent -> egress): ``configure``, ``attach`` (+3 fds: TCP proxy, UDP DNS, TCP DNS
listeners), ``update``, ``detach``, ``stats``; (egress -> agent): ``resolved``. The payloads
are built and read by the helpers below, so both ends agree on one spelling.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from aenv_common.errors import AenvError, Internal, InvalidArgument, Unavailable
from aenv_common.status_tables import from_status, grpc_status

log = logging.getLogger(__name__)

MAX_LINE = 8 << 20  # a configure or attach of the largest policy fits many times over
MAX_FDS = 16
_READ_SIZE = 1 << 16

Message = dict[str, Any]
# Serves one request: the op, its body and the descriptors it carried (now the handler's to
# close), returns the reply's body or raises an AenvError.
Handler = Callable[[str, Message, list[int]], Awaitable[Message | None]]


class ChannelClosed(Unavailable):
    """The other end is gone (its process died or closed the channel)."""


class Channel:
    """One end of the socketpair. ``run`` reads until the peer closes; requests sent meanwhile
    are answered through it."""

    def __init__(self, sock: socket.socket, handler: Handler) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._handler = handler
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[Message]] = {}
        self._send_lock = asyncio.Lock()
        self._serving: set[asyncio.Task[None]] = set()
        self._waiters: set[tuple[int, Callable[[int], bool], asyncio.Future[None]]] = set()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def request(self, op: str, body: Message | None = None,
                      fds: Sequence[int] = ()) -> Message:
        """Send a request and wait for its reply; raises the peer's typed error, or
        ChannelClosed. The descriptors are duplicated into the peer; the caller keeps its own."""
        if self._closed:
            raise ChannelClosed("the egress control channel is closed")
        self._next_id += 1
        ident = self._next_id
        reply: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._pending[ident] = reply
        try:
            await self._send({**(body or {}), "id": ident, "op": op, "fds": len(fds)}, fds)
            answer = await reply
        finally:
            self._pending.pop(ident, None)
        if not answer.get("ok"):
            error = answer.get("error") or {}
            code = grpc.StatusCode.__members__.get(str(error.get("code")), grpc.StatusCode.INTERNAL)
            raise from_status(code, str(error.get("message", "egress request failed")))
        return {k: v for k, v in answer.items() if k not in ("id", "ok")}

    async def run(self) -> None:
        """Read and dispatch messages until the peer closes the channel."""
        buffer = bytearray()
        queued: deque[int] = deque()
        try:
            while True:
                data, fds = await self._receive()
                queued.extend(fds)
                if not data:
                    return
                buffer += data
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[: end])
                    del buffer[: end + 1]
                    self._dispatch(line, queued)
                if len(buffer) > MAX_LINE:
                    raise Internal("egress control message too long")
        finally:
            self._close(queued)

    async def aclose(self) -> None:
        """Close the channel and stop serving the peer's requests."""
        self._close(deque())
        for task in list(self._serving):
            task.cancel()
        await asyncio.gather(*self._serving, return_exceptions=True)

    def _dispatch(self, line: bytes, queued: deque[int]) -> None:
        message: Message = json.loads(line)
        count = int(message.pop("fds", 0) or 0)
        if count > len(queued):
            raise Internal("egress control message announced descriptors it did not carry")
        fds = [queued.popleft() for _ in range(count)]
        if "op" not in message:
            future = self._pending.get(int(message.get("id", 0)))
            if future is not None and not future.done():
                future.set_result(message)
            return
        task = asyncio.get_running_loop().create_task(self._serve(message, fds))
        self._serving.add(task)
        task.add_done_callback(self._serving.discard)

    async def _serve(self, message: Message, fds: list[int]) -> None:
        ident, op = message.pop("id", 0), str(message.pop("op"))
        try:
            body = await self._handler(op, message, fds)
            reply: Message = {**(body or {}), "id": ident, "ok": True}
        except AenvError as err:
            reply = {"id": ident, "ok": False,
                     "error": {"code": grpc_status(err).name, "message": err.message}}
        except Exception as err:  # a bug on this side must not hang the requester
            log.exception("egress control request failed", extra={"op": op})
            reply = {"id": ident, "ok": False,
                     "error": {"code": "INTERNAL", "message": f"{op} failed: {type(err).__name__}"}}
        with contextlib.suppress(ChannelClosed, OSError):
            await self._send(reply, ())

    async def _send(self, message: Message, fds: Sequence[int]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        loop = asyncio.get_running_loop()
        async with self._send_lock:
            if self._closed:
                raise ChannelClosed("the egress control channel is closed")
            while True:
                try:
                    sent = socket.send_fds(self._sock, [data], list(fds)) if fds else \
                        self._sock.send(data)
                    break
                except (BlockingIOError, InterruptedError):
                    await self._ready(loop.add_writer, loop.remove_writer)
                except OSError as exc:
                    raise ChannelClosed(f"the egress control channel broke: {exc}") from exc
            if sent < len(data):
                try:
                    await loop.sock_sendall(self._sock, data[sent:])
                except OSError as exc:
                    raise ChannelClosed(f"the egress control channel broke: {exc}") from exc

    async def _receive(self) -> tuple[bytes, list[int]]:
        loop = asyncio.get_running_loop()
        while True:
            try:
                data, fds, flags, _ = socket.recv_fds(
                    self._sock, _READ_SIZE, MAX_FDS, socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                try:
                    await self._ready(loop.add_reader, loop.remove_reader)
                except ChannelClosed:
                    return b"", []
                continue
            except OSError:
                return b"", []
            if flags & socket.MSG_CTRUNC:
                close_fds(fds)
                raise Internal("egress control message carried too many descriptors")
            return data, fds

    async def _ready(self, add: Callable[..., None], remove: Callable[[int], bool]) -> None:
        """Wait until the socket is readable or writable (``add``: the loop's registration)."""
        if self._closed:
            raise ChannelClosed("the egress control channel is closed")
        fd = self._sock.fileno()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        add(fd, wake)
        waiter = (fd, remove, future)
        self._waiters.add(waiter)
        try:
            await future
        finally:
            if waiter in self._waiters:
                self._waiters.discard(waiter)
                remove(fd)

    def _close(self, queued: deque[int]) -> None:
        if not self._closed:
            self._closed = True
            # Unregistered while the descriptor is still ours (its number is reused once closed).
            for fd, remove, future in list(self._waiters):
                remove(fd)
                if not future.done():
                    future.set_exception(ChannelClosed("the egress control channel is closed"))
            self._waiters.clear()
            with contextlib.suppress(OSError):
                self._sock.close()
        close_fds(queued)
        for reply in self._pending.values():
            if not reply.done():
                reply.set_exception(ChannelClosed("the egress process is gone"))


def close_fds(fds: Sequence[int] | deque[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


# --- payloads -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Configure:
    """Everything node-wide the egress process needs; sent first, and again after a restart.
    ``secrets_key`` and ``ca_key_pem`` are confidential: never logged (see ``__repr__``)."""

    secrets_key: bytes
    ca_cert_pem: str
    ca_key_pem: str
    dns_upstreams: list[str]
    upstream_ca_file: str | None
    etcd_endpoints: str
    etcd_prefix: str
    blocked_extra: list[str]
    max_connections_per_sandbox: int = 1024
    idle_timeout_s: float = 600.0
    peek_timeout_s: float = 0.25
    name_wait_s: float = 5.0

    def __repr__(self) -> str:
        return (f"Configure(dns_upstreams={self.dns_upstreams}, "
                f"blocked_extra={len(self.blocked_extra)} ranges, etcd={self.etcd_endpoints})")

    def to_message(self) -> Message:
        return {
            "secrets_key": base64.b64encode(self.secrets_key).decode(),
            "ca_cert_pem": self.ca_cert_pem, "ca_key_pem": self.ca_key_pem,
            "dns_upstreams": self.dns_upstreams, "upstream_ca_file": self.upstream_ca_file,
            "etcd_endpoints": self.etcd_endpoints, "etcd_prefix": self.etcd_prefix,
            "blocked_extra": self.blocked_extra,
            "max_connections_per_sandbox": self.max_connections_per_sandbox,
            "idle_timeout_s": self.idle_timeout_s, "peek_timeout_s": self.peek_timeout_s,
            "name_wait_s": self.name_wait_s,
        }

    @classmethod
    def from_message(cls, message: Message) -> Configure:
        try:
            return cls(
                secrets_key=base64.b64decode(message["secrets_key"]),
                ca_cert_pem=str(message["ca_cert_pem"]), ca_key_pem=str(message["ca_key_pem"]),
                dns_upstreams=[str(s) for s in message["dns_upstreams"]],
                upstream_ca_file=message.get("upstream_ca_file"),
                etcd_endpoints=str(message["etcd_endpoints"]),
                etcd_prefix=str(message["etcd_prefix"]),
                blocked_extra=[str(c) for c in message["blocked_extra"]],
                max_connections_per_sandbox=int(message["max_connections_per_sandbox"]),
                idle_timeout_s=float(message["idle_timeout_s"]),
                peek_timeout_s=float(message["peek_timeout_s"]),
                name_wait_s=float(message["name_wait_s"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"bad configure message: {type(exc).__name__} {exc}") from exc


def policy_field(policy_bytes: bytes) -> str:
    """A serialized cluster.v1.NetworkPolicy as it travels in attach/update."""
    return base64.b64encode(policy_bytes).decode()


def policy_bytes(message: Message) -> bytes:
    try:
        return base64.b64decode(str(message["policy"]), validate=True)
    except (KeyError, ValueError) as exc:
        raise InvalidArgument("attach/update without a valid policy") from exc


def netns_of(message: Message) -> str:
    netns = message.get("netns")
    if not isinstance(netns, str) or not netns:
        raise InvalidArgument("egress request without a netns")
    return netns
