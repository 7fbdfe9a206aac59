"""Assembling a running snapstore: backend from settings, the snapshot and volume stores, the
volume NFS server, the gRPC server (SnapStoreService, VolumeService), periodic collections."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import grpc

from aenv.snapstore.v1 import snapstore_pb2_grpc as pb_grpc
from aenv_common.grpc_server import start_grpc_server
from aenv_common.metrics import MetricsEndpoint
from aenv_snapstore import metrics
from aenv_snapstore.backends.base import Backend
from aenv_snapstore.backends.fs import FsBackend
from aenv_snapstore.backends.s3 import S3Backend
from aenv_snapstore.config import SnapstoreSettings
from aenv_snapstore.nfs import NfsServer
from aenv_snapstore.presence import PresenceCache
from aenv_snapstore.servicer import SERVICE_NAME, SnapStoreServicer
from aenv_snapstore.store import SnapStore
from aenv_snapstore.volume_metrics import COLLECTOR, CountingStore, observe_nfs_call
from aenv_snapstore.volume_servicer import SERVICE_NAME as VOLUME_SERVICE_NAME
from aenv_snapstore.volume_servicer import VolumeServicer
from aenv_snapstore.volumes.store import VolumeStore
from aenv_snapstore.volumes.tickets import TicketKey

log = logging.getLogger(__name__)


async def open_backend(settings: SnapstoreSettings) -> Backend:
    if settings.backend == "fs":
        return FsBackend(settings.fs_root_path())
    s3 = settings.s3
    return await S3Backend.connect(
        bucket=s3.bucket,
        endpoint_url=s3.endpoint_url,
        region=s3.region,
        access_key_id=s3.access_key_id,
        secret_access_key=s3.secret_access_key.get_secret_value() if s3.secret_access_key else None,
        prefix=s3.prefix,
        create_bucket=s3.create_bucket,
        max_connections=s3.max_connections,
    )


def split_listen(listen: str) -> tuple[str, int]:
    """"host:port" ("[v6]:port" too) as (host, port)."""
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"listen address {listen!r} is not host:port")
    return host.strip("[]"), int(port)


def join_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def nfs_endpoint(settings: SnapstoreSettings, host: str, port: int) -> str:
    """What node agents' relays dial: the setting, else the bound address."""
    if settings.volume_nfs_advertise:
        return settings.volume_nfs_advertise
    if host in ("0.0.0.0", "::"):
        log.warning("volume NFS server bound to all addresses without volume_nfs_advertise: "
                    "node agents are told an address they cannot dial", extra={"host": host})
    return join_address(host, port)


@dataclass
class RunningSnapstore:
    server: grpc.aio.Server
    port: int
    store: SnapStore
    volumes: VolumeStore
    nfs: NfsServer
    # host:port of the volume NFS server: as advertised (GetVolumeEndpoint), and as bound.
    nfs_address: str
    nfs_bound: str
    # The stores, the NFS server and the volume collection timer, closed in reverse order of
    # their start: the timer, NFS, the volume store's last sync, the snapshot store (and backend).
    resources: contextlib.AsyncExitStack
    gc_task: asyncio.Task[None] | None = None
    metrics: MetricsEndpoint | None = None

    async def stop(self, grace: float = 5.0) -> None:
        if self.metrics is not None:
            await self.metrics.stop()
        if self.gc_task is not None:
            await _cancel(self.gc_task)
        await self.server.stop(grace)
        await self.resources.aclose()


async def _cancel(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _periodically(name: str, interval: float, work: Callable[[], Awaitable[object]]) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await work()
        except Exception:  # a failed pass must not end collection for good; retried next interval
            log.exception(f"{name} failed")


def _start_timer(name: str, interval: float,
                 work: Callable[[], Awaitable[object]]) -> asyncio.Task[None] | None:
    if interval <= 0:
        return None
    return asyncio.create_task(_periodically(name, interval, work))


async def _collect_volumes(volumes: VolumeStore, grace_s: float) -> None:
    stats = await volumes.collect_garbage(grace_s)
    metrics.VOLUME_GC_DELETED_BYTES.inc(stats.deleted_bytes)


async def _start_volumes(
    settings: SnapstoreSettings, backend: Backend, stack: contextlib.AsyncExitStack
) -> tuple[VolumeStore, NfsServer, str, str, TicketKey]:
    volumes = VolumeStore(
        backend, settings.volume_work_path(),
        default_quota_bytes=settings.volume_default_quota_bytes,
        sync_interval_s=settings.volume_sync_interval_s, io_concurrency=settings.io_concurrency)
    await volumes.start()
    stack.push_async_callback(volumes.close)
    tickets = await TicketKey.load_or_create(backend)
    nfs = NfsServer(CountingStore(volumes), tickets, observe=observe_nfs_call)
    host, port = await nfs.start(*split_listen(settings.volume_nfs_listen))
    stack.push_async_callback(nfs.close)
    COLLECTOR.stores.add(volumes)
    COLLECTOR.nfs_servers.add(nfs)
    timer = _start_timer("volume garbage collection", settings.volume_gc_interval_s,
                         lambda: _collect_volumes(volumes, settings.gc_grace_seconds))
    if timer is not None:
        stack.push_async_callback(_cancel, timer)
    return volumes, nfs, nfs_endpoint(settings, host, port), join_address(host, port), tickets


async def start_snapstore(settings: SnapstoreSettings) -> RunningSnapstore:
    async with contextlib.AsyncExitStack() as stack:
        backend = await open_backend(settings)
        store = SnapStore(
            backend,
            gc_grace_seconds=settings.gc_grace_seconds,
            io_concurrency=settings.io_concurrency,
            presence=PresenceCache(settings.presence_cache_seconds),
        )
        stack.push_async_callback(store.close)
        volumes, nfs, nfs_address, nfs_bound, tickets = await _start_volumes(
            settings, backend, stack)
        volume_servicer = VolumeServicer(volumes, tickets, nfs_address=nfs_address,
                                         default_quota_bytes=settings.volume_default_quota_bytes)
        server, port = await start_grpc_server(settings.listen, [
            (pb_grpc.add_SnapStoreServiceServicer_to_server, SnapStoreServicer(store),
             SERVICE_NAME),
            (pb_grpc.add_VolumeServiceServicer_to_server, volume_servicer, VOLUME_SERVICE_NAME),
        ])
        running = RunningSnapstore(server, port, store, volumes, nfs, nfs_address, nfs_bound,
                                   stack.pop_all())
    try:
        if settings.metrics_listen is not None:
            running.metrics = await MetricsEndpoint.start(settings.metrics_listen)
    except BaseException:
        await running.stop()
        raise
    running.gc_task = _start_timer("garbage collection", settings.gc_interval_seconds,
                                   store.collect_garbage)
    log.info("snapstore serving", extra={"port": port, "backend": settings.backend,
                                         "nfs_address": nfs_address})
    return running
