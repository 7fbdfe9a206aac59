"""A process running in a sandbox through the gateway's Exec call: its output as it comes
(stdout and stderr apart, or the PTY's), input to it, and how it ended.

    async with await client.exec(sandbox_id, "/bin/sh", ["-c", "read x; echo $x"],
                                 stdin=True) as process:
        await process.write_stdin(b"hello\\n")
        await process.close_stdin()
        result = await process.wait()   # ExecResult(exit_code=0, stdout=b"hello\\n", ...)

Leaving the block before the process ends (or `cancel()`) ends the call, and the gateway then
kills the process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import grpc

from aenv.gateway.v1 import gateway_pb2
from aenv_client.errors import AenvError, Internal

Stream = Literal["stdout", "stderr", "pty"]
# How a failed call's gRPC error becomes the client's typed error (SandboxDied included).
ErrorMapper = Callable[[grpc.aio.AioRpcError], Awaitable[AenvError]]


@dataclass(frozen=True)
class Output:
    stream: Stream
    data: bytes


@dataclass(frozen=True)
class ExecResult:
    # -1 when a signal ended the process (`exited` is then False).
    exit_code: int
    exited: bool
    # As the shell says it, e.g. "exit status 1", "signal: killed".
    status: str
    # envd's reason when the process ended abnormally; "" otherwise.
    error: str
    # What it wrote and was not read through `output()` before `wait()`.
    stdout: bytes
    stderr: bytes
    pty: bytes


class Execution:
    """One running process. Read its output with `output()` or all of it with `wait()`."""

    def __init__(self, call: Any, pid: int, errors: ErrorMapper) -> None:
        self.pid = pid
        self._call = call
        self._errors = errors
        self._exit: gateway_pb2.ExecExit | None = None

    async def __aenter__(self) -> Execution:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._exit is None:
            self.cancel()

    async def write_stdin(self, data: bytes) -> None:
        """To its stdin (started with `stdin=True`), or its terminal on a PTY."""
        await self._send(gateway_pb2.ExecRequest(stdin=data))

    async def close_stdin(self) -> None:
        """It reads end of file (on a PTY, write b"\\x04" instead)."""
        await self._send(gateway_pb2.ExecRequest(close_stdin=gateway_pb2.CloseStdin()))

    async def resize(self, cols: int, rows: int) -> None:
        await self._send(gateway_pb2.ExecRequest(resize=gateway_pb2.PtySize(cols=cols, rows=rows)))

    async def signal(self, signal: gateway_pb2.ExecSignal) -> None:
        """EXEC_SIGNAL_SIGTERM or EXEC_SIGNAL_SIGKILL."""
        await self._send(gateway_pb2.ExecRequest(signal=signal))

    def cancel(self) -> None:
        """Ends the call; the gateway kills the process."""
        self._call.cancel()

    async def output(self) -> AsyncIterator[Output]:
        """Its output as it comes, until it ends (then `wait()` tells how)."""
        while self._exit is None:
            try:
                reply = await self._call.read()
            except grpc.aio.AioRpcError as err:
                raise await self._errors(err) from err
            if reply is grpc.aio.EOF:
                raise Internal("the gateway ended the exec without its exit status")
            which = reply.WhichOneof("event")
            if which == "exit":
                self._exit = reply.exit
            elif which in ("stdout", "stderr", "pty"):
                yield Output(which, getattr(reply, which))

    async def wait(self) -> ExecResult:
        """Waits for its end; the output not yet read comes with the result."""
        collected: dict[str, bytearray] = {
            "stdout": bytearray(),
            "stderr": bytearray(),
            "pty": bytearray(),
        }
        async for out in self.output():
            collected[out.stream] += out.data
        assert self._exit is not None  # output() returns only once it is set
        end = self._exit
        return ExecResult(
            end.exit_code,
            end.exited,
            end.status,
            end.error,
            bytes(collected["stdout"]),
            bytes(collected["stderr"]),
            bytes(collected["pty"]),
        )

    async def _send(self, request: gateway_pb2.ExecRequest) -> None:
        try:
            await self._call.write(request)
        except grpc.aio.AioRpcError as err:
            raise await self._errors(err) from err
