"""A fake GatewayService for the client's tests: sandboxes in a dict, creates deduplicated by
idempotency key as the gateway does, and failures to inject (UNAVAILABLE for the next calls, a
slow answer, a sandbox that dies); a fork and a file read for their outcomes and errors, a
timeout that ends a sandbox at 0, and one metrics sample per second of a window."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from aenv_common.errors import NotFound, Unauthenticated, Unavailable
from aenv_common.grpc_server import start_grpc_server

API_KEY = "e2b_" + "a" * 40


@dataclass
class FakeGateway(gateway_pb2_grpc.GatewayServiceServicer):
    sandboxes: dict[str, cluster_pb2.SandboxRecord] = field(default_factory=dict)
    by_key: dict[str, cluster_pb2.SandboxRecord] = field(default_factory=dict)
    # Every call: (method, idempotency key or sandbox id, the caller's address).
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    unavailable: int = 0  # the next this many calls answer UNAVAILABLE
    delay_s: float = 0.0  # GetSandbox answers after this long
    lost: set[str] = field(default_factory=set)  # sandboxes lost with their node
    # Every metrics window asked for: (start, end), None where unset.
    windows: list[tuple[int | None, int | None]] = field(default_factory=list)

    def _enter(self, method: str, subject: str, context: grpc.aio.ServicerContext) -> None:
        if dict(context.invocation_metadata() or ()).get("x-api-key") != API_KEY:
            raise Unauthenticated("invalid API key")
        self.calls.append((method, subject, context.peer()))
        if self.unavailable:
            self.unavailable -= 1
            raise Unavailable("the node agent did not answer")

    def _make(self, template_id: str, key: str) -> cluster_pb2.SandboxRecord:
        if key in self.by_key:
            return self.by_key[key]
        if template_id != "base":
            raise NotFound(f'template "{template_id}" not found')
        record = cluster_pb2.SandboxRecord(
            sandbox_id=f"sb{len(self.sandboxes) + len(self.lost)}",
            template_id=template_id,
            state=cluster_pb2.SANDBOX_STATE_RUNNING,
        )
        self.sandboxes[record.sandbox_id] = self.by_key[key] = record
        return record

    async def CreateSandbox(
        self, request: gateway_pb2.CreateSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateSandboxResponse:
        self._enter("CreateSandbox", request.idempotency_key, context)
        return gateway_pb2.CreateSandboxResponse(
            sandbox=self._make(request.template_id, request.idempotency_key)
        )

    async def CreateSandboxes(
        self, request: gateway_pb2.CreateSandboxesRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.CreateSandboxesResponse:
        self._enter("CreateSandboxes", request.idempotency_key, context)
        items = list(request.items) or [gateway_pb2.CreateSandboxRequest()] * request.count
        results = []
        for i, item in enumerate(items):
            try:
                made = self._make(
                    item.template_id or request.template_id, f"{request.idempotency_key}/{i}"
                )
                results.append(gateway_pb2.CreateResult(sandbox=made))
            except NotFound as err:
                results.append(
                    gateway_pb2.CreateResult(
                        error=gateway_pb2.SandboxError(
                            code=404, message=err.message, status="NOT_FOUND"
                        )
                    )
                )
        return gateway_pb2.CreateSandboxesResponse(results=results)

    async def GetSandbox(
        self, request: gateway_pb2.GetSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetSandboxResponse:
        self._enter("GetSandbox", request.sandbox_id, context)
        await asyncio.sleep(self.delay_s)
        return gateway_pb2.GetSandboxResponse(sandbox=self._find(request.sandbox_id))

    async def KillSandbox(
        self, request: gateway_pb2.KillSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.KillSandboxResponse:
        self._enter("KillSandbox", request.sandbox_id, context)
        self._find(request.sandbox_id)
        del self.sandboxes[request.sandbox_id]
        return gateway_pb2.KillSandboxResponse()

    async def ForkSandbox(
        self, request: gateway_pb2.ForkSandboxRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.ForkSandboxResponse:
        """The first child is made; the others fail as a node out of room would fail them."""
        self._enter("ForkSandbox", request.sandbox_id, context)
        self._find(request.sandbox_id)
        child = self._make("base", f"fork-{request.sandbox_id}-{len(self.calls)}")
        results = [gateway_pb2.ForkResult(sandbox=child)]
        error = gateway_pb2.ForkError(code=503, message="no room", status="UNAVAILABLE")
        results += [gateway_pb2.ForkResult(error=error)] * (request.count - 1)
        return gateway_pb2.ForkSandboxResponse(results=results)

    async def SetSandboxTimeout(
        self, request: gateway_pb2.SetSandboxTimeoutRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.SetSandboxTimeoutResponse:
        self._enter("SetSandboxTimeout", request.sandbox_id, context)
        record = self._find(request.sandbox_id)
        record.end_at.FromSeconds(1_000_000 + request.timeout_seconds)
        if request.timeout_seconds == 0:
            del self.sandboxes[request.sandbox_id]
            record.state = cluster_pb2.SANDBOX_STATE_KILLING
        return gateway_pb2.SetSandboxTimeoutResponse(sandbox=record)

    async def GetSandboxMetrics(
        self, request: gateway_pb2.GetSandboxMetricsRequest, context: grpc.aio.ServicerContext
    ) -> gateway_pb2.GetSandboxMetricsResponse:
        """A sample at each second from start to end (100 to 102 when unset)."""
        self._enter("GetSandboxMetrics", request.sandbox_id, context)
        self._find(request.sandbox_id)
        start = request.start if request.HasField("start") else None
        end = request.end if request.HasField("end") else None
        self.windows.append((start, end))
        samples = [
            gateway_pb2.SandboxMetric(
                timestamp=Timestamp(seconds=second),
                cpu_count=2,
                cpu_used_pct=50.0,
                mem_used=1 << 20,
                mem_total=1 << 30,
                disk_used=2 << 20,
                disk_total=1 << 31,
            )
            for second in range(start or 100, (end or 102) + 1)
        ]
        return gateway_pb2.GetSandboxMetricsResponse(metrics=samples)

    async def GetFile(
        self, request: gateway_pb2.GetFileRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[gateway_pb2.GetFileResponse]:
        """Every sandbox holds one file, /hello."""
        self._enter("GetFile", request.file.sandbox_id, context)
        self._find(request.file.sandbox_id)
        if request.file.path != "/hello":
            raise NotFound(f"path '{request.file.path}' does not exist")
        yield gateway_pb2.GetFileResponse(data=b"hel", size=5)
        yield gateway_pb2.GetFileResponse(data=b"lo")

    def _find(self, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        if sandbox_id in self.lost:
            raise NotFound(f'sandbox "{sandbox_id}" was lost with its node')
        if sandbox_id not in self.sandboxes:
            raise NotFound(f'sandbox "{sandbox_id}" not found')
        return self.sandboxes[sandbox_id]

    def die(self, sandbox_id: str, *, lost: bool = False) -> None:
        del self.sandboxes[sandbox_id]
        if lost:
            self.lost.add(sandbox_id)


@contextlib.asynccontextmanager
async def serving(gateway: FakeGateway) -> AsyncIterator[str]:
    server, port = await start_grpc_server(
        "127.0.0.1:0",
        [
            (
                gateway_pb2_grpc.add_GatewayServiceServicer_to_server,
                gateway,
                "aenv.gateway.v1.GatewayService",
            )
        ],
    )
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)
