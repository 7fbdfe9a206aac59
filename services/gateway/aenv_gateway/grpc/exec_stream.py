"""Exec of the native API: one process in a sandbox through envd's Process API (Connect, binary
protobuf), as the E2B SDK runs commands. `Start` streams the process's events; the caller's
later messages become envd's unary calls on its pid (SendInput, CloseStdin, Update,
SendSignal), in order. envd ties no process to its caller's connection, so a call that ends
before the process (cancelled, broken) kills it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
from collections.abc import AsyncIterator, Coroutine

import aiohttp
from google.protobuf.message import Message

from aenv.gateway.v1 import gateway_pb2
from aenv_common.errors import AenvError, InvalidArgument, NotFound, Unavailable
from aenv_gateway.core.guest_envd import Guest, GuestEnvd, connect_error, http_refusal
from envd.process import process_pb2 as pb

log = logging.getLogger(__name__)

_PROCESS = "/process.Process/"
_END_STREAM = 0x02
# A unary call to envd (input, signal, resize): envd answers at once unless the guest is stuck.
_UNARY_TIMEOUT = aiohttp.ClientTimeout(total=30)
# The process's stream stays open as long as it runs (envd sends keepalives meanwhile).
_STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30)
_SIGNALS = {
    gateway_pb2.EXEC_SIGNAL_SIGKILL: pb.SIGNAL_SIGKILL,
    gateway_pb2.EXEC_SIGNAL_SIGTERM: pb.SIGNAL_SIGTERM,
}

Requests = AsyncIterator[gateway_pb2.ExecRequest]


class ExecStreams:
    def __init__(self, guests: GuestEnvd) -> None:
        self._guests = guests
        # Kills of processes whose call ended first, outliving the call's task.
        self._kills: set[asyncio.Task[None]] = set()

    async def run(self, requests: Requests) -> AsyncIterator[gateway_pb2.ExecResponse]:
        """The process's events as ExecResponses, from `started` to `exit`.

        :raise InvalidArgument: the first request is not `start`, or envd refused it.
        :raise NotFound: no such sandbox, or it died during the call.
        :raise Conflict: the sandbox is not running.
        :raise DeadlineExceeded: the process outlived its timeout_seconds (envd killed it).
        :raise Unavailable: the node or envd did not answer.
        """
        start = await _first_start(requests)
        guest = await self._guests.guest(start.sandbox_id, start.user)
        call = _Call(guest, start.HasField("pty"))
        call.follow(self._events(guest, _start_request(start), start.timeout_seconds))
        ended = False
        try:
            while (event := await call.next()) is not None:
                which = event.WhichOneof("event")
                if which == "start":
                    call.take_input(event.start.pid, requests)
                    yield gateway_pb2.ExecResponse(
                        started=gateway_pb2.ExecStarted(pid=event.start.pid)
                    )
                elif which == "data":
                    yield _output(event.data)
                elif which == "end":
                    ended = True
                    yield gateway_pb2.ExecResponse(exit=_exit(event.end))
                    return
            raise Unavailable(f"envd ended `{start.cmd}` without its exit status")
        finally:
            call.stop()
            if call.pid is not None and not ended:
                self._kill_later(guest, call.pid)

    async def _events(
        self, guest: Guest, request: pb.StartRequest, timeout_s: int
    ) -> AsyncIterator[pb.ProcessEvent]:
        headers = {**guest.headers, "content-type": "application/connect+proto"}
        if timeout_s:
            headers["connect-timeout-ms"] = str(timeout_s * 1000)
        payload = request.SerializeToString()
        try:
            async with guest.session.post(
                guest.base_url + _PROCESS + "Start",
                headers=headers,
                data=struct.pack(">BI", 0, len(payload)) + payload,
                timeout=_STREAM_TIMEOUT,
            ) as resp:
                if resp.status != 200:
                    raise http_refusal(guest.sandbox_id, resp.status, await resp.read())
                async for flags, message in _envelopes(resp.content):
                    if flags & _END_STREAM:
                        _raise_end_error(message)
                        return
                    yield pb.StartResponse.FromString(message).event
        except (aiohttp.ClientError, asyncio.IncompleteReadError) as err:
            raise await self._guests.broken(guest.sandbox_id, err) from err

    def _kill_later(self, guest: Guest, pid: int) -> None:
        task = asyncio.get_running_loop().create_task(_kill(guest, pid))
        self._kills.add(task)
        task.add_done_callback(self._kills.discard)


# What the call's two tasks hand it: the process's next event, its end (None), or a failure.
_Item = pb.ProcessEvent | AenvError | None


class _Call:
    """One exec's two flows, each in a task of its own feeding one queue: the process's events
    from envd, and the caller's messages after `start` sent to envd in order on its pid. A
    failure of either (other than input to a process that just ended) ends the call."""

    def __init__(self, guest: Guest, pty: bool) -> None:
        self.pid: int | None = None
        self._guest = guest
        self._pty = pty
        self._items: asyncio.Queue[_Item] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    def follow(self, events: AsyncIterator[pb.ProcessEvent]) -> None:
        self._spawn(self._relay(events))

    def take_input(self, pid: int, requests: Requests) -> None:
        self.pid = pid
        self._spawn(self._pump(pb.ProcessSelector(pid=pid), requests))

    async def next(self) -> pb.ProcessEvent | None:
        item = await self._items.get()
        if isinstance(item, AenvError):
            raise item
        return item

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()

    def _spawn(self, flow: Coroutine[None, None, None]) -> None:
        self._tasks.append(asyncio.get_running_loop().create_task(flow))

    async def _relay(self, events: AsyncIterator[pb.ProcessEvent]) -> None:
        try:
            async for event in events:
                await self._items.put(event)
            await self._items.put(None)
        except AenvError as err:
            await self._items.put(err)

    async def _pump(self, selector: pb.ProcessSelector, requests: Requests) -> None:
        try:
            async for request in requests:
                await self._send(selector, request)
        except NotFound:
            pass  # the process ended meanwhile: its end event follows
        except AenvError as err:
            await self._items.put(err)
        except (aiohttp.ClientError, TimeoutError) as err:
            await self._items.put(Unavailable(f"envd did not take the input: {type(err).__name__}"))

    async def _send(self, selector: pb.ProcessSelector, request: gateway_pb2.ExecRequest) -> None:
        which = request.WhichOneof("request")
        if which == "stdin":
            data = (
                pb.ProcessInput(pty=request.stdin)
                if self._pty
                else pb.ProcessInput(stdin=request.stdin)
            )
            await _unary(
                self._guest, "SendInput", pb.SendInputRequest(process=selector, input=data)
            )
        elif which == "close_stdin":
            await _unary(self._guest, "CloseStdin", pb.CloseStdinRequest(process=selector))
        elif which == "resize":
            size = pb.PTY.Size(cols=request.resize.cols, rows=request.resize.rows)
            await _unary(
                self._guest, "Update", pb.UpdateRequest(process=selector, pty=pb.PTY(size=size))
            )
        elif which == "signal":
            signal = _SIGNALS.get(request.signal)
            if signal is None:
                raise InvalidArgument("signal must be EXEC_SIGNAL_SIGKILL or EXEC_SIGNAL_SIGTERM")
            await _unary(
                self._guest, "SendSignal", pb.SendSignalRequest(process=selector, signal=signal)
            )
        elif which == "start":
            raise InvalidArgument("start must be the first message only")


async def _first_start(requests: Requests) -> gateway_pb2.ExecStart:
    first = await anext(aiter(requests), None)
    if first is None or first.WhichOneof("request") != "start":
        raise InvalidArgument("the first message must be start")
    if not first.start.sandbox_id or not first.start.cmd:
        raise InvalidArgument("start needs sandbox_id and cmd")
    return first.start


def _start_request(start: gateway_pb2.ExecStart) -> pb.StartRequest:
    request = pb.StartRequest(
        process=pb.ProcessConfig(
            cmd=start.cmd, args=start.args, envs=start.envs, cwd=start.cwd or None
        ),
        stdin=start.stdin,
    )
    if start.HasField("pty"):
        request.pty.size.cols = start.pty.cols or 80
        request.pty.size.rows = start.pty.rows or 24
    return request


def _output(data: pb.ProcessEvent.DataEvent) -> gateway_pb2.ExecResponse:
    which = data.WhichOneof("output")
    if which == "stdout":
        return gateway_pb2.ExecResponse(stdout=data.stdout)
    if which == "stderr":
        return gateway_pb2.ExecResponse(stderr=data.stderr)
    return gateway_pb2.ExecResponse(pty=data.pty)


def _exit(end: pb.ProcessEvent.EndEvent) -> gateway_pb2.ExecExit:
    return gateway_pb2.ExecExit(
        exit_code=end.exit_code,
        exited=end.exited,
        status=end.status,
        error=end.error if end.HasField("error") else "",
    )


async def _unary(guest: Guest, method: str, request: Message) -> None:
    headers = {**guest.headers, "content-type": "application/proto"}
    async with guest.session.post(
        guest.base_url + _PROCESS + method,
        headers=headers,
        data=request.SerializeToString(),
        timeout=_UNARY_TIMEOUT,
    ) as resp:
        if resp.status != 200:
            body = await resp.read()
            try:
                answer = json.loads(body)
                raise connect_error(str(answer.get("code", "")), str(answer.get("message", "")))
            except (ValueError, AttributeError):
                raise http_refusal(guest.sandbox_id, resp.status, body) from None


async def _kill(guest: Guest, pid: int) -> None:
    request = pb.SendSignalRequest(process=pb.ProcessSelector(pid=pid), signal=pb.SIGNAL_SIGKILL)
    try:
        await _unary(guest, "SendSignal", request)
    except (AenvError, aiohttp.ClientError, TimeoutError) as err:
        # Gone already (it ended, or its sandbox did): nothing is left running.
        log.info(
            "exec kill not done",
            extra={"sandbox_id": guest.sandbox_id, "pid": pid, "error": str(err)},
        )


async def _envelopes(stream: aiohttp.StreamReader) -> AsyncIterator[tuple[int, bytes]]:
    while True:
        try:
            head = await stream.readexactly(5)
        except asyncio.IncompleteReadError as err:
            if err.partial:
                raise
            return
        flags, size = struct.unpack(">BI", head)
        yield flags, await stream.readexactly(size)


def _raise_end_error(message: bytes) -> None:
    """The end-of-stream message carries the call's error, if any (Connect's JSON)."""
    with contextlib.suppress(ValueError):
        error = json.loads(message or b"{}").get("error")
        if error:
            raise connect_error(str(error.get("code", "")), str(error.get("message", "")))
