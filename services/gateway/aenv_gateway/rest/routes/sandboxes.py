"""E2B sandbox routes (spec e2b-compat §2.3, §2.4): parse, call SandboxService, present."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError, InvalidArgument
from aenv_common.status_tables import http_status
from aenv_gateway.cluster.clients import ForkOutcome
from aenv_gateway.core.batch import BatchCreates, BatchResult
from aenv_gateway.core.idempotency import checked_key
from aenv_gateway.core.policy import FORK_DEFAULT_TIMEOUT_S
from aenv_gateway.core.sandbox_metrics import SandboxMetrics
from aenv_gateway.core.sandboxes import SandboxService
from aenv_gateway.rest.boundary import route
from aenv_gateway.rest.logs import (
    SandboxLogs,
    parse_logs_v1,
    parse_logs_v2,
    present_entry,
    present_line,
)
from aenv_gateway.rest.network_schema import parse_network_update
from aenv_gateway.rest.schemas import (
    MAX_INT64,
    Presenter,
    json_field,
    parse_batch,
    parse_json_object,
    parse_list_query,
    parse_memory,
    parse_new_sandbox,
    parse_refresh,
    parse_timeout,
    present_metric,
)


class SandboxRoutes:
    def __init__(
        self,
        service: SandboxService,
        presenter: Presenter,
        default_timeout_s: int,
        logs: SandboxLogs,
        metrics: SandboxMetrics,
    ) -> None:
        self._service = service
        self._batch = BatchCreates(service)
        self._logs = logs
        self._metrics = metrics
        self._present = presenter
        self._default_timeout = default_timeout_s

    async def create_v2(self, request: Request) -> Response:
        return await self._create(request, self._default_timeout)

    async def create_v1(self, request: Request) -> Response:
        return await self._create(request, LEGACY_TIMEOUT_S)

    async def _create(self, request: Request, default_timeout_s: int) -> Response:
        body = parse_json_object(await request.body())
        create = parse_new_sandbox(body, default_timeout_s, request.headers.get("idempotency-key"),
                                   self._service.egress.seal_password)
        record = await self._service.create(create)
        return JSONResponse(self._present.sandbox(record), status_code=201)

    async def create_batch(self, request: Request) -> Response:
        """Native: N sandboxes, one entry each (its sandbox or its error), in the order asked."""
        creates = parse_batch(parse_json_object(await request.body()), self._default_timeout,
                              self._service.egress.seal_password)
        key = checked_key(request.headers.get("idempotency-key"))
        results = await self._batch.create(creates, key)
        return JSONResponse([self._batch_entry(r) for r in results], status_code=201)

    def _batch_entry(self, result: BatchResult) -> dict[str, Any]:
        if isinstance(result, AenvError):
            return {"error": {"code": http_status(result), "message": result.message}}
        return {"sandbox": self._present.sandbox(result)}

    async def get(self, request: Request) -> Response:
        record = await self._service.get(request.path_params["sandbox_id"])
        return JSONResponse(self._present.detail(record))

    async def list_v2(self, request: Request) -> Response:
        page = self._service.list(parse_list_query(request.query_params, paginated=True))
        headers = {"X-Next-Token": page.next_cursor} if page.next_cursor else None
        return JSONResponse([self._present.listed(r) for r in page.items], headers=headers)

    async def list_legacy(self, request: Request) -> Response:
        page = self._service.list(parse_list_query(request.query_params, paginated=False))
        return JSONResponse([self._present.listed(r) for r in page.items])

    async def kill(self, request: Request) -> Response:
        await self._service.kill(request.path_params["sandbox_id"])
        return Response(status_code=204)

    async def set_timeout(self, request: Request) -> Response:
        timeout = parse_timeout(parse_json_object(await request.body()), required=True)
        assert timeout is not None  # required=True
        await self._service.set_timeout(request.path_params["sandbox_id"], timeout)
        return Response(status_code=204)

    async def refresh(self, request: Request) -> Response:
        duration = parse_refresh(parse_json_object(await request.body()))
        await self._service.refresh(request.path_params["sandbox_id"], duration)
        return Response(status_code=204)

    async def logs_v1(self, request: Request) -> Response:
        """Deprecated by E2B, still served: `logs` (raw lines) and `logEntries`, oldest first."""
        query = parse_logs_v1(request.query_params, self._logs.clock_ms())
        entries = await self._logs.read(request.path_params["sandbox_id"], query)
        return JSONResponse({"logs": [present_line(e) for e in entries],
                             "logEntries": [present_entry(e) for e in entries]})

    async def logs_v2(self, request: Request) -> Response:
        query = parse_logs_v2(request.query_params, self._logs.clock_ms())
        entries = await self._logs.read(request.path_params["sandbox_id"], query)
        return JSONResponse({"logs": [present_entry(e) for e in entries]})

    async def connect_v2(self, request: Request) -> Response:
        return await self._connect(request, timeout_required=False)

    async def connect_v1(self, request: Request) -> Response:
        return await self._connect(request, timeout_required=True)

    async def _connect(self, request: Request, timeout_required: bool) -> Response:
        """As E2B's: a running sandbox lives at least `timeout` (default: create's) from now,
        never shortened; a paused one is resumed for `timeout` from now."""
        body = parse_json_object(await request.body())
        timeout = parse_timeout(body, required=timeout_required)
        connected = await self._service.connect(
            request.path_params["sandbox_id"],
            self._default_timeout if timeout is None else timeout,
            reboot=not parse_memory(body))
        status = 201 if connected.resumed else 200
        return JSONResponse(self._present.sandbox(connected.record), status_code=status)

    async def resume(self, request: Request) -> Response:
        """Deprecated ResumedSandbox: `timeout` defaults to E2B's 15 s; `autoPause` may only
        restate the sandbox's lifecycle (a resume here does not change it)."""
        body = parse_json_object(await request.body())
        timeout = parse_timeout(body, required=False)
        connected = await self._service.resume(
            request.path_params["sandbox_id"], LEGACY_TIMEOUT_S if timeout is None else timeout,
            reboot=not parse_memory(body), auto_pause=json_field(body, "autoPause", bool))
        return JSONResponse(self._present.sandbox(connected.record), status_code=201)

    async def pause(self, request: Request) -> Response:
        body = parse_json_object(await request.body())
        await self._service.pause(
            request.path_params["sandbox_id"], parse_memory(body),
            require_healthy_guest=json_field(body, "requireHealthyGuest", bool) is True)
        return Response(status_code=204)

    async def reset(self, request: Request) -> Response:
        """Native extension: rewind in place (same id, token, address) to a snapshot."""
        snapshot_id = parse_json_object(await request.body()).get("snapshotID")
        if not isinstance(snapshot_id, str) or not snapshot_id:
            raise InvalidArgument("snapshotID is required and must be a string")
        record = await self._service.reset(request.path_params["sandbox_id"], snapshot_id)
        return JSONResponse(self._present.sandbox(record))

    async def fork(self, request: Request) -> Response:
        body = parse_json_object(await request.body())
        count = json_field(body, "count", int)
        timeout = json_field(body, "timeout", int)
        mode = json_field(body, "volumeMode", str) or "shared"
        if mode not in ("shared", "copy-on-write"):
            raise InvalidArgument("volumeMode must be shared or copy-on-write")
        results = await self._service.fork(
            request.path_params["sandbox_id"], 1 if count is None else count,
            FORK_DEFAULT_TIMEOUT_S if timeout is None else timeout,
            copy_on_write=mode == "copy-on-write")
        return JSONResponse([self._fork_entry(r) for r in results], status_code=201)

    def _fork_entry(self, outcome: ForkOutcome) -> dict[str, Any]:
        if isinstance(outcome, cluster_pb2.SandboxRecord):
            return {"sandbox": self._present.sandbox(outcome)}
        return {"error": {"code": http_status(outcome), "message": outcome.message}}

    async def metrics(self, request: Request) -> Response:
        start, end = parse_metrics_window(request.query_params)
        metrics = await self._metrics.history(request.path_params["sandbox_id"], start, end)
        return JSONResponse([present_metric(m) for m in metrics])

    async def batch_metrics(self, request: Request) -> Response:
        """`GET /sandboxes/metrics?sandbox_ids=a,b`: SandboxesWithMetrics, the newest sample of
        each sandbox by id (unknown ones and ones without a sample yet are left out)."""
        ids = parse_sandbox_ids(request.query_params)
        latest = await self._metrics.latest(ids)
        return JSONResponse({"sandboxes": {sid: present_metric(m) for sid, m in latest.items()}})

    async def update_network(self, request: Request) -> Response:
        network = parse_network_update(parse_json_object(await request.body()),
                                       self._service.egress.seal_password)
        await self._service.update_network(request.path_params["sandbox_id"], network)
        return Response(status_code=204)

    def routes(self) -> list[Route]:
        sid = "/sandboxes/{sandbox_id}"
        return [
            route("/v2/sandboxes", self.create_v2, "POST"),
            route("/sandboxes", self.create_v1, "POST"),
            route("/v2/sandboxes", self.list_v2, "GET"),
            route("/sandboxes", self.list_legacy, "GET"),
            route("/sandboxes/metrics", self.batch_metrics, "GET"),
            route("/sandboxes/batch", self.create_batch, "POST"),
            route(sid, self.get, "GET"),
            route(sid, self.kill, "DELETE"),
            route(f"{sid}/timeout", self.set_timeout, "POST"),
            route(f"/v2{sid}/connect", self.connect_v2, "POST"),
            route(f"{sid}/connect", self.connect_v1, "POST"),
            route(f"{sid}/resume", self.resume, "POST"),
            route(f"{sid}/pause", self.pause, "POST"),
            route(f"{sid}/fork", self.fork, "POST"),
            route(f"{sid}/reset", self.reset, "POST"),
            route(f"{sid}/network", self.update_network, "PUT"),
            route(f"{sid}/metrics", self.metrics, "GET"),
            route(f"{sid}/refreshes", self.refresh, "POST"),
            route(f"{sid}/logs", self.logs_v1, "GET"),
            route(f"/v2{sid}/logs", self.logs_v2, "GET"),
        ]


