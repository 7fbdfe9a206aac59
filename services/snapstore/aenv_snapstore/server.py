"""Assembling a running snapstore: backend from settings, gRPC server, periodic collection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import grpc

from aenv.snapstore.v1 import snapstore_pb2_grpc as pb_grpc
from aenv_common.grpc_server import start_grpc_server
from aenv_common.metrics import MetricsEndpoint
from aenv_snapstore.backends.base import Backend
from aenv_snapstore.backends.fs import FsBackend
from aenv_snapstore.backends.s3 import S3Backend
from aenv_snapstore.config import SnapstoreSettings
from aenv_snapstore.presence import PresenceCache
from aenv_snapstore.service import SERVICE_NAME, SnapStoreServicer
from aenv_snapstore.store import SnapStore

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


@dataclass
class RunningSnapstore:
    server: grpc.aio.Server
    port: int
    store: SnapStore
    gc_task: asyncio.Task[None] | None
    metrics: MetricsEndpoint | None = None

    async def stop(self, grace: float = 5.0) -> None:
        if self.metrics is not None:
            await self.metrics.stop()
        if self.gc_task is not None:
            self.gc_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.gc_task
        await self.server.stop(grace)
        await self.store.close()


async def _collect_periodically(store: SnapStore, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await store.collect_garbage()
        except Exception:  # a failed pass must not end collection for good; retried next interval
            log.exception("garbage collection failed")


async def start_snapstore(settings: SnapstoreSettings) -> RunningSnapstore:
    backend = await open_backend(settings)
    store = SnapStore(
        backend,
        gc_grace_seconds=settings.gc_grace_seconds,
        io_concurrency=settings.io_concurrency,
        presence=PresenceCache(settings.presence_cache_seconds),
    )
    servicer = SnapStoreServicer(store)
    try:
        server, port = await start_grpc_server(
            settings.listen,
            [(pb_grpc.add_SnapStoreServiceServicer_to_server, servicer, SERVICE_NAME)],
        )
    except BaseException:
        await store.close()
        raise
    running = RunningSnapstore(server, port, store, None)
    try:
        if settings.metrics_listen is not None:
            running.metrics = await MetricsEndpoint.start(settings.metrics_listen)
    except BaseException:
        await running.stop()
        raise
    if settings.gc_interval_seconds > 0:
        running.gc_task = asyncio.create_task(
            _collect_periodically(store, settings.gc_interval_seconds))
    log.info("snapstore serving", extra={"port": port, "backend": settings.backend})
    return running
