"""A real 3-member etcd cluster on loopback (Debian's `etcd` binary), to test that clients
configured with every member keep working when one dies. Member 0 may be left to another
starter (the platform's own etcd service): `member_argv(0)` is its command line."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from aenv_common.config import CommonSettings
from aenv_testing.etcd import ETCD_BINARY, START_TIMEOUT_SECONDS
from aenv_testing.ports import free_port

MEMBERS = 3


class EtcdCluster:
    def __init__(self, ports: list[tuple[int, int]] | None = None) -> None:
        """`ports`: (client, peer) per member; free ones by default."""
        self.ports = ports or [(free_port(), free_port()) for _ in range(MEMBERS)]
        self.root = Path(tempfile.mkdtemp(prefix="aenv-etcd-cluster-"))
        self._processes: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def endpoints(self) -> str:
        """Every member's client address, member 0 first."""
        return ",".join(f"127.0.0.1:{client}" for client, _ in self.ports)

    def settings(self, prefix: str = "/aenv/v1") -> CommonSettings:
        return CommonSettings(etcd_endpoints=self.endpoints, etcd_prefix=prefix)

    def member_argv(self, index: int, data_dir: Path | None = None) -> list[str]:
        client, peer = self.ports[index]
        initial = ",".join(f"m{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(self.ports))
        return [
            ETCD_BINARY,
            f"--name=m{index}",
            f"--data-dir={data_dir or self.root / f'm{index}'}",
            f"--listen-client-urls=http://127.0.0.1:{client}",
            f"--advertise-client-urls=http://127.0.0.1:{client}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster={initial}",
            "--initial-cluster-state=new",
            "--initial-cluster-token=aenv-test",
            "--log-level=warn",
            "--logger=zap",
        ]

    def start(self, *indexes: int) -> None:
        """Start these members (a restarted one rejoins with its data); members only answer
        /health once a quorum is up, so wait with `wait_healthy`."""
        for index in indexes:
            with (self.root / f"m{index}.log").open("ab") as log:
                self._processes[index] = subprocess.Popen(
                    self.member_argv(index), stdout=log, stderr=subprocess.STDOUT
                )

    def wait_healthy(self, *indexes: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        for index in indexes:
            url = f"http://127.0.0.1:{self.ports[index][0]}/health"
            while not _healthy(url):
                process = self._processes.get(index)
                if process is not None and process.poll() is not None:
                    raise RuntimeError(f"etcd member {index} exited; see {self.root}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member {index} not healthy; see {self.root}")
                time.sleep(0.05)

    def kill(self, index: int) -> None:
        """SIGKILL one member this cluster started (by its PID)."""
        process = self._processes.pop(index)
        process.kill()
        process.wait()

    def remove(self) -> None:
        for index in list(self._processes):
            self.kill(index)
        shutil.rmtree(self.root, ignore_errors=True)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return b'"health":"true"' in resp.read()
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture
def etcd_cluster() -> Iterator[EtcdCluster]:
    cluster = EtcdCluster()
    try:
        cluster.start(*range(MEMBERS))
        cluster.wait_healthy(*range(MEMBERS))
        yield cluster
    finally:
        cluster.remove()
