"""Native gRPC API (aenv.gateway.v1.GatewayService): a thin edge over the operations. Every
call arrives authenticated and held by its API key (key_holding.py); a method that needs the
caller reads it with `current_caller()`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_common.errors import Conflict, NotFound
from aenv_gateway.core.batch import BatchCreates, batch_size
from aenv_gateway.core.bulk import BulkOperations
from aenv_gateway.core.idempotency import checked_key
from aenv_gateway.core.leases.operations import timestamp
from aenv_gateway.core.policy import FORK_DEFAULT_TIMEOUT_S, default_network, item_over_shared
from aenv_gateway.core.redaction import without_proxy_secrets
from aenv_gateway.core.sandbox_metrics import SandboxMetrics
from aenv_gateway.core.sandboxes import CreateRequest, SandboxService
from aenv_gateway.core.snapshots import SnapshotQuery, SnapshotService
from aenv_gateway.core.volumes.mounts import MountRequest
from aenv_gateway.grpc.events import SandboxEvents
from aenv_gateway.grpc.exec_stream import ExecStreams
from aenv_gateway.grpc.file_transfer import FileTransfers
from aenv_gateway.grpc.messages import (
    CreateSpec,
    create_result,
    field_of,
    filter_of,
    fork_result,
    lease_message,
    list_query,
    metric,
    outcome_message,
)
from aenv_gateway.keys.auth import current_caller

SERVICE_NAME = "aenv.gateway.v1.GatewayService"


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(
        self,
        service: SandboxService,
        snapshots: SnapshotService,
        default_timeout_s: int,
        execs: ExecStreams,
        files: FileTransfers,
        metrics: SandboxMetrics,
        bulk: BulkOperations,
        *,
        events: SandboxEvents,
    ) -> None:
        self._service = service
        self._events = events
        self._bulk_ops = bulk
        self._metrics = metrics
        self._execs = execs
        self._files = files
        self._batch = BatchCreates(service)
        self._snapshots = snapshots
        self._default_timeout = default_timeout_s

    async def CreateSandbox(
        self, request: gateway_pb2.CreateSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateSandboxResponse:
        create = replace(
            self._create_request(request, request),
            idempotency_key=checked_key(request.idempotency_key or None, "idempotency_key"),
        )
        record = await self._service.create(create)
        return gateway_pb2.CreateSandboxResponse(sandbox=without_proxy_secrets(record))

    async def CreateSandboxes(
        self, request: gateway_pb2.CreateSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateSandboxesResponse:
        size = batch_size(request.count, len(request.items))
        items = list(request.items) or [gateway_pb2.CreateSandboxRequest()] * size
        results = await self._batch.create(
            [self._create_request(request, item) for item in items],
            checked_key(request.idempotency_key or None, "idempotency_key"),
        )
        return gateway_pb2.CreateSandboxesResponse(results=[create_result(r) for r in results])

    def _create_request(
        self, shared: CreateSpec, item: gateway_pb2.CreateSandboxRequest
    ) -> CreateRequest:
        """An item's non-empty fields over the shared spec (a single create: both the same)."""
        return CreateRequest(
            template_id=item.template_id or shared.template_id,
            timeout_s=item.timeout_seconds or shared.timeout_seconds or self._default_timeout,
            env_vars=item_over_shared(shared.env_vars, item.env_vars),
            metadata=item_over_shared(shared.metadata, item.metadata),
            network=field_of(item, shared, "network") or default_network(),
            lifecycle=field_of(item, shared, "lifecycle") or cluster_pb2.Lifecycle(),
            # By volume id or name; a batch's items each mount their own (no shared field).
            volume_mounts=tuple(MountRequest(m.path, m.volume, m.read_only)
                                for m in item.volume_mounts),
            lease_id=item.lease_id or shared.lease_id,
        )

    async def GetSandbox(
        self, request: gateway_pb2.GetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetSandboxResponse:
        record = await self._service.get(request.sandbox_id)
        return gateway_pb2.GetSandboxResponse(sandbox=without_proxy_secrets(record))

    async def ListSandboxes(
        self, request: gateway_pb2.ListSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListSandboxesResponse:
        page = self._service.list(list_query(request))
        return gateway_pb2.ListSandboxesResponse(
            sandboxes=[without_proxy_secrets(r) for r in page.items],
            next_page_token=page.next_cursor or "",
        )

    async def KillSandbox(
        self, request: gateway_pb2.KillSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.KillSandboxResponse:
        await self._service.kill(request.sandbox_id)
        return gateway_pb2.KillSandboxResponse()

    async def PauseSandbox(
        self, request: gateway_pb2.PauseSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PauseSandboxResponse:
        record = await self._service.pause(
            request.sandbox_id, keep_memory=not request.filesystem_only)
        return gateway_pb2.PauseSandboxResponse(sandbox=without_proxy_secrets(record))

    async def ResumeSandbox(
        self, request: gateway_pb2.ResumeSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ResumeSandboxResponse:
        connected = await self._service.connect(
            request.sandbox_id, request.timeout_seconds or None, reboot=request.reboot
        )
        return gateway_pb2.ResumeSandboxResponse(
            sandbox=without_proxy_secrets(connected.record), resumed=connected.resumed
        )

    async def SetSandboxTimeout(
        self, request: gateway_pb2.SetSandboxTimeoutRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.SetSandboxTimeoutResponse:
        try:
            record = await self._service.set_timeout(request.sandbox_id, request.timeout_seconds)
        except NotFound:
            # REST answers a paused sandbox 404, as E2B does; here NOT_FOUND means gone, which
            # the client reports as the sandbox's death.
            current = await self._service.get(request.sandbox_id)
            if current.state == cluster_pb2.SANDBOX_STATE_PAUSED:
                raise Conflict(f'sandbox "{request.sandbox_id}" is paused') from None
            raise
        return gateway_pb2.SetSandboxTimeoutResponse(sandbox=without_proxy_secrets(record))

    async def GetSandboxMetrics(
        self, request: gateway_pb2.GetSandboxMetricsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetSandboxMetricsResponse:
        samples = await self._metrics.history(
            request.sandbox_id,
            request.start if request.HasField("start") else None,
            request.end if request.HasField("end") else None,
        )
        return gateway_pb2.GetSandboxMetricsResponse(metrics=[metric(m) for m in samples])

    async def CreateSnapshot(
        self, request: gateway_pb2.CreateSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateSnapshotResponse:
        record = await self._snapshots.create(
            request.sandbox_id, request.name, keep_memory=not request.filesystem_only
        )
        return gateway_pb2.CreateSnapshotResponse(snapshot=record)

    async def ListSnapshots(
        self, request: gateway_pb2.ListSnapshotsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListSnapshotsResponse:
        page = self._snapshots.list(
            SnapshotQuery(
                sandbox_id=request.sandbox_id or None,
                name=request.name or None,
                limit=request.limit or None,
                cursor=request.page_token or None,
            )
        )
        return gateway_pb2.ListSnapshotsResponse(
            snapshots=page.items, next_page_token=page.next_cursor or ""
        )

    async def DeleteSnapshot(
        self, request: gateway_pb2.DeleteSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.DeleteSnapshotResponse:
        await self._snapshots.delete(request.snapshot_id)
        return gateway_pb2.DeleteSnapshotResponse()

    async def ForkSandbox(
        self, request: gateway_pb2.ForkSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ForkSandboxResponse:
        results = await self._service.fork(
            request.sandbox_id,
            request.count or 1,
            request.timeout_seconds or FORK_DEFAULT_TIMEOUT_S,
            copy_on_write=request.volume_mode == gateway_pb2.VOLUME_FORK_MODE_COPY_ON_WRITE,
        )
        return gateway_pb2.ForkSandboxResponse(results=[fork_result(r) for r in results])

    async def ResetSandbox(
        self, request: gateway_pb2.ResetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ResetSandboxResponse:
        record = await self._service.reset(request.sandbox_id, request.snapshot_id)
        return gateway_pb2.ResetSandboxResponse(sandbox=without_proxy_secrets(record))

    # Experiment leases and bulk operations (docs/leases.md) -----------------------------

    async def CreateLease(
        self, request: gateway_pb2.CreateLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateLeaseResponse:
        view = await self._service.leases.create(
            current_caller(), request.ttl_seconds, request.on_expiry,
            request.name, request.metadata)
        return gateway_pb2.CreateLeaseResponse(
            lease=view.record, expires_at=timestamp(view.expires_at))

    async def RenewLease(
        self, request: gateway_pb2.RenewLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.RenewLeaseResponse:
        expires_at = await self._service.leases.renew(
            current_caller(), request.lease_id)
        return gateway_pb2.RenewLeaseResponse(expires_at=timestamp(expires_at))

    async def GetLease(
        self, request: gateway_pb2.GetLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetLeaseResponse:
        return lease_message(await self._service.leases.get(
            current_caller(), request.lease_id))

    async def ListLeases(
        self, request: gateway_pb2.ListLeasesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListLeasesResponse:
        views = await self._service.leases.list(current_caller())
        return gateway_pb2.ListLeasesResponse(leases=[lease_message(v) for v in views])

    async def ReleaseLease(
        self, request: gateway_pb2.ReleaseLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ReleaseLeaseResponse:
        await self._service.leases.release(current_caller(), request.lease_id)
        return gateway_pb2.ReleaseLeaseResponse()

    async def KillSandboxes(
        self, request: gateway_pb2.KillSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.KillSandboxesResponse:
        outcomes = await self._bulk_ops.kill(
            current_caller(), filter_of(request.filter))
        return gateway_pb2.KillSandboxesResponse(outcomes=[outcome_message(o) for o in outcomes])

    async def PauseSandboxes(
        self, request: gateway_pb2.PauseSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PauseSandboxesResponse:
        outcomes = await self._bulk_ops.pause(
            current_caller(), filter_of(request.filter),
            keep_memory=not request.filesystem_only)
        return gateway_pb2.PauseSandboxesResponse(outcomes=[outcome_message(o) for o in outcomes])

    # Lifecycle events (docs/events.md) --------------------------------------------------

    async def ListSandboxEvents(
        self, request: gateway_pb2.ListSandboxEventsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListSandboxEventsResponse:
        return await self._events.list(current_caller(), request)

    async def WatchSandboxEvents(
        self, request: gateway_pb2.WatchSandboxEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gateway_pb2.WatchSandboxEventsResponse]:
        async for response in self._events.watch(current_caller(), request):
            yield response

    async def Exec(
        self,
        requests: AsyncIterator[gateway_pb2.ExecRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[gateway_pb2.ExecResponse]:
        async for response in self._execs.run(requests):
            yield response

    async def PutFile(
        self,
        requests: AsyncIterator[gateway_pb2.PutFileRequest],
        context: grpc.aio.ServicerContext,
    ) -> gateway_pb2.PutFileResponse:
        return await self._files.put(requests)

    async def GetFile(
        self, request: gateway_pb2.GetFileRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gateway_pb2.GetFileResponse]:
        async for response in self._files.get(request):
            yield response
