"""A real etcd for tests and benchmarks: Debian's `etcd` binary on free loopback ports.

Registered as a pytest plugin by the repository's root conftest.py, so any test can ask for
`etcd_server` (one per session), `etcd_settings` (CommonSettings with a prefix unique to the
test, so tests never see each other's keys) or `cluster_store` (a ClusterStore on that prefix,
emptied and closed after the test).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from aenv_common.cluster.store import ClusterStore
from aenv_common.config import CommonSettings
from aenv_testing.ports import free_port

ETCD_BINARY = "/usr/bin/etcd"
START_TIMEOUT_SECONDS = 30.0


class EtcdServer:
    """One single-member etcd cluster. `stop()` + `start()` is a restart that keeps its data and
    ports (to test clients' recovery)."""

    def __init__(self) -> None:
        self.client_port = free_port()
        self.peer_port = free_port()
        self.data_dir = Path(tempfile.mkdtemp(prefix="aenv-etcd-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    def settings(self, prefix: str = "/aenv/v1") -> CommonSettings:
        return CommonSettings(etcd_endpoints=self.endpoint, etcd_prefix=prefix)

    def start(self) -> None:
        client_url = f"http://127.0.0.1:{self.client_port}"
        peer_url = f"http://127.0.0.1:{self.peer_port}"
        log = (self.data_dir / "etcd.log").open("ab")
        try:
            self._process = subprocess.Popen(
                [
                    ETCD_BINARY,
                    "--name=test",
                    f"--data-dir={self.data_dir / 'data'}",
                    f"--listen-client-urls={client_url}",
                    f"--advertise-client-urls={client_url}",
                    f"--listen-peer-urls={peer_url}",
                    f"--initial-advertise-peer-urls={peer_url}",
                    f"--initial-cluster=test={peer_url}",
                    "--log-level=warn",
                    "--logger=zap",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        finally:
            log.close()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        url = f"http://127.0.0.1:{self.client_port}/health"
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"etcd exited early; see {self.data_dir / 'etcd.log'}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if b'"health":"true"' in resp.read():
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"etcd not healthy after {START_TIMEOUT_SECONDS} s")

    def stop(self) -> None:
        """Stops this process (by its PID only)."""
        if self._process is None:
            return
        process, self._process = self._process, None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def kill(self) -> None:
        """Abrupt death (SIGKILL), as in a crash."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EtcdServer:
        try:
            self.start()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    with EtcdServer() as server:
        yield server


@pytest.fixture
def etcd_settings(etcd_server: EtcdServer) -> CommonSettings:
    return etcd_server.settings(prefix=f"/aenv-test/{uuid.uuid4().hex}/v1")


@pytest.fixture
async def cluster_store(etcd_settings: CommonSettings) -> AsyncIterator[ClusterStore]:
    store = await ClusterStore.connect(etcd_settings)
    try:
        yield store
    finally:
        await store.client.delete_prefix(etcd_settings.etcd_prefix.encode() + b"/")
        await store.close()