# E2B's SandboxTimeoutDefault: the deprecated v1 create's and /resume's timeout when none is given.
LEGACY_TIMEOUT_S = 15
# Upstream's limit on `sandbox_ids` of the batch metrics route.
MAX_METRICS_SANDBOXES = 100


def _unix_seconds(params: Mapping[str, str], name: str) -> int | None:
    value = params.get(name)
    if value is None:
        return None
    try:
        seconds = int(value)
    except ValueError:
        raise InvalidArgument(f"{name} must be an integer (unix seconds)") from None
    if not 0 <= seconds <= MAX_INT64:
        raise InvalidArgument(f"{name} must be between 0 and {MAX_INT64}")
    return seconds


def parse_metrics_window(params: Mapping[str, str]) -> tuple[int | None, int | None]:
    """`start`/`end` of `GET /sandboxes/{id}/metrics`: unix seconds, both optional (their order
    is SandboxMetrics.history's to check, for both APIs)."""
    return _unix_seconds(params, "start"), _unix_seconds(params, "end")


def parse_sandbox_ids(params: Mapping[str, str]) -> list[str]:
    """`sandbox_ids=a,b` (comma-separated, as the SDKs' generated clients send it)."""
    given = [sid.strip() for sid in params.get("sandbox_ids", "").split(",") if sid.strip()]
    if not given:
        raise InvalidArgument("sandbox_ids is required")
    if len(given) > MAX_METRICS_SANDBOXES:
        raise InvalidArgument(f"at most {MAX_METRICS_SANDBOXES} sandbox_ids")
    return list(dict.fromkeys(given))
