"""`python -m aenv_snapstore` as a real process: serves push/pull, exits cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from aenv_common.snapshots import pull_files, push_files, snapstore_stub
from aenv_testing.ports import free_port

from .snapstore_harness import wait_for_port, write_pattern


@pytest.fixture
def snapstore_process(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes], Path]]:
    port = free_port()
    root = tmp_path / "home"
    env = {
        **os.environ,
        "AENV_HOME": str(root),
        "AENV_SNAPSTORE_LISTEN": f"127.0.0.1:{port}",
        "AENV_SNAPSTORE_VOLUME_NFS_LISTEN": "127.0.0.1:0",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "aenv_snapstore"], env=env, stderr=subprocess.PIPE
    )
    try:
        wait_for_port(port, proc)
        yield port, proc, root
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


async def test_process_serves_and_stops_on_sigterm(
    snapstore_process: tuple[int, subprocess.Popen[bytes], Path], tmp_path: Path
) -> None:
    port, proc, home = snapstore_process
    mem = tmp_path / "mem"
    data = write_pattern(mem, 3 * 1024 * 1024 + 5)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = snapstore_stub(channel)
        stats = await push_files(stub, "p1", "", {"memory": mem})
        restored = await pull_files(stub, "p1", tmp_path / "out")
    assert stats.sent_chunks == 2  # 2 MiB default chunks
    assert restored["memory"].read_bytes() == data
    assert (home / "snapstore" / "manifests" / "p1").is_file()  # default root: $AENV_HOME/snapstore

    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 0, stderr.decode()
    assert b"snapstore serving" in stderr
