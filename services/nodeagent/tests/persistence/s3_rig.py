"""Real processes for the push fault tests: a moto S3 server, a snapstore process on it, and a
gate between them (a TCP forwarder) that takes S3 down and up again, or trips a fault once a
given number of bytes went to S3 — a fault that lands mid-push every time, not by timing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from aenv_snapstore.backends.s3 import S3Backend
from aenv_testing.ports import free_port

BUCKET = "faults"


async def _until_listening(port: int, proc: asyncio.subprocess.Process, within_s: float) -> None:
    async with asyncio.timeout(within_s):
        while True:
            assert proc.returncode is None, f"exited with {proc.returncode} before listening"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            return


@contextlib.asynccontextmanager
async def moto_server() -> AsyncIterator[int]:
    """A real S3-compatible server on a free loopback port: its port."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "moto.server",
        "-H",
        "127.0.0.1",
        "-p",
        str(port),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        await _until_listening(port, proc, 30)
        yield port
    finally:
        proc.kill()
        await proc.wait()


class S3Gate:
    """Forwards 127.0.0.1:`port` to the S3 server. `close` refuses new connections and resets
    the open ones (S3 gone); `open` serves again. `trip_after(n, fault)` runs `fault` once `n`
    bytes went towards S3."""

    def __init__(self, upstream: int) -> None:
        self.port = free_port()
        self._upstream = upstream
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._sent = 0
        self._trip: tuple[int, Callable[[], None]] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def trip_after(self, sent_bytes: int, fault: Callable[[], None]) -> None:
        self._sent, self._trip = 0, (sent_bytes, fault)

    async def open(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, counted=True),
                self._pipe(up_reader, writer, counted=False),
            )
        finally:
            for one in (writer, up_writer):
                self._writers.discard(one)
                one.transport.abort()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, counted: bool
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
                if counted:
                    self._count(len(data))
        writer.transport.abort()  # one side ended: so does the other

    def _count(self, sent: int) -> None:
        self._sent += sent
        if self._trip is not None and self._sent >= self._trip[0]:
            fault, self._trip = self._trip[1], None
            fault()


class SnapstoreProcess:
    """`python -m aenv_snapstore` on S3 (through the gate), restartable on its port."""

    def __init__(self, home: Path, s3_endpoint: str) -> None:
        self.port = free_port()
        self._env = {
            **os.environ,
            "AENV_HOME": str(home),
            "AENV_SNAPSTORE_LISTEN": self.address,
            "AENV_SNAPSTORE_VOLUME_NFS_LISTEN": "127.0.0.1:0",
            "AENV_SNAPSTORE_BACKEND": "s3",
            "AENV_SNAPSTORE_GC_INTERVAL_SECONDS": "0",
            "AENV_SNAPSTORE_S3_BUCKET": BUCKET,
            "AENV_SNAPSTORE_S3_ENDPOINT_URL": s3_endpoint,
            "AENV_SNAPSTORE_S3_ACCESS_KEY_ID": "testing",
            "AENV_SNAPSTORE_S3_SECRET_ACCESS_KEY": "testing",
            "AENV_SNAPSTORE_S3_CREATE_BUCKET": "true",
            "PYTHONPATH": os.pathsep.join(sys.path),
        }
        self._log = home / "snapstore.log"
        self.proc: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        with self._log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "aenv_snapstore", env=self._env, stdout=log, stderr=log
            )
        await _until_listening(self.port, self.proc, 60)

    async def kill(self) -> None:
        """SIGKILL: no stop of its own."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


@contextlib.asynccontextmanager
async def stopped(snapstore: SnapstoreProcess) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await snapstore.kill()


async def s3_objects(moto_port: int, prefix: str) -> list[str]:
    """The keys S3 holds under `prefix`, read from the S3 server itself."""
    backend = await S3Backend.connect(
        bucket=BUCKET,
        endpoint_url=f"http://127.0.0.1:{moto_port}",
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
    )
    try:
        return [info.key async for info in backend.list(prefix)]
    finally:
        await backend.close()
