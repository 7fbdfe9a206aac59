"""Volume metrics from what the store and the NFS server already keep, at no cost per call
beyond a counter: NFS calls through the server's observer hook, NFS file bytes through a thin
wrapper of the store the NFS server is given, and the rest (volumes open, connections, the
slowest last sync, volume chunk bytes uploaded) read at each scrape by a collector."""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from aenv_snapstore import metrics
from aenv_snapstore.volumes.model import Attr
from aenv_snapstore.volumes.store import VolumeStore
from aenv_snapstore.volumes.volume import Volume

_NFS_READ = metrics.VOLUME_BYTES_READ.labels("nfs")
_NFS_WRITTEN = metrics.VOLUME_BYTES_WRITTEN.labels("nfs")
_NFS_OK = 0


def observe_nfs_call(program: str, procedure: str, status: int | None, seconds: float) -> None:
    """The NFS server's per-call hook. Status: "ok", the NFS3ERR number, or "-" for MOUNT
    calls (their status is not read)."""
    name = f"{program}.{procedure}"
    label = "-" if status is None else "ok" if status == _NFS_OK else str(status)
    metrics.NFS_OPS.labels(name, label).inc()
    metrics.NFS_SECONDS.labels(name).observe(seconds)


class CountingVolume:
    """A Volume whose reads and writes count their bytes as NFS traffic."""

    def __init__(self, volume: Volume) -> None:
        self._volume = volume

    def __getattr__(self, name: str) -> Any:
        return getattr(self._volume, name)

    async def read(self, ino: int, offset: int, count: int) -> tuple[bytes, bool]:
        data, eof = await self._volume.read(ino, offset, count)
        _NFS_READ.inc(len(data))
        return data, eof

    async def write(self, ino: int, offset: int, data: bytes) -> Attr:
        attr = await self._volume.write(ino, offset, data)
        _NFS_WRITTEN.inc(len(data))
        return attr


class CountingStore:
    """What the NFS server is given: the store, its volumes wrapped in CountingVolume."""

    def __init__(self, store: VolumeStore) -> None:
        self._store = store

    async def open(self, volume_id: str) -> CountingVolume:
        return CountingVolume(await self._store.open(volume_id))


class _VolumeCollector(Collector):
    """Reads the live stores and NFS servers of this process at each scrape."""

    def __init__(self) -> None:
        self.stores: weakref.WeakSet[VolumeStore] = weakref.WeakSet()
        self.nfs_servers: weakref.WeakSet[Any] = weakref.WeakSet()

    def collect(self) -> Iterator[Metric]:
        stores = list(self.stores)
        # The store keeps its open volumes in `_open` (no public view of it yet).
        volumes = [v for s in stores for v in getattr(s, "_open", {}).values()]
        yield GaugeMetricFamily("aenv_snapstore_volumes_open",
                                "Volumes with a working copy open on this server",
                                value=len(volumes))
        connections = sum(len(getattr(n, "_connections", ())) for n in self.nfs_servers)
        yield GaugeMetricFamily("aenv_snapstore_nfs_connections",
                                "Open NFS connections (one per guest connection a relay forwards)",
                                value=connections)
        syncs = [v.sync.last_sync_s for v in volumes if getattr(v, "sync", None) is not None]
        yield GaugeMetricFamily(
            "aenv_snapstore_volume_last_sync_seconds",
            "The longest last sync of an open volume to the backend (chunks, log, head)",
            value=max(syncs, default=0.0))
        yield CounterMetricFamily(
            "aenv_snapstore_volume_chunk_bytes_written",
            "Volume chunk bytes uploaded to the backend (zstd-compressed)",
            value=sum(s.chunks.bytes_put for s in stores))


COLLECTOR = _VolumeCollector()
REGISTRY.register(COLLECTOR)
