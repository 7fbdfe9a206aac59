"""Fixtures: a real snapstore gRPC server (in process) over the fs backend or a real moto S3
server, plus a client stub and a second handle on the same backend for inspecting objects."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from aenv_common.snapshots import snapstore_stub
from aenv_snapstore.server import open_backend, start_snapstore
from aenv_testing.ports import free_port

from .snapstore_harness import Harness, settings_for, wait_for_port


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A real S3-compatible HTTP server (moto) on a free loopback port, killed by PID after."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(params=["fs", pytest.param("s3", marks=pytest.mark.s3)])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    settings = settings_for(request.param, tmp_path, request)
    running = await start_snapstore(settings)
    try:
        backend = await open_backend(settings)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
                yield Harness(snapstore_stub(channel), backend, settings)
        finally:
            await backend.close()
    finally:
        await running.stop(grace=0)
