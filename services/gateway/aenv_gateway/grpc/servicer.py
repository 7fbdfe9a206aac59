"""Native gRPC API (aenv.gateway.v1.GatewayService): a thin edge over SandboxService, with the
same API key as REST, presented as `x-api-key` metadata."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import AenvError, Conflict, InvalidArgument, NotFound
from aenv_gateway.auth import ApiKeyAuth
from aenv_gateway.batch import BatchCreates, BatchResult, batch_size
from aenv_gateway.bulk import BulkOperations
from aenv_gateway.events.service import SandboxEvents
from aenv_gateway.exec_stream import ExecStreams
from aenv_gateway.file_transfer import FileTransfers
from aenv_gateway.guest_envd import typed_http_error
from aenv_gateway.idempotency import checked_key
from aenv_gateway.leases.service import timestamp
from aenv_gateway.leases.wire import filter_of, lease_message, outcome_message
from aenv_gateway.listing import VISIBLE_STATES, ListQuery
from aenv_gateway.network_schema import without_proxy_secrets
from aenv_gateway.revocation import OpenRequests
from aenv_gateway.sandbox_metrics import SandboxMetrics
from aenv_gateway.schemas import MAX_PAGE
from aenv_gateway.service import CreateRequest, SandboxService
from aenv_gateway.snapshots import SnapshotQuery, SnapshotService
from aenv_gateway.volumes.mounts import MountRequest

# Children's time to live when the request leaves it 0 (the E2B SDK's default too).
FORK_DEFAULT_TIMEOUT_S = 15

SERVICE_NAME = "aenv.gateway.v1.GatewayService"

# The fields a single create and a batch share (the batch's are every item's defaults).
_CreateSpec = gateway_pb2.CreateSandboxRequest | gateway_pb2.CreateSandboxesRequest


def _api_key(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == "x-api-key":
            return value if isinstance(value, str) else value.decode()
    return None


class GatewayServicer(gateway_pb2_grpc.GatewayServiceServicer):
    def __init__(
        self,
        service: SandboxService,
        snapshots: SnapshotService,
        auth: ApiKeyAuth,
        default_timeout_s: int,
        execs: ExecStreams,
        files: FileTransfers,
        open_requests: OpenRequests,
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
        self._open = open_requests
        self._batch = BatchCreates(service)
        self._snapshots = snapshots
        self._auth = auth
        self._default_timeout = default_timeout_s

    async def CreateSandbox(
        self, request: gateway_pb2.CreateSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateSandboxResponse:
        self._auth.check(_api_key(context))
        create = replace(
            self._create_request(request, request),
            idempotency_key=checked_key(request.idempotency_key or None, "idempotency_key"),
        )
        record = await self._service.create(create)
        return gateway_pb2.CreateSandboxResponse(sandbox=without_proxy_secrets(record))

    async def CreateSandboxes(
        self, request: gateway_pb2.CreateSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateSandboxesResponse:
        self._auth.check(_api_key(context))
        size = batch_size(request.count, len(request.items))
        items = list(request.items) or [gateway_pb2.CreateSandboxRequest()] * size
        results = await self._batch.create(
            [self._create_request(request, item) for item in items],
            checked_key(request.idempotency_key or None, "idempotency_key"),
        )
        return gateway_pb2.CreateSandboxesResponse(results=[_create_result(r) for r in results])

    def _create_request(
        self, shared: _CreateSpec, item: gateway_pb2.CreateSandboxRequest
    ) -> CreateRequest:
        """An item's non-empty fields over the shared spec (a single create: both the same)."""
        return CreateRequest(
            template_id=item.template_id or shared.template_id,
            timeout_s=item.timeout_seconds or shared.timeout_seconds or self._default_timeout,
            env_vars={**shared.env_vars, **item.env_vars},
            metadata={**shared.metadata, **item.metadata},
            network=_field(item, shared, "network")
            or cluster_pb2.NetworkPolicy(allow_internet_access=True),
            lifecycle=_field(item, shared, "lifecycle") or cluster_pb2.Lifecycle(),
            # By volume id or name; a batch's items each mount their own (no shared field).
            volume_mounts=tuple(MountRequest(m.path, m.volume, m.read_only)
                                for m in item.volume_mounts),
            lease_id=item.lease_id or shared.lease_id,
        )

    async def GetSandbox(
        self, request: gateway_pb2.GetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetSandboxResponse:
        self._auth.check(_api_key(context))
        record = await self._service.get(request.sandbox_id)
        return gateway_pb2.GetSandboxResponse(sandbox=without_proxy_secrets(record))

    async def ListSandboxes(
        self, request: gateway_pb2.ListSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListSandboxesResponse:
        self._auth.check(_api_key(context))
        page = self._service.list(_list_query(request))
        return gateway_pb2.ListSandboxesResponse(
            sandboxes=[without_proxy_secrets(r) for r in page.items],
            next_page_token=page.next_cursor or "",
        )

    async def KillSandbox(
        self, request: gateway_pb2.KillSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.KillSandboxResponse:
        self._auth.check(_api_key(context))
        await self._service.kill(request.sandbox_id)
        return gateway_pb2.KillSandboxResponse()

    async def PauseSandbox(
        self, request: gateway_pb2.PauseSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PauseSandboxResponse:
        self._auth.check(_api_key(context))
        record = await self._service.pause(
            request.sandbox_id, keep_memory=not request.filesystem_only)
        return gateway_pb2.PauseSandboxResponse(sandbox=without_proxy_secrets(record))

    async def ResumeSandbox(
        self, request: gateway_pb2.ResumeSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ResumeSandboxResponse:
        self._auth.check(_api_key(context))
        connected = await self._service.connect(
            request.sandbox_id, request.timeout_seconds or None, reboot=request.reboot
        )
        return gateway_pb2.ResumeSandboxResponse(
            sandbox=without_proxy_secrets(connected.record), resumed=connected.resumed
        )

    async def SetSandboxTimeout(
        self, request: gateway_pb2.SetSandboxTimeoutRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.SetSandboxTimeoutResponse:
        self._auth.check(_api_key(context))
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
        self._auth.check(_api_key(context))
        samples = await self._metrics.history(
            request.sandbox_id,
            request.start if request.HasField("start") else None,
            request.end if request.HasField("end") else None,
        )
        return gateway_pb2.GetSandboxMetricsResponse(metrics=[_metric(m) for m in samples])

    async def CreateSnapshot(
        self, request: gateway_pb2.CreateSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateSnapshotResponse:
        self._auth.check(_api_key(context))
        record = await self._snapshots.create(
            request.sandbox_id, request.name, keep_memory=not request.filesystem_only
        )
        return gateway_pb2.CreateSnapshotResponse(snapshot=record)

    async def ListSnapshots(
        self, request: gateway_pb2.ListSnapshotsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListSnapshotsResponse:
        self._auth.check(_api_key(context))
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
        self._auth.check(_api_key(context))
        await self._snapshots.delete(request.snapshot_id)
        return gateway_pb2.DeleteSnapshotResponse()

    async def ForkSandbox(
        self, request: gateway_pb2.ForkSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ForkSandboxResponse:
        self._auth.check(_api_key(context))
        results = await self._service.fork(
            request.sandbox_id,
            request.count or 1,
            request.timeout_seconds or FORK_DEFAULT_TIMEOUT_S,
            copy_on_write=request.volume_mode == gateway_pb2.VOLUME_FORK_MODE_COPY_ON_WRITE,
        )
        return gateway_pb2.ForkSandboxResponse(results=[_fork_result(r) for r in results])

    async def ResetSandbox(
        self, request: gateway_pb2.ResetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ResetSandboxResponse:
        self._auth.check(_api_key(context))
        record = await self._service.reset(request.sandbox_id, request.snapshot_id)
        return gateway_pb2.ResetSandboxResponse(sandbox=without_proxy_secrets(record))

    # Experiment leases and bulk operations (docs/leases.md) -----------------------------

    async def CreateLease(
        self, request: gateway_pb2.CreateLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateLeaseResponse:
        view = await self._service.leases.create(
            self._auth.check(_api_key(context)), request.ttl_seconds, request.on_expiry,
            request.name, request.metadata)
        return gateway_pb2.CreateLeaseResponse(
            lease=view.record, expires_at=timestamp(view.expires_at))

    async def RenewLease(
        self, request: gateway_pb2.RenewLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.RenewLeaseResponse:
        expires_at = await self._service.leases.renew(
            self._auth.check(_api_key(context)), request.lease_id)
        return gateway_pb2.RenewLeaseResponse(expires_at=timestamp(expires_at))

    async def GetLease(
        self, request: gateway_pb2.GetLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetLeaseResponse:
        return lease_message(await self._service.leases.get(
            self._auth.check(_api_key(context)), request.lease_id))

    async def ListLeases(
        self, request: gateway_pb2.ListLeasesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListLeasesResponse:
        views = await self._service.leases.list(self._auth.check(_api_key(context)))
        return gateway_pb2.ListLeasesResponse(leases=[lease_message(v) for v in views])

    async def ReleaseLease(
        self, request: gateway_pb2.ReleaseLeaseRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ReleaseLeaseResponse:
        await self._service.leases.release(self._auth.check(_api_key(context)), request.lease_id)
        return gateway_pb2.ReleaseLeaseResponse()

    async def KillSandboxes(
        self, request: gateway_pb2.KillSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.KillSandboxesResponse:
        outcomes = await self._bulk_ops.kill(
            self._auth.check(_api_key(context)), filter_of(request.filter))
        return gateway_pb2.KillSandboxesResponse(outcomes=[outcome_message(o) for o in outcomes])

    async def PauseSandboxes(
        self, request: gateway_pb2.PauseSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.PauseSandboxesResponse:
        outcomes = await self._bulk_ops.pause(
            self._auth.check(_api_key(context)), filter_of(request.filter),
            keep_memory=not request.filesystem_only)
        return gateway_pb2.PauseSandboxesResponse(outcomes=[outcome_message(o) for o in outcomes])

    # Lifecycle events (docs/events.md) --------------------------------------------------

    async def ListSandboxEvents(
        self, request: gateway_pb2.ListSandboxEventsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ListSandboxEventsResponse:
        return await self._events.list(self._auth.check(_api_key(context)), request)

    async def WatchSandboxEvents(
        self, request: gateway_pb2.WatchSandboxEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gateway_pb2.WatchSandboxEventsResponse]:
        caller = self._auth.check(_api_key(context))
        async with self._open.held(caller):
            async for response in self._events.watch(caller, request):
                yield response

    async def Exec(
        self,
        requests: AsyncIterator[gateway_pb2.ExecRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[gateway_pb2.ExecResponse]:
        # Streams are held by their key: cut when it is revoked, counted against its cap.
        async with self._open.held(self._auth.check(_api_key(context))):
            async for response in self._execs.run(requests):
                yield response

    async def PutFile(
        self,
        requests: AsyncIterator[gateway_pb2.PutFileRequest],
        context: grpc.aio.ServicerContext,
    ) -> gateway_pb2.PutFileResponse:
        async with self._open.held(self._auth.check(_api_key(context))):
            return await self._files.put(requests)

    async def GetFile(
        self, request: gateway_pb2.GetFileRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gateway_pb2.GetFileResponse]:
        async with self._open.held(self._auth.check(_api_key(context))):
            async for response in self._files.get(request):
                yield response


def _list_query(request: gateway_pb2.ListSandboxesRequest) -> ListQuery:
    states = frozenset(request.states) or VISIBLE_STATES
    if not states <= VISIBLE_STATES:
        raise InvalidArgument("states may hold only SANDBOX_STATE_RUNNING and SANDBOX_STATE_PAUSED")
    if request.page_size > MAX_PAGE:
        raise InvalidArgument(f"page_size must be at most {MAX_PAGE} (0: all)")
    return ListQuery(
        states=states,
        metadata=dict(request.metadata),
        template=request.template_id or None,
        limit=request.page_size or None,
        cursor=request.page_token or None,
    )


def _fork_result(result: nodeagent_pb2.ForkResult) -> gateway_pb2.ForkResult:
    if result.HasField("sandbox"):
        return gateway_pb2.ForkResult(sandbox=without_proxy_secrets(result.sandbox))
    status = typed_http_error(result.error.code, result.error.message).grpc_code.name
    return gateway_pb2.ForkResult(
        error=gateway_pb2.ForkError(
            code=result.error.code, message=result.error.message, status=status
        )
    )


def _metric(sample: nodeagent_pb2.SandboxMetric) -> gateway_pb2.SandboxMetric:
    return gateway_pb2.SandboxMetric(
        timestamp=sample.timestamp,
        cpu_count=sample.cpu_count,
        cpu_used_pct=sample.cpu_used_pct,
        mem_used=sample.mem_used,
        mem_total=sample.mem_total,
        mem_cache=sample.mem_cache,
        disk_used=sample.disk_used,
        disk_total=sample.disk_total,
    )


def _field(item: gateway_pb2.CreateSandboxRequest, shared: _CreateSpec, name: str) -> Any:
    """A message field of the item if set, else the shared spec's, else None."""
    for spec in (item, shared):
        if spec.HasField(name):
            return getattr(spec, name)
    return None


def _create_result(result: BatchResult) -> gateway_pb2.CreateResult:
    if isinstance(result, AenvError):
        return gateway_pb2.CreateResult(
            error=gateway_pb2.SandboxError(
                code=result.http_status, message=result.message, status=result.grpc_code.name
            )
        )
    return gateway_pb2.CreateResult(sandbox=without_proxy_secrets(result))
