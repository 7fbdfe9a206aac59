"""gRPC edge of the node agent (`aenv.nodeagent.v1.NodeAgentService`): requests to calls of the
sandbox wing's operations (sandbox/wing.py), results to responses. Typed errors become gRPC
statuses in the shared interceptor; a fork child's typed error becomes its result's status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import nullcontext
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2, nodeagent_pb2_grpc
from aenv_common.errors import AenvError
from aenv_common.status_tables import grpc_status
from aenv_nodeagent.capacity.guard import NodeCapacity
from aenv_nodeagent.images.auth import Login
from aenv_nodeagent.sandbox.logs import LogQuery
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.sandbox_metrics import Window
from aenv_nodeagent.snapshots.store import SnapshotMeta
from aenv_nodeagent.templates.builds import BuildRequest, Built, TemplateBuilds
from aenv_nodeagent.templates.recipe import Recipe


class NodeAgentServicer(nodeagent_pb2_grpc.NodeAgentServiceServicer):
    def __init__(
        self,
        wing: SandboxWing,
        node_record: Callable[[], cluster_pb2.NodeRecord],
        builds: TemplateBuilds,
        capacity: NodeCapacity | None = None,
    ) -> None:
        self._registry = wing.registry
        self._creates = wing.creates
        self._kills = wing.kills
        self._pauses = wing.pauses
        self._transfers = wing.transfers
        self._snapshots = wing.snapshots
        self._forks = wing.forks
        self._changes = wing.changes
        self._metrics = wing.guest_metrics
        self._logs = wing.logs
        self._node_record = node_record
        self._builds = builds
        # The node's own limit on creates and forks (None: a test's wing without one).
        self._capacity = capacity

    async def BuildTemplate(
        self, request: nodeagent_pb2.BuildTemplateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[nodeagent_pb2.BuildTemplateResponse]:
        lines: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        build = asyncio.ensure_future(self._builds.build(
            build_request(request), lambda line, step="": lines.put_nowait((line, step))))
        try:
            while not build.done() or not lines.empty():
                line = await _next_line(lines, build)
                if line is not None:
                    yield nodeagent_pb2.BuildTemplateResponse(log=_log_line(*line))
            built = build.result()  # its typed error becomes the stream's status
        finally:
            build.cancel()  # the caller went away: the build's undo removes what it made
        yield nodeagent_pb2.BuildTemplateResponse(result=nodeagent_pb2.BuildTemplateResult(
            template=built.record, phases_ms=built.phases_ms))

    async def ResolveImage(
        self, request: nodeagent_pb2.ResolveImageRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ResolveImageResponse:
        return nodeagent_pb2.ResolveImageResponse(
            digest=await self._builds.resolve_image(request.reference, _login(request.registry)))

    async def CreateSandbox(
        self, request: nodeagent_pb2.CreateSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.CreateSandboxResponse:
        with self._capacity.creating(request.spec) if self._capacity else nullcontext():
            sandbox = await self._creates.create(request.spec)
        return nodeagent_pb2.CreateSandboxResponse(sandbox=sandbox.record)

    async def KillSandbox(
        self, request: nodeagent_pb2.KillSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.KillSandboxResponse:
        # A cause (an administrator's kill, a lapsed lease): a death, with its certificate.
        await self._kills.kill(request.sandbox_id, cause=request.cause, detail=request.detail)
        return nodeagent_pb2.KillSandboxResponse()

    async def GetSandbox(
        self, request: nodeagent_pb2.GetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetSandboxResponse:
        return nodeagent_pb2.GetSandboxResponse(
            sandbox=self._registry.record(request.sandbox_id))

    async def ListSandboxes(
        self, request: nodeagent_pb2.ListSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ListSandboxesResponse:
        return nodeagent_pb2.ListSandboxesResponse(
            sandboxes=self._registry.records())

    async def SetSandboxTimeout(
        self, request: nodeagent_pb2.SetSandboxTimeoutRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.SetSandboxTimeoutResponse:
        record = await self._changes.set_timeout(
            request.sandbox_id, request.timeout_seconds, extend_only=request.extend_only)
        return nodeagent_pb2.SetSandboxTimeoutResponse(sandbox=record)

    async def GetNodeInfo(
        self, request: nodeagent_pb2.GetNodeInfoRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetNodeInfoResponse:
        return nodeagent_pb2.GetNodeInfoResponse(node=self._node_record())

    async def GetSandboxMetrics(
        self, request: nodeagent_pb2.GetSandboxMetricsRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetSandboxMetricsResponse:
        samples = await self._metrics.metrics(request.sandbox_id, Window.of(request))
        return nodeagent_pb2.GetSandboxMetricsResponse(metrics=[s.to_proto() for s in samples])

    async def GetLatestSandboxMetrics(
        self,
        request: nodeagent_pb2.GetLatestSandboxMetricsRequest,
        context: grpc.aio.ServicerContext,
    ) -> nodeagent_pb2.GetLatestSandboxMetricsResponse:
        ids = list(dict.fromkeys(request.sandbox_ids))
        latest = await asyncio.gather(*(self._metrics.latest(sid) for sid in ids))
        return nodeagent_pb2.GetLatestSandboxMetricsResponse(metrics={
            sid: sample.to_proto() for sid, sample in zip(ids, latest, strict=True) if sample
        })

    async def GetSandboxLogs(
        self, request: nodeagent_pb2.GetSandboxLogsRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetSandboxLogsResponse:
        entries = self._logs.read(request.sandbox_id, LogQuery.of(request))
        return nodeagent_pb2.GetSandboxLogsResponse(entries=[e.to_proto() for e in entries])

    async def UpdateSandboxNetwork(
        self,
        request: nodeagent_pb2.UpdateSandboxNetworkRequest,
        context: grpc.aio.ServicerContext,
    ) -> nodeagent_pb2.UpdateSandboxNetworkResponse:
        record = await self._changes.update_network(request.sandbox_id, request.network)
        return nodeagent_pb2.UpdateSandboxNetworkResponse(sandbox=record)

    async def PauseSandbox(
        self, request: nodeagent_pb2.PauseSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.PauseSandboxResponse:
        mode = (cluster_pb2.PAUSE_MODE_UNSPECIFIED if request.keep_memory
                else cluster_pb2.PAUSE_MODE_FILESYSTEM)
        record = await self._pauses.pause(
            request.sandbox_id, mode, require_healthy_guest=request.require_healthy_guest)
        return nodeagent_pb2.PauseSandboxResponse(sandbox=record)

    async def ResumeSandbox(
        self, request: nodeagent_pb2.ResumeSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ResumeSandboxResponse:
        sandbox = await self._pauses.resume(
            request.sandbox_id, request.timeout_seconds, reboot=request.reboot)
        return nodeagent_pb2.ResumeSandboxResponse(sandbox=sandbox.record)

    async def TakeOverSandbox(
        self, request: nodeagent_pb2.TakeOverSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.TakeOverSandboxResponse:
        paused = await self._transfers.take_over(request.sandbox_id, discard=request.discard)
        if paused is None:
            return nodeagent_pb2.TakeOverSandboxResponse()
        return nodeagent_pb2.TakeOverSandboxResponse(sandbox=paused.record)

    async def CreateSnapshot(
        self, request: nodeagent_pb2.CreateSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.CreateSnapshotResponse:
        meta = await self._snapshots.create(
            request.sandbox_id, request.name, filesystem_only=not request.keep_memory)
        return nodeagent_pb2.CreateSnapshotResponse(snapshot=snapshot_info(meta))

    async def ListSnapshots(
        self, request: nodeagent_pb2.ListSnapshotsRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ListSnapshotsResponse:
        return nodeagent_pb2.ListSnapshotsResponse(snapshots=[
            snapshot_info(meta) for meta in self._snapshots.store.listed(request.sandbox_id)
        ])

    async def DeleteSnapshot(
        self, request: nodeagent_pb2.DeleteSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.DeleteSnapshotResponse:
        await self._snapshots.delete(request.snapshot_id)
        return nodeagent_pb2.DeleteSnapshotResponse()

    async def ForkSandbox(
        self, request: nodeagent_pb2.ForkSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ForkSandboxResponse:
        count = request.count or 1
        parent = self._registry.record(request.sandbox_id).resources
        with self._capacity.forking(parent, count) if self._capacity else nullcontext():
            outcomes = await self._forks.fork(
                request.sandbox_id, count, request.timeout_seconds,
                request.child_ids, request.child_tokens,
                [list(child.mounts) for child in request.child_volume_mounts],
            )
        return nodeagent_pb2.ForkSandboxResponse(results=[fork_result(o) for o in outcomes])

    async def ResetSandbox(
        self, request: nodeagent_pb2.ResetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ResetSandboxResponse:
        record = await self._forks.reset(request.sandbox_id, request.snapshot_id)
        return nodeagent_pb2.ResetSandboxResponse(sandbox=record)


def fork_result(outcome: Sandbox | AenvError) -> nodeagent_pb2.ForkResult:
    """A child, or its failure's kind (its gRPC status's name) and message."""
    if isinstance(outcome, Sandbox):
        return nodeagent_pb2.ForkResult(sandbox=outcome.record)
    return nodeagent_pb2.ForkResult(error=nodeagent_pb2.ForkError(
        status=grpc_status(outcome).name, message=outcome.message))


def snapshot_info(meta: SnapshotMeta) -> nodeagent_pb2.SnapshotInfo:
    info = nodeagent_pb2.SnapshotInfo(
        snapshot_id=meta.snapshot_id, sandbox_id=meta.sandbox_id, name=meta.name,
        has_memory=meta.has_memory, template_id=meta.template_id,
    )
    info.created_at.FromNanoseconds(int(meta.created_at * 1e9))
    return info


def build_request(request: nodeagent_pb2.BuildTemplateRequest) -> BuildRequest:
    """:raise InvalidArgument: a step of a kind or shape the SDK never sends."""
    recipe = Recipe.from_e2b({
        "steps": [{"type": step.type, "args": list(step.args), "filesHash": step.files_hash}
                  for step in request.steps],
        "startCmd": request.start_cmd, "readyCmd": request.ready_cmd,
    })
    return BuildRequest(
        request.template_id, request.build_id, recipe,
        from_image=request.from_image or None, from_template=request.from_template or None,
        login=_login(request.registry),
        vcpus=request.resources.vcpus, memory_mib=request.resources.memory_mib,
        disk_mib=request.resources.disk_mib, force=request.force,
        min_free_disk_mib=(request.min_free_disk_mib
                           if request.HasField("min_free_disk_mib") else None),
    )


async def _next_line(
    lines: asyncio.Queue[tuple[str, str]], build: asyncio.Future[Built]
) -> tuple[str, str] | None:
    """The build's next log line, or None once it has ended with no line left."""
    if not lines.empty():
        return lines.get_nowait()
    getter = asyncio.ensure_future(lines.get())
    either: set[asyncio.Future[Any]] = {getter, build}
    try:
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not getter.done():
            getter.cancel()
    return getter.result() if getter.done() and not getter.cancelled() else None


def _log_line(message: str, step: str) -> nodeagent_pb2.BuildLogLine:
    now = Timestamp()
    now.GetCurrentTime()
    return nodeagent_pb2.BuildLogLine(time=now, level="info", message=message, step=step)


def _login(creds: nodeagent_pb2.RegistryCredentials) -> Login | None:
    return Login(creds.username, creds.password) if creds.username else None
