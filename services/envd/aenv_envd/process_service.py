"""process.Process RPCs (spec §3.4) on top of the process table."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator

from envd.process import process_pb2 as pb

from .channel import EventChannel
from .connect import ClientStream, RpcContext, RpcMethod, ServerStream, Unary
from .errors import EnvdError, invalid_argument
from .output import OutputChunk
from .processes import Event, ManagedProcess, ProcessManager, SpawnSpec, StreamItem
from .state import SandboxState
from .users import FALLBACK_PATH, User, resolve_path, username_from_authorization

_SIGNALS = {pb.SIGNAL_SIGKILL: signal.SIGKILL, pb.SIGNAL_SIGTERM: signal.SIGTERM}


def child_path() -> str:
    """envd's PATH minus entries inside envd's own runtime, which must not leak to children."""
    own_prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.exec_prefix)}
    own_prefixes -= {"/", "/usr", "/usr/local"}
    entries = [
        entry
        for entry in os.environ.get("PATH", FALLBACK_PATH).split(":")
        if entry and not any(os.path.realpath(entry).startswith(p + "/") for p in own_prefixes)
    ]
    return ":".join(entries) or FALLBACK_PATH


def child_env(
    user: User, sandbox_env: dict[str, str], request_env: dict[str, str]
) -> dict[str, str]:
    env = {"PATH": child_path(), "HOME": user.home, "USER": user.name, "LOGNAME": user.name}
    env.update(sandbox_env)
    env.update(request_env)
    return env


class ProcessService:
    def __init__(self, manager: ProcessManager, state: SandboxState) -> None:
        self._manager = manager
        self._state = state

    def methods(self) -> dict[str, RpcMethod]:
        return {
            "Start": ServerStream(pb.StartRequest, self.start),
            "Connect": ServerStream(pb.ConnectRequest, self.connect),
            "List": Unary(pb.ListRequest, self.list),
            "SendInput": Unary(pb.SendInputRequest, self.send_input),
            "StreamInput": ClientStream(pb.StreamInputRequest, self.stream_input),
            "SendSignal": Unary(pb.SendSignalRequest, self.send_signal),
            "CloseStdin": Unary(pb.CloseStdinRequest, self.close_stdin),
            "Update": Unary(pb.UpdateRequest, self.update),
        }

    def _caller(self, ctx: RpcContext) -> User:
        return self._state.resolve_user(
            username_from_authorization(ctx.headers.get("authorization"))
        )

    def _cwd(self, config: pb.ProcessConfig, user: User) -> str:
        workdir = self._state.default_workdir
        if config.HasField("cwd") and config.cwd:
            cwd = resolve_path(config.cwd, user, workdir)
            if not os.path.isdir(cwd):
                raise invalid_argument(f"cwd '{cwd}' does not exist")
            return cwd
        default = workdir or user.home
        return default if os.path.isdir(default) else "/"

    async def start(
        self, request: pb.StartRequest, ctx: RpcContext
    ) -> AsyncIterator[pb.StartResponse | OutputChunk]:
        user = self._caller(ctx)
        if not request.process.cmd:
            raise invalid_argument("process cmd is empty")
        pty_size = None
        if request.HasField("pty"):
            pty_size = (request.pty.size.cols or 80, request.pty.size.rows or 24)
        spec = SpawnSpec(
            config=request.process,
            tag=request.tag if request.HasField("tag") else None,
            env=child_env(user, self._state.env_vars, dict(request.process.envs)),
            cwd=self._cwd(request.process, user),
            user=user,
            pty_size=pty_size,
            # Absent means enabled (backward compatibility); a pty always takes input.
            stdin=not request.HasField("stdin") or request.stdin,
            lifetime_s=ctx.timeout_s,
        )
        process = self._manager.spawn(spec)
        channel = process.subscribe()
        async for event in _follow(process, channel, ctx.keepalive_s, owns_deadline=True):
            # Output chunks encode themselves as a whole response (same shape for both RPCs).
            yield event if isinstance(event, OutputChunk) else pb.StartResponse(event=event)

    async def connect(
        self, request: pb.ConnectRequest, ctx: RpcContext
    ) -> AsyncIterator[pb.ConnectResponse | OutputChunk]:
        self._caller(ctx)
        process = self._manager.select(request.process)
        channel = process.subscribe()
        async for event in _follow(process, channel, ctx.keepalive_s, owns_deadline=False):
            yield event if isinstance(event, OutputChunk) else pb.ConnectResponse(event=event)

    async def list(self, request: pb.ListRequest, ctx: RpcContext) -> pb.ListResponse:
        self._caller(ctx)
        return pb.ListResponse(processes=[p.info() for p in self._manager.running()])

    async def send_input(
        self, request: pb.SendInputRequest, ctx: RpcContext
    ) -> pb.SendInputResponse:
        self._caller(ctx)
        await _write(self._manager.select(request.process), request.input)
        return pb.SendInputResponse()

    async def stream_input(
        self, requests: AsyncIterator[pb.StreamInputRequest], ctx: RpcContext
    ) -> pb.StreamInputResponse:
        self._caller(ctx)
        process: ManagedProcess | None = None
        async for request in requests:
            which = request.WhichOneof("event")
            if which == "start":
                process = self._manager.select(request.start.process)
            elif which == "data":
                if process is None:
                    raise invalid_argument("stream input must begin with a start event")
                await _write(process, request.data.input)
        return pb.StreamInputResponse()

    async def send_signal(
        self, request: pb.SendSignalRequest, ctx: RpcContext
    ) -> pb.SendSignalResponse:
        self._caller(ctx)
        process = self._manager.select(request.process)
        sig = _SIGNALS.get(request.signal)
        if sig is None:
            raise EnvdError("unimplemented", f"signal {request.signal} is not supported")
        process.signal(sig)
        return pb.SendSignalResponse()

    async def close_stdin(
        self, request: pb.CloseStdinRequest, ctx: RpcContext
    ) -> pb.CloseStdinResponse:
        self._caller(ctx)
        await self._manager.select(request.process).close_stdin()
        return pb.CloseStdinResponse()

    async def update(self, request: pb.UpdateRequest, ctx: RpcContext) -> pb.UpdateResponse:
        self._caller(ctx)
        process = self._manager.select(request.process)
        if request.HasField("pty"):
            process.resize(request.pty.size.cols, request.pty.size.rows)
        return pb.UpdateResponse()


async def _write(process: ManagedProcess, data: pb.ProcessInput) -> None:
    which = data.WhichOneof("input")
    if which is None:
        return
    await process.write_input(getattr(data, which), to_pty=which == "pty")


async def _follow(
    process: ManagedProcess,
    channel: EventChannel[StreamItem] | None,
    keepalive_s: float,
    owns_deadline: bool,
) -> AsyncIterator[StreamItem]:
    """start, live data and keepalives, then end: the shape of Start and Connect streams."""
    yield Event(start=Event.StartEvent(pid=process.pid))
    if channel is None:  # already finished: a late Connect still learns how it ended
        assert process.end is not None
        yield process.end
        return
    try:
        while True:
            try:
                event = await channel.get(idle_timeout_s=keepalive_s)
            except TimeoutError:
                yield Event(keepalive=Event.KeepAlive())
                continue
            if event is None:
                return
            if isinstance(event, OutputChunk):
                yield event
                continue
            if event.HasField("end") and owns_deadline and process.killed_by_deadline:
                raise EnvdError("deadline_exceeded", "process exceeded its deadline and was killed")
            yield event
            if event.HasField("end"):
                return
    finally:
        process.unsubscribe(channel)
