"""Fake scheduler and node agent: real grpc.aio servers implementing the generated servicers,
with sandbox records kept in an InMemoryClusterView (standing in for the etcd mirror)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2, nodeagent_pb2_grpc
from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_common.errors import AenvError, Conflict, NotFound, Unavailable
from aenv_gateway.cluster.directory import InMemoryClusterView
from aenv_testing.builds import build_result, build_steps, image_digest

NODE_ID = "node1"


def _timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def _metric() -> nodeagent_pb2.SandboxMetric:
    return nodeagent_pb2.SandboxMetric(
        timestamp=_timestamp(time.time()), cpu_count=2, cpu_used_pct=12.5,
        mem_used=100 << 20, mem_total=512 << 20, mem_cache=10 << 20,
        disk_used=300 << 20, disk_total=1 << 30,
    )


class FakeScheduler(scheduler_pb2_grpc.SchedulerServiceServicer):
    def __init__(self, templates: set[str], placement: scheduler_pb2.Placement) -> None:
        self.templates = templates
        self.placement = placement
        self.calls = 0
        # Template id -> the error scheduling it raises (error-mapping tests).
        self.failures: dict[str, AenvError] = {}

    async def Schedule(
        self, request: scheduler_pb2.ScheduleRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.ScheduleResponse:
        self.calls += 1
        if failure := self.failures.get(request.spec.template_id):
            raise failure
        if request.spec.template_id not in self.templates:
            raise NotFound(f'template "{request.spec.template_id}" not found')
        return scheduler_pb2.ScheduleResponse(placement=self.placement)


class FakeNodeAgent(nodeagent_pb2_grpc.NodeAgentServiceServicer):
    """Writes records into the view like the real agent writes them into etcd."""

    def __init__(self, view: InMemoryClusterView, templates: set[str]) -> None:
        self.view = view
        # What the scheduler places by: a finished build adds its template, as etcd would.
        self.templates = templates
        self.builds: list[nodeagent_pb2.BuildTemplateRequest] = []
        # What each image reference resolves to (absent: a digest of the reference itself).
        self.image_digests: dict[str, str] = {}
        self.resolved: list[str] = []  # the references ResolveImage was asked for
        self.build_started = asyncio.Event()
        # Set: builds wait for it before they finish (concurrency tests).
        self.build_gate: asyncio.Event | None = None
        self.specs: list[cluster_pb2.SandboxSpec] = []
        # Set: creates wait for it before they answer (concurrency tests).
        self.create_gate: asyncio.Event | None = None
        # Errors the next creates raise, one each (a node that filled up under the scheduler).
        self.create_failures: list[AenvError] = []
        self.resets: list[tuple[str, str]] = []
        self.resumes = 0
        self.reboots: list[bool] = []
        self.pauses: list[nodeagent_pb2.PauseSandboxRequest] = []
        self.kills: list[nodeagent_pb2.KillSandboxRequest] = []
        # Sandboxes whose guest agent does not answer (a pause refuses or marks them).
        self.wedged: set[str] = set()
        self.metric_requests: list[nodeagent_pb2.GetSandboxMetricsRequest] = []
        self.latest_requests: list[list[str]] = []
        self.takeovers: list[tuple[str, bool]] = []
        # Each sandbox's log entries, oldest first; and the log requests seen.
        self.logs: dict[str, list[nodeagent_pb2.SandboxLogEntry]] = {}
        self.log_requests: list[nodeagent_pb2.GetSandboxLogsRequest] = []
        self.forks: list[nodeagent_pb2.ForkSandboxRequest] = []
        # Errors the next forks raise, one each (a node that broke off the call).
        self.fork_failures: list[AenvError] = []
        # Set: forks and metrics calls wait for them before they answer (calls held open).
        self.fork_gate: asyncio.Event | None = None
        self.metrics_gate: asyncio.Event | None = None

    async def BuildTemplate(
        self, request: nodeagent_pb2.BuildTemplateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[nodeagent_pb2.BuildTemplateResponse]:
        self.builds.append(request)
        self.build_started.set()

        async def held(step: nodeagent_pb2.TemplateStep) -> None:
            if self.build_gate is not None:  # a failing step fails once the gate opens
                await self.build_gate.wait()

        async for line in build_steps(request, held):
            yield line
        if self.build_gate is not None:
            await self.build_gate.wait()
        self.templates.add(request.template_id)
        yield build_result(request)

    async def ResolveImage(
        self, request: nodeagent_pb2.ResolveImageRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ResolveImageResponse:
        self.resolved.append(request.reference)
        digest = self.image_digests.get(request.reference) or image_digest(request.reference)
        return nodeagent_pb2.ResolveImageResponse(digest=digest)

    async def CreateSandbox(
        self, request: nodeagent_pb2.CreateSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.CreateSandboxResponse:
        spec = request.spec
        self.specs.append(spec)
        if self.create_failures:
            raise self.create_failures.pop(0)
        if self.create_gate is not None:
            await self.create_gate.wait()
        now = time.time()
        record = cluster_pb2.SandboxRecord(
            sandbox_id=spec.sandbox_id,
            node_id=NODE_ID,
            template_id=spec.template_id,
            state=cluster_pb2.SANDBOX_STATE_RUNNING,
            resources=cluster_pb2.Resources(vcpus=2, memory_mib=512, disk_mib=1024),
            metadata=spec.metadata,
            started_at=_timestamp(now),
            end_at=_timestamp(now + spec.timeout_seconds),
            envd_access_token=spec.envd_access_token,
            envd_version="0.5.7",
            alias=spec.alias or spec.template_id,
            catalog_template_id=spec.catalog_template_id,
            network=spec.network,
            lifecycle=spec.lifecycle,
            env_vars=spec.env_vars,
            traffic_access_token=spec.traffic_access_token,
            owner_key_id=spec.owner_key_id,
            volume_mounts=spec.volume_mounts,
            lease_id=spec.lease_id,
        )
        self.view.sandbox_records[record.sandbox_id] = record
        return nodeagent_pb2.CreateSandboxResponse(sandbox=record)

    def _record(self, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        record = self.view.sandbox_records.get(sandbox_id)
        if record is None:
            raise NotFound(f'sandbox "{sandbox_id}" not found')
        return record

    async def GetSandbox(
        self, request: nodeagent_pb2.GetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetSandboxResponse:
        return nodeagent_pb2.GetSandboxResponse(sandbox=self._record(request.sandbox_id))

    async def KillSandbox(
        self, request: nodeagent_pb2.KillSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.KillSandboxResponse:
        self.kills.append(request)
        self._record(request.sandbox_id)
        del self.view.sandbox_records[request.sandbox_id]
        return nodeagent_pb2.KillSandboxResponse()

    async def SetSandboxTimeout(
        self, request: nodeagent_pb2.SetSandboxTimeoutRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.SetSandboxTimeoutResponse:
        record = self._record(request.sandbox_id)
        if record.state != cluster_pb2.SANDBOX_STATE_RUNNING:
            raise NotFound(f'sandbox "{request.sandbox_id}" not found')
        end = time.time() + request.timeout_seconds
        if request.extend_only and end <= record.end_at.ToNanoseconds() / 1e9:
            return nodeagent_pb2.SetSandboxTimeoutResponse(sandbox=record)
        record.end_at.CopyFrom(_timestamp(end))
        if request.timeout_seconds == 0:  # the timeout's action, as the real agent runs it
            if record.lifecycle.auto_pause:
                record.state = cluster_pb2.SANDBOX_STATE_PAUSED
                record.pause_mode = record.lifecycle.auto_pause_mode
            else:
                del self.view.sandbox_records[request.sandbox_id]
                killed = cluster_pb2.SandboxRecord()
                killed.CopyFrom(record)
                killed.state = cluster_pb2.SANDBOX_STATE_KILLING
                return nodeagent_pb2.SetSandboxTimeoutResponse(sandbox=killed)
        return nodeagent_pb2.SetSandboxTimeoutResponse(sandbox=record)

    async def GetSandboxLogs(
        self, request: nodeagent_pb2.GetSandboxLogsRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetSandboxLogsResponse:
        self._record(request.sandbox_id)
        self.log_requests.append(request)

        def selected(entry: nodeagent_pb2.SandboxLogEntry) -> bool:
            ms = entry.timestamp.ToMilliseconds()
            return ((not request.HasField("start_ms") or ms >= request.start_ms)
                    and (not request.HasField("end_ms") or ms < request.end_ms)
                    and entry.level >= request.min_level and request.search in entry.message)

        entries = self.logs.get(request.sandbox_id, [])
        ordered = list(reversed(entries)) if request.backward else entries
        return nodeagent_pb2.GetSandboxLogsResponse(
            entries=[e for e in ordered if selected(e)][:request.limit])

    async def GetSandboxMetrics(
        self, request: nodeagent_pb2.GetSandboxMetricsRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.GetSandboxMetricsResponse:
        self._record(request.sandbox_id)
        self.metric_requests.append(request)
        if self.metrics_gate is not None:
            await self.metrics_gate.wait()
        return nodeagent_pb2.GetSandboxMetricsResponse(metrics=[_metric()])

    async def GetLatestSandboxMetrics(
        self,
        request: nodeagent_pb2.GetLatestSandboxMetricsRequest,
        context: grpc.aio.ServicerContext,
    ) -> nodeagent_pb2.GetLatestSandboxMetricsResponse:
        self.latest_requests.append(list(request.sandbox_ids))
        return nodeagent_pb2.GetLatestSandboxMetricsResponse(metrics={
            sid: _metric() for sid in request.sandbox_ids if sid in self.view.sandbox_records
        })

    async def UpdateSandboxNetwork(
        self,
        request: nodeagent_pb2.UpdateSandboxNetworkRequest,
        context: grpc.aio.ServicerContext,
    ) -> nodeagent_pb2.UpdateSandboxNetworkResponse:
        record = self._record(request.sandbox_id)
        record.network.CopyFrom(request.network)
        return nodeagent_pb2.UpdateSandboxNetworkResponse(sandbox=record)

    async def PauseSandbox(
        self, request: nodeagent_pb2.PauseSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.PauseSandboxResponse:
        record = self._record(request.sandbox_id)
        self.pauses.append(request)
        wedged = request.sandbox_id in self.wedged
        if wedged and (request.require_healthy_guest or not request.keep_memory):
            raise Unavailable("the guest agent did not answer; the sandbox keeps running")
        record.state = cluster_pb2.SANDBOX_STATE_PAUSED
        record.envd_unresponsive_at_pause = wedged
        record.pause_mode = (cluster_pb2.PAUSE_MODE_UNSPECIFIED if request.keep_memory
                             else cluster_pb2.PAUSE_MODE_FILESYSTEM)
        return nodeagent_pb2.PauseSandboxResponse(sandbox=record)

    async def ResumeSandbox(
        self, request: nodeagent_pb2.ResumeSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ResumeSandboxResponse:
        record = self._record(request.sandbox_id)
        if record.state != cluster_pb2.SANDBOX_STATE_PAUSED:
            raise Conflict(f'sandbox "{request.sandbox_id}" is not paused')
        self.resumes += 1
        self.reboots.append(request.reboot)
        await asyncio.sleep(0.2)  # concurrent data-plane requests must share this one resume
        record.state = cluster_pb2.SANDBOX_STATE_RUNNING
        record.envd_unresponsive_at_pause = False
        record.end_at.CopyFrom(_timestamp(time.time() + (request.timeout_seconds or 300)))
        return nodeagent_pb2.ResumeSandboxResponse(sandbox=record)

    async def TakeOverSandbox(
        self, request: nodeagent_pb2.TakeOverSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.TakeOverSandboxResponse:
        record = self._record(request.sandbox_id)
        self.takeovers.append((request.sandbox_id, request.discard))
        await asyncio.sleep(0.1)  # concurrent requests must share one take-over
        if request.discard:
            del self.view.sandbox_records[request.sandbox_id]
            return nodeagent_pb2.TakeOverSandboxResponse()
        record.node_id = NODE_ID
        return nodeagent_pb2.TakeOverSandboxResponse(sandbox=record)

    async def CreateSnapshot(
        self, request: nodeagent_pb2.CreateSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.CreateSnapshotResponse:
        source = self._record(request.sandbox_id)
        snapshot_id = f"snap-{len(self.view.snapshot_records) + 1}"
        info = nodeagent_pb2.SnapshotInfo(
            snapshot_id=snapshot_id, sandbox_id=request.sandbox_id, name=request.name,
            has_memory=request.keep_memory, template_id=source.template_id,
            created_at=_timestamp(time.time()))
        self.view.snapshot_records[snapshot_id] = cluster_pb2.SnapshotRecord(
            snapshot_id=snapshot_id, node_id=NODE_ID, sandbox_id=request.sandbox_id,
            template_id=source.template_id, names=[request.name or snapshot_id],
            created_at=info.created_at, volume_mounts=source.volume_mounts)
        for mount in self.view.snapshot_records[snapshot_id].volume_mounts:
            mount.ClearField("ticket")  # as the node agent keeps them
        return nodeagent_pb2.CreateSnapshotResponse(snapshot=info)

    async def DeleteSnapshot(
        self, request: nodeagent_pb2.DeleteSnapshotRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.DeleteSnapshotResponse:
        if self.view.snapshot_records.pop(request.snapshot_id, None) is None:
            raise NotFound(f'snapshot "{request.snapshot_id}" not found')
        return nodeagent_pb2.DeleteSnapshotResponse()

    async def ResetSandbox(
        self, request: nodeagent_pb2.ResetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ResetSandboxResponse:
        record = self._record(request.sandbox_id)
        if request.snapshot_id not in self.view.snapshot_records:
            raise NotFound(f'snapshot "{request.snapshot_id}" not found')
        self.resets.append((request.sandbox_id, request.snapshot_id))
        return nodeagent_pb2.ResetSandboxResponse(sandbox=record)

    async def ForkSandbox(
        self, request: nodeagent_pb2.ForkSandboxRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ForkSandboxResponse:
        parent = self._record(request.sandbox_id)
        self.forks.append(request)
        if self.fork_failures:
            raise self.fork_failures.pop(0)
        if self.fork_gate is not None:
            await self.fork_gate.wait()
        results: list[nodeagent_pb2.ForkResult] = []
        for index, (child_id, token) in enumerate(
                zip(request.child_ids, request.child_tokens, strict=True)):
            if len(results) == 1:  # the second child fails, as a child may on a real node
                results.append(nodeagent_pb2.ForkResult(
                    error=nodeagent_pb2.ForkError(status="UNAVAILABLE", message="no room")))
                continue
            child = cluster_pb2.SandboxRecord()
            child.CopyFrom(parent)
            child.sandbox_id, child.envd_access_token = child_id, token
            if request.child_volume_mounts:
                del child.volume_mounts[:]
                child.volume_mounts.extend(request.child_volume_mounts[index].mounts)
            self.view.sandbox_records[child_id] = child
            results.append(nodeagent_pb2.ForkResult(sandbox=child))
        return nodeagent_pb2.ForkSandboxResponse(results=results)
