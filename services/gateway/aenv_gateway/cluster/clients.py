"""gRPC clients of the scheduler and node agents: one channel per address, reused, and every
RPC failure turned back into the typed error the remote side raised."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import TypeVar

import grpc

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2, nodeagent_pb2_grpc
from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_common.errors import AenvError, Unavailable
from aenv_common.status_tables import from_rpc_error, from_status

log = logging.getLogger(__name__)

T = TypeVar("T")

# A fork's child: the sandbox made, or the typed error it failed with.
ForkOutcome = cluster_pb2.SandboxRecord | AenvError

# Between two rounds over the scheduler replicas while none places (a leader election runs).
SCHEDULER_RETRY_INTERVAL_S = 0.2


async def call(rpc: Callable[[], Awaitable[T]]) -> T:
    try:
        return await rpc()
    except grpc.aio.AioRpcError as err:
        raise from_rpc_error(err) from err


class ChannelPool:
    def __init__(self) -> None:
        self._channels: dict[str, grpc.aio.Channel] = {}

    def get(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = grpc.aio.insecure_channel(address)
            self._channels[address] = channel
        return channel

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()


class SchedulerClient:
    """The scheduler replicas (`addresses`: comma-separated): only the leader places, the others
    answer UNAVAILABLE, and so does a leader that died mid-call. Those are asked in turn, the
    last one that placed first, for up to `failover_s` (a standby takes over within its lease
    TTL); a lone address is asked again only while it says it is a standby (its election
    runs). Scheduling again is safe: a placement is keyed by the sandbox id, nothing is created
    before the answer."""

    def __init__(
        self, pool: ChannelPool, addresses: str, deadline_s: float, failover_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stubs = [
            scheduler_pb2_grpc.SchedulerServiceStub(pool.get(a.strip()))  # type: ignore[no-untyped-call]
            for a in addresses.split(",") if a.strip()
        ]
        self._deadline = deadline_s
        self._failover_s = failover_s
        self._clock = clock
        self._preferred = 0

    async def schedule(self, spec: cluster_pb2.SandboxSpec) -> scheduler_pb2.Placement:
        request = scheduler_pb2.ScheduleRequest(spec=spec)
        give_up_at = self._clock() + self._failover_s
        while True:
            try:
                return await self._schedule_once(request)
            except Unavailable as err:
                # One address that is down: no other replica could take over, its caller
                # retries. A standby (it says when to retry) waits for its own election.
                alone = len(self._stubs) == 1 and err.retry_after_s is None
                if alone or self._clock() >= give_up_at:
                    raise
            await asyncio.sleep(SCHEDULER_RETRY_INTERVAL_S)

    async def _schedule_once(
        self, request: scheduler_pb2.ScheduleRequest
    ) -> scheduler_pb2.Placement:
        """One round over the replicas, from the preferred one."""
        failure: Unavailable | None = None
        for offset in range(len(self._stubs)):
            index = (self._preferred + offset) % len(self._stubs)
            stub = self._stubs[index]
            try:
                response: scheduler_pb2.ScheduleResponse = await call(
                    partial(stub.Schedule, request, timeout=self._deadline)
                )
            except Unavailable as err:
                failure = err
                continue
            if index != self._preferred:
                log.info("scheduler replica places now", extra={"replica": index})
                self._preferred = index
            return response.placement
        raise failure or Unavailable("no scheduler address is configured")


class NodeAgentClients:
    """Node agent stubs by address (addresses come from placements and node records)."""

    def __init__(
        self, pool: ChannelPool, create_deadline_s: float, deadline_s: float,
        build_deadline_s: float = 7200.0,
    ) -> None:
        self._pool = pool
        self._create_deadline = create_deadline_s
        self._deadline = deadline_s
        self._build_deadline = build_deadline_s

    def _stub(self, address: str) -> nodeagent_pb2_grpc.NodeAgentServiceStub:
        return nodeagent_pb2_grpc.NodeAgentServiceStub(self._pool.get(address))  # type: ignore[no-untyped-call]

    async def create(
        self, address: str, spec: cluster_pb2.SandboxSpec
    ) -> cluster_pb2.SandboxRecord:
        request = nodeagent_pb2.CreateSandboxRequest(spec=spec)
        stub = self._stub(address)
        response: nodeagent_pb2.CreateSandboxResponse = await call(
            lambda: stub.CreateSandbox(request, timeout=self._create_deadline)
        )
        return response.sandbox

    async def get(self, address: str, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        request = nodeagent_pb2.GetSandboxRequest(sandbox_id=sandbox_id)
        stub = self._stub(address)
        response: nodeagent_pb2.GetSandboxResponse = await call(
            lambda: stub.GetSandbox(request, timeout=self._deadline)
        )
        return response.sandbox

    async def kill(
        self, address: str, sandbox_id: str,
        cause: cluster_pb2.DeathCause = cluster_pb2.DEATH_CAUSE_UNSPECIFIED,
        detail: str = "",
    ) -> None:
        """`cause` (a DeathCause; 0: its owner's kill) makes the kill a death with a
        certificate."""
        request = nodeagent_pb2.KillSandboxRequest(
            sandbox_id=sandbox_id, cause=cause, detail=detail)
        stub = self._stub(address)
        await call(lambda: stub.KillSandbox(request, timeout=self._deadline))

    async def set_timeout(
        self, address: str, sandbox_id: str, timeout_s: int, *, extend_only: bool = False
    ) -> cluster_pb2.SandboxRecord:
        request = nodeagent_pb2.SetSandboxTimeoutRequest(
            sandbox_id=sandbox_id, timeout_seconds=timeout_s, extend_only=extend_only
        )
        stub = self._stub(address)
        # 0 runs the timeout's action before the answer: a pause takes as long as a create.
        deadline = self._create_deadline if timeout_s == 0 else self._deadline
        response: nodeagent_pb2.SetSandboxTimeoutResponse = await call(
            lambda: stub.SetSandboxTimeout(request, timeout=deadline)
        )
        return response.sandbox

    async def logs(
        self, address: str, request: nodeagent_pb2.GetSandboxLogsRequest
    ) -> list[nodeagent_pb2.SandboxLogEntry]:
        stub = self._stub(address)
        response: nodeagent_pb2.GetSandboxLogsResponse = await call(
            lambda: stub.GetSandboxLogs(request, timeout=self._deadline)
        )
        return list(response.entries)

    async def metrics(
        self, address: str, sandbox_id: str, start: int | None = None, end: int | None = None
    ) -> list[nodeagent_pb2.SandboxMetric]:
        # Unset (not 0) when absent: the node agent tells "no bound" by field presence.
        request = nodeagent_pb2.GetSandboxMetricsRequest(sandbox_id=sandbox_id, start=start,
                                                         end=end)
        stub = self._stub(address)
        response: nodeagent_pb2.GetSandboxMetricsResponse = await call(
            lambda: stub.GetSandboxMetrics(request, timeout=self._deadline)
        )
        return list(response.metrics)

    async def latest_metrics(
        self, address: str, sandbox_ids: list[str]
    ) -> dict[str, nodeagent_pb2.SandboxMetric]:
        request = nodeagent_pb2.GetLatestSandboxMetricsRequest(sandbox_ids=sandbox_ids)
        stub = self._stub(address)
        response: nodeagent_pb2.GetLatestSandboxMetricsResponse = await call(
            lambda: stub.GetLatestSandboxMetrics(request, timeout=self._deadline)
        )
        return dict(response.metrics)

    async def update_network(
        self, address: str, sandbox_id: str, network: cluster_pb2.NetworkPolicy
    ) -> cluster_pb2.SandboxRecord:
        request = nodeagent_pb2.UpdateSandboxNetworkRequest(sandbox_id=sandbox_id, network=network)
        stub = self._stub(address)
        response: nodeagent_pb2.UpdateSandboxNetworkResponse = await call(
            lambda: stub.UpdateSandboxNetwork(request, timeout=self._deadline)
        )
        return response.sandbox

    async def pause(
        self, address: str, sandbox_id: str, keep_memory: bool = True, *,
        require_healthy_guest: bool = False,
    ) -> cluster_pb2.SandboxRecord:
        request = nodeagent_pb2.PauseSandboxRequest(
            sandbox_id=sandbox_id, keep_memory=keep_memory,
            require_healthy_guest=require_healthy_guest)
        stub = self._stub(address)
        response: nodeagent_pb2.PauseSandboxResponse = await call(
            lambda: stub.PauseSandbox(request, timeout=self._create_deadline)
        )
        return response.sandbox

    async def resume(
        self, address: str, sandbox_id: str, timeout_s: int, reboot: bool = False
    ) -> cluster_pb2.SandboxRecord:
        request = nodeagent_pb2.ResumeSandboxRequest(
            sandbox_id=sandbox_id, timeout_seconds=timeout_s, reboot=reboot
        )
        stub = self._stub(address)
        response: nodeagent_pb2.ResumeSandboxResponse = await call(
            lambda: stub.ResumeSandbox(request, timeout=self._create_deadline)
        )
        return response.sandbox

    async def take_over(
        self, address: str, sandbox_id: str, *, discard: bool = False
    ) -> cluster_pb2.SandboxRecord | None:
        """Claims a paused sandbox whose node is gone (None when `discard`ed)."""
        request = nodeagent_pb2.TakeOverSandboxRequest(sandbox_id=sandbox_id, discard=discard)
        stub = self._stub(address)
        response: nodeagent_pb2.TakeOverSandboxResponse = await call(
            lambda: stub.TakeOverSandbox(request, timeout=self._create_deadline)
        )
        return response.sandbox if response.HasField("sandbox") else None

    async def create_snapshot(
        self, address: str, sandbox_id: str, name: str, keep_memory: bool = True
    ) -> nodeagent_pb2.SnapshotInfo:
        request = nodeagent_pb2.CreateSnapshotRequest(
            sandbox_id=sandbox_id, name=name, keep_memory=keep_memory
        )
        stub = self._stub(address)
        response: nodeagent_pb2.CreateSnapshotResponse = await call(
            lambda: stub.CreateSnapshot(request, timeout=self._create_deadline)
        )
        return response.snapshot

    async def delete_snapshot(self, address: str, snapshot_id: str) -> None:
        request = nodeagent_pb2.DeleteSnapshotRequest(snapshot_id=snapshot_id)
        stub = self._stub(address)
        await call(lambda: stub.DeleteSnapshot(request, timeout=self._deadline))

    async def reset(
        self, address: str, sandbox_id: str, snapshot_id: str
    ) -> cluster_pb2.SandboxRecord:
        request = nodeagent_pb2.ResetSandboxRequest(sandbox_id=sandbox_id, snapshot_id=snapshot_id)
        stub = self._stub(address)
        response: nodeagent_pb2.ResetSandboxResponse = await call(
            lambda: stub.ResetSandbox(request, timeout=self._create_deadline)
        )
        return response.sandbox

    async def fork(
        self, address: str, request: nodeagent_pb2.ForkSandboxRequest
    ) -> list[ForkOutcome]:
        """One outcome per child, in the request's order."""
        stub = self._stub(address)
        response: nodeagent_pb2.ForkSandboxResponse = await call(
            lambda: stub.ForkSandbox(request, timeout=self._create_deadline)
        )
        return [_fork_outcome(result) for result in response.results]

    async def resolve_image(
        self, address: str, request: nodeagent_pb2.ResolveImageRequest
    ) -> str:
        """The digest the image reference names now, as that node's registry access sees it."""
        stub = self._stub(address)
        response: nodeagent_pb2.ResolveImageResponse = await call(
            lambda: stub.ResolveImage(request, timeout=self._deadline))
        return response.digest

    async def build_template(
        self, address: str, request: nodeagent_pb2.BuildTemplateRequest
    ) -> AsyncIterator[nodeagent_pb2.BuildTemplateResponse]:
        """The build's events as the node sends them; ending early cancels the build there."""
        stream = self._stub(address).BuildTemplate(request, timeout=self._build_deadline)
        try:
            async for event in stream:
                yield event
        except grpc.aio.AioRpcError as err:
            raise from_rpc_error(err) from err
        finally:
            stream.cancel()


def _fork_outcome(result: nodeagent_pb2.ForkResult) -> ForkOutcome:
    if result.HasField("sandbox"):
        return result.sandbox
    code = grpc.StatusCode.__members__.get(result.error.status, grpc.StatusCode.INTERNAL)
    return from_status(code, result.error.message)
