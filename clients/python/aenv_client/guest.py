"""Calls into a running sandbox: its processes (a stream each) and its files."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

import grpc

from aenv.gateway.v1 import gateway_pb2
from aenv_client.connection import Connection
from aenv_client.errors import AenvError
from aenv_client.execs import ExecResult, Execution
from aenv_client.files import upload_chunks


class GuestCalls(Connection):
    async def exec(
        self,
        sandbox_id: str,
        cmd: str,
        args: Sequence[str] = (),
        *,
        envs: Mapping[str, str] | None = None,
        cwd: str = "",
        user: str = "",
        stdin: bool = False,
        pty: tuple[int, int] | None = None,
        timeout_seconds: int = 0,
        timeout_s: float | None = None,
    ) -> Execution:
        """Starts `cmd args` (no shell: run "/bin/sh", ["-c", ...] for one) in the sandbox and
        returns once it runs. `pty`: (cols, rows) of a terminal to run it on. `timeout_seconds`:
        the process is killed after it (its call then fails with DeadlineExceeded). The call's
        deadline is `timeout_s`, else the process's timeout plus the client's, else none (cancel
        the Execution to end it). Never sent twice."""
        start = gateway_pb2.ExecStart(
            sandbox_id=sandbox_id,
            cmd=cmd,
            args=args,
            envs=dict(envs or {}),
            cwd=cwd,
            user=user,
            stdin=stdin,
            timeout_seconds=timeout_seconds,
            pty=gateway_pb2.PtySize(cols=pty[0], rows=pty[1]) if pty else None,
        )
        if timeout_s is None and timeout_seconds:
            timeout_s = timeout_seconds + self._timeout_s
        call = self._stub.Exec(metadata=self._metadata, timeout=timeout_s)

        async def typed(err: grpc.aio.AioRpcError) -> AenvError:
            return await self._guest_error(err, sandbox_id)

        try:
            await call.write(gateway_pb2.ExecRequest(start=start))
            first = await call.read()
        except grpc.aio.AioRpcError as err:
            raise await typed(err) from err
        if first is grpc.aio.EOF or first.WhichOneof("event") != "started":
            call.cancel()
            raise AenvError("the gateway did not start the process")
        return Execution(call, first.started.pid, typed)

    async def run(
        self,
        sandbox_id: str,
        command: str,
        *,
        input: bytes | None = None,
        envs: Mapping[str, str] | None = None,
        cwd: str = "",
        user: str = "",
        timeout_seconds: int = 0,
        timeout_s: float | None = None,
    ) -> ExecResult:
        """`sh -c command` to its end, with `input` as its stdin: its exit and output."""
        async with await self.exec(
            sandbox_id,
            "/bin/sh",
            ["-c", command],
            envs=envs,
            cwd=cwd,
            user=user,
            stdin=input is not None,
            timeout_seconds=timeout_seconds,
            timeout_s=timeout_s,
        ) as process:
            if input is not None:
                if input:
                    await process.write_stdin(input)
                await process.close_stdin()
            return await process.wait()

    async def put_file(
        self,
        sandbox_id: str,
        path: str,
        data: bytes | Path,
        *,
        user: str = "",
        timeout_s: float | None = None,
    ) -> gateway_pb2.PutFileResponse:
        """Writes `data` (bytes, or a local file streamed from disk) to `path` in the sandbox;
        parent directories are made, an existing file is replaced. Never sent twice."""
        target = gateway_pb2.FileTarget(sandbox_id=sandbox_id, path=path, user=user)
        try:
            reply: gateway_pb2.PutFileResponse = await self._stub.PutFile(
                upload_chunks(target, data),
                metadata=self._metadata,
                timeout=self._deadline(timeout_s),
            )
        except grpc.aio.AioRpcError as err:
            raise await self._guest_error(err, sandbox_id) from err
        return reply

    async def get_file(
        self, sandbox_id: str, path: str, *, user: str = "", timeout_s: float | None = None
    ) -> bytes:
        """The whole file (`file_chunks` streams one too big to hold)."""
        return b"".join(
            [c async for c in self.file_chunks(sandbox_id, path, user=user, timeout_s=timeout_s)]
        )

    async def file_chunks(
        self, sandbox_id: str, path: str, *, user: str = "", timeout_s: float | None = None
    ) -> AsyncIterator[bytes]:
        """The file's bytes, chunk by chunk as they arrive."""
        target = gateway_pb2.FileTarget(sandbox_id=sandbox_id, path=path, user=user)
        call = self._stub.GetFile(
            gateway_pb2.GetFileRequest(file=target),
            metadata=self._metadata,
            timeout=self._deadline(timeout_s),
        )
        try:
            async for reply in call:
                if reply.data:
                    yield reply.data
        except grpc.aio.AioRpcError as err:
            raise await self._guest_error(err, sandbox_id) from err

