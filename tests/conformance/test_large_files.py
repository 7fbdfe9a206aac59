"""A 200 MiB file up and down through gateway -> node proxy -> envd, streamed end to end: the
SDK streams it from a generator, and neither the gateway nor the node agent holds it in memory
(their RSS is sampled throughout)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2b import Sandbox

from aenv_cli.platform import Platform

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

SIZE = 200 * 2**20
CHUNK = 2**20
# Far below the file size: a hop that buffered the body would grow by ~200 MiB.
MAX_RSS_GROWTH = 64 * 2**20


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@contextmanager
def peak_rss(pids: dict[str, int]) -> Iterator[dict[str, int]]:
    """Yields {name: peak RSS growth in bytes}, filled in when the block ends."""
    base = {name: _rss(pid) for name, pid in pids.items()}
    peak = dict(base)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            for name, pid in pids.items():
                peak[name] = max(peak[name], _rss(pid))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    growth: dict[str, int] = {}
    try:
        yield growth
    finally:
        done.set()
        thread.join()
        growth.update({name: peak[name] - base[name] for name in pids})


def _chunks(digest: hashlib._Hash) -> Iterator[bytes]:
    # Pseudo-random but reproducible, so nothing along the way can compress it away.
    seed = hashlib.sha256(b"aenv").digest()
    for i in range(SIZE // CHUNK):
        block = hashlib.sha256(seed + i.to_bytes(4, "big")).digest() * (CHUNK // 32)
        digest.update(block)
        yield block


@pytest.fixture
def hops(platform: Platform) -> dict[str, int]:
    return {c.name: c.pid for c in platform.children if c.name in ("gateway", "nodeagent")}


def test_200mib_upload_and_download_stream(sbx: Sandbox, hops: dict[str, int]) -> None:
    assert set(hops) == {"gateway", "nodeagent"}
    path = "/home/user/big.bin"
    sent = hashlib.sha256()
    try:
        started = time.monotonic()
        with peak_rss(hops) as upload_growth:
            info = sbx.files.write(path, _chunks(sent), request_timeout=600)
        upload_s = time.monotonic() - started
        assert info.path == path
        guest = sbx.commands.run(f"sha256sum {path} && stat -c %s {path}", timeout=300)
        assert guest.stdout.split()[0] == sent.hexdigest()
        assert guest.stdout.split()[-1] == str(SIZE)

        received = hashlib.sha256()
        size = 0
        started = time.monotonic()
        with peak_rss(hops) as download_growth:
            for block in sbx.files.read(path, format="stream", request_timeout=600):
                received.update(block)
                size += len(block)
        download_s = time.monotonic() - started
        assert size == SIZE and received.hexdigest() == sent.hexdigest()
        print(f"upload {SIZE / upload_s / 1e6:.1f} MB/s, download {SIZE / download_s / 1e6:.1f}"
              f" MB/s, RSS growth up {upload_growth}, down {download_growth}")
        for growth in (upload_growth, download_growth):
            assert all(g < MAX_RSS_GROWTH for g in growth.values()), growth
    finally:
        sbx.files.remove(path)
