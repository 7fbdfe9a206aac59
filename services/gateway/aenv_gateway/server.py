"""Assembles and runs the gateway: HTTP edge (uvicorn) and gRPC API over one SandboxService.

Used by `__main__` with the etcd-backed ClusterView and by tests with an in-memory one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from dataclasses import dataclass

import aiohttp
import grpc
import uvicorn
from starlette.routing import BaseRoute, Mount
from starlette.types import ASGIApp

from aenv.gateway.v1 import gateway_pb2_grpc
from aenv_common.errors import InvalidArgument
from aenv_common.grpc_server import start_grpc_server
from aenv_common.http_server import EmbeddedServer, start_http_server
from aenv_common.httpproxy import StreamingProxy
from aenv_common.secrets import InMemorySecretRecords, SecretsKey, SecretStore
from aenv_common.snapshots import snapstore_stub
from aenv_gateway.cluster.clients import ChannelPool, NodeAgentClients, SchedulerClient
from aenv_gateway.cluster.directory import ClusterView, SandboxDirectory
from aenv_gateway.config import GatewaySettings, TlsCertificate
from aenv_gateway.core.bulk import BulkOperations
from aenv_gateway.core.creates import CreateRetryPolicy, NodeCreates
from aenv_gateway.core.egress_checks import EgressChecks
from aenv_gateway.core.events.deaths import Deaths
from aenv_gateway.core.events.memory import InMemoryEventStore
from aenv_gateway.core.events.reader import EventReader
from aenv_gateway.core.events.store import EventStore
from aenv_gateway.core.events.stream import EventHub
from aenv_gateway.core.guest_envd import GuestEnvd
from aenv_gateway.core.idempotency import IdempotentCreates, InMemoryKeyClaims, KeyClaims
from aenv_gateway.core.leases import InMemoryLeaseStore, Leases, LeaseStore
from aenv_gateway.core.sandbox_metrics import SandboxMetrics
from aenv_gateway.core.sandboxes import SandboxService
from aenv_gateway.core.secrets import GatewaySecrets
from aenv_gateway.core.snapshots import SnapshotService
from aenv_gateway.core.templates.builds import TemplateBuilds
from aenv_gateway.core.templates.catalog import TemplateCatalog
from aenv_gateway.core.templates.cleanup import TemplateCleanup
from aenv_gateway.core.templates.records import TemplateRecords
from aenv_gateway.core.templates.snapshot_catalog import SnapshotCatalog
from aenv_gateway.core.templates.uploads import ContextUploads
from aenv_gateway.core.volumes.client import VolumeClient
from aenv_gateway.core.volumes.mounts import VolumeMounts
from aenv_gateway.core.volumes.operations import Volumes
from aenv_gateway.core.volumes.records import InMemoryVolumeRecords, VolumeRecords
from aenv_gateway.core.volumes.sweep import VolumeSweep
from aenv_gateway.core.webhooks.runtime import Webhooks
from aenv_gateway.dashboard.app import Dashboard
from aenv_gateway.dashboard.parts import DashboardParts
from aenv_gateway.grpc.deaths import DeathsInterceptor
from aenv_gateway.grpc.events import SandboxEvents
from aenv_gateway.grpc.exec_stream import ExecStreams
from aenv_gateway.grpc.file_transfer import FileTransfers
from aenv_gateway.grpc.key_holding import KeyHoldingInterceptor
from aenv_gateway.grpc.servicer import SERVICE_NAME, GatewayServicer
from aenv_gateway.keys.auth import ApiKeyAuth
from aenv_gateway.keys.open_requests import OpenRequests
from aenv_gateway.keys.records import ApiKeyRecords, InMemoryApiKeyRecords, KeyIndex
from aenv_gateway.metrics import SANDBOX_STATES
from aenv_gateway.rest.app import GatewayApp, control_routes, instrumented
from aenv_gateway.rest.boundary import Access
from aenv_gateway.rest.dataplane import DataPlane
from aenv_gateway.rest.edge_limits import guarded_http_protocol
from aenv_gateway.rest.key_holding import RevocableRequests
from aenv_gateway.rest.logs import SandboxLogs
from aenv_gateway.rest.routes.events import EventRoutes, with_deaths
from aenv_gateway.rest.routes.keys import KeyRoutes
from aenv_gateway.rest.routes.leases import LeaseRoutes
from aenv_gateway.rest.routes.sandboxes import SandboxRoutes
from aenv_gateway.rest.routes.secrets import SecretRoutes
from aenv_gateway.rest.routes.snapshots import SnapshotRoutes
from aenv_gateway.rest.routes.templates import TemplateRoutes
from aenv_gateway.rest.routes.volumes import VolumeRoutes
from aenv_gateway.rest.routes.webhooks import WebhookRoutes
from aenv_gateway.rest.schemas import Presenter
from aenv_gateway.rest.signed_urls import SignedFileRouter

log = logging.getLogger(__name__)


@dataclass
class RunningGateway:
    http_port: int
    # The HTTPS edge's port (settings.tls_listen), None without one.
    https_port: int | None
    grpc_port: int
    service: SandboxService
    directory: SandboxDirectory
    # The control-plane routes served (the OpenAPI test checks each is documented).
    routes: list[BaseRoute]
    # The HTTP edge's ASGI app (in-process tests drive it without a socket).
    app: ASGIApp
    # The stored API keys (their SHA-256 digests).
    api_keys: ApiKeyRecords
    # The Secret API's operations (the network checks ask it for unknown placeholders).
    secrets: GatewaySecrets
    # Volumes (records, snapstore's VolumeService) and the sweep of fork children's clones.
    volumes: Volumes
    sweep: VolumeSweep
    _edges: list[tuple[EmbeddedServer, asyncio.Task[None]]]
    _grpc: grpc.aio.Server
    _session: aiohttp.ClientSession
    _pool: ChannelPool
    _builds: TemplateBuilds
    # Lifecycle events: where they are read, and the hub that follows them for streams.
    event_store: EventStore | None = None
    event_hub: EventHub | None = None
    # Lifecycle webhooks: their registry and, over etcd, their deliverer.
    webhooks: Webhooks | None = None

    async def stop(self) -> None:
        if self.webhooks is not None:
            await self.webhooks.stop()
        if self.event_hub is not None:
            await self.event_hub.stop()  # its streams end first, with an error event
        await self.sweep.stop()
        await self._builds.stop()
        await self.service.close()
        for server, _ in self._edges:
            server.should_exit = True
        for _, task in self._edges:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._grpc.stop(grace=2)
        await self._session.close()
        await self._pool.close()
        SANDBOX_STATES.detach(self.directory.records)
        log.info("gateway stopped")

    async def wait(self) -> None:
        await asyncio.gather(*(task for _, task in self._edges))


def _bind(address: str) -> socket.socket:
    host, port = GatewaySettings.split_host_port(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _check_certificate(certificate: TlsCertificate) -> None:
    """Loads the certificate as uvicorn will, so a bad one fails with its reason (uvicorn's own
    start-up failure says only that it could not listen)."""
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(*certificate)
    except (OSError, ssl.SSLError) as err:
        raise InvalidArgument(
            f"TLS certificate {certificate.cert} / key {certificate.key}: {err}"
        ) from err


async def start_gateway(
    settings: GatewaySettings, view: ClusterView, template_records: TemplateRecords,
    api_key: str, api_keys: ApiKeyRecords | None = None, key_claims: KeyClaims | None = None,
    secret_store: SecretStore | None = None, secrets_key: SecretsKey | None = None,
    volume_records: VolumeRecords | None = None, lease_store: LeaseStore | None = None,
    event_store: EventStore | None = None, webhooks: Webhooks | None = None,
) -> RunningGateway:
    """Starts the edges (HTTP, HTTPS when configured, gRPC); call `stop()` on the result to shut
    them down. `api_keys` and `key_claims` (idempotency keys) are kept in memory when not given
    (tests, a gateway on its own), as are secrets without `secret_store`. `secrets_key` is the
    platform secrets key `secret_store` seals with (egress proxy passwords are sealed with it too);
    a random one without it. Volume records are kept in memory without `volume_records`.

    :raise InvalidArgument: the TLS certificate or key cannot be loaded.
    :raise Unavailable: a listen address is taken.
    """
    if settings.tls is not None:
        _check_certificate(settings.tls.certificate)
    pool = ChannelPool()
    directory = SandboxDirectory(view)
    nodeagents = NodeAgentClients(pool, settings.create_deadline_s, settings.rpc_deadline_s,
                                  settings.build_deadline_s)
    scheduler = SchedulerClient(pool, settings.scheduler_address, settings.rpc_deadline_s,
                                settings.scheduler_failover_s)
    key = secrets_key or SecretsKey.generate()
    secrets = GatewaySecrets(secret_store or SecretStore(InMemorySecretRecords(), key))
    catalog = TemplateCatalog(template_records)
    snapshot_names = SnapshotCatalog(catalog)
    builds = TemplateBuilds(catalog, scheduler, nodeagents)
    volumes = Volumes(
        volume_records if volume_records is not None else InMemoryVolumeRecords(),
        VolumeClient(pool.get(settings.snapstore_address), settings.rpc_deadline_s)
        if settings.snapstore_address else None,
        directory)
    service = SandboxService(
        directory,
        scheduler,
        nodeagents,
        max_timeout_s=settings.max_timeout_s,
        idempotent=IdempotentCreates(
            key_claims or InMemoryKeyClaims(settings.idempotency_ttl_s)),
        templates=snapshot_names.source,
        creates=NodeCreates(nodeagents, CreateRetryPolicy(
            settings.create_retry_s, settings.create_retry_interval_s, settings.create_abandon_s)),
        egress=EgressChecks(secrets, key),
        mounts=VolumeMounts(volumes),
        # Experiment leases: in memory without `lease_store` (tests, a gateway on its own).
        leases=Leases(lease_store or InMemoryLeaseStore(), directory.records),
    )
    bulk = BulkOperations(service, settings.bulk_concurrency)
    snapshots = SnapshotService(service, directory, nodeagents, snapshot_names)
    # Lifecycle events and death certificates (docs/events.md): read from etcd (in memory
    # without `event_store`: tests, a gateway on its own), followed through one watch.
    events_store = event_store if event_store is not None else InMemoryEventStore()
    deaths = Deaths(events_store, directory)
    hub = EventHub(events_store, settings.event_queue_size)
    await hub.start()
    native_events = SandboxEvents(EventReader(events_store), hub)
    # The stored keys (in memory without etcd: tests, a gateway on its own).
    key_records = api_keys if api_keys is not None else InMemoryApiKeyRecords()
    stored_keys = KeyIndex(key_records)
    auth = ApiKeyAuth(api_key, stored_keys)
    open_requests = OpenRequests(settings.max_open_requests_per_key)
    stored_keys.on_revoked(open_requests.cut)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=False), auto_decompress=False
    )
    metrics = SandboxMetrics(service, directory, nodeagents)
    logs = SandboxLogs(service, nodeagents)
    sandbox_routes = SandboxRoutes(
        service,
        Presenter(settings.domain, settings.fallback_envd_version),
        settings.default_timeout_s,
        logs,
        metrics,
    )
    snapstore = (snapstore_stub(pool.get(settings.snapstore_address))
                 if settings.snapstore_address else None)
    template_routes = TemplateRoutes(catalog, builds, ContextUploads(snapstore, api_key),
                                     snapshots, settings.fallback_envd_version,
                                     TemplateCleanup(template_records, snapstore))
    # The bulk routes (/sandboxes/kill, /sandboxes/pause) before /sandboxes/{id}: a 405's Allow
    # names the methods of the first path that matches.
    routes = [*LeaseRoutes(service.leases, bulk).routes(),
              *control_routes(sandbox_routes, SnapshotRoutes(snapshots), template_routes),
              *KeyRoutes(key_records).routes(), *SecretRoutes(secrets).routes(),
              *VolumeRoutes(volumes, auth).routes()]
    # A 404 of a route naming a {sandbox_id} that died carries its death certificate.
    routes = [*with_deaths(routes, deaths),
              *EventRoutes(native_events.reader, hub, settings.event_heartbeat_s).routes()]
    # Lifecycle webhooks: kept in memory without `webhooks` (nothing to deliver without etcd).
    hooks = webhooks if webhooks is not None else Webhooks.in_memory(settings, key)
    routes += WebhookRoutes(hooks.registry).routes()
    # The operators' dashboard: its own login and sessions (no key header), so open here.
    dashboard = Dashboard(DashboardParts(
        service, auth, view, metrics, logs.read, catalog, native_events.reader, hub, deaths,
        settings.default_timeout_s, settings.common.telemetry.trace_dir))
    stored_keys.on_revoked(dashboard.sessions.end_keys)
    mounted = Mount("/dashboard", app=dashboard.app)
    mounted.access = Access.OPEN  # type: ignore[attr-defined]
    edge = GatewayApp(
        [*routes, mounted],
        DataPlane(service.wake, StreamingProxy(session), deaths),
        settings.domain,
        SignedFileRouter(directory.records),
        settings.edge_limits,
        auth,
    )
    app = RevocableRequests(edge, auth, open_requests)
    guests = GuestEnvd(service, session)
    grpc_server, grpc_port = await start_grpc_server(
        settings.grpc_listen,
        [
            (
                gateway_pb2_grpc.add_GatewayServiceServicer_to_server,
                GatewayServicer(service, snapshots, settings.default_timeout_s,
                                ExecStreams(guests), FileTransfers(guests), metrics, bulk,
                                events=native_events),
                SERVICE_NAME,
            )
        ],
        # Outermost first: the key's hold spans the whole call, death certificates included.
        [KeyHoldingInterceptor(auth, open_requests, SERVICE_NAME), DeathsInterceptor(deaths)],
    )
    edges = [await _serve_edge(instrumented(app), settings, settings.listen, None)]
    if settings.tls is not None:
        edges.append(await _serve_edge(
            instrumented(app), settings, settings.tls.listen, settings.tls.certificate
        ))
    http_port, https_port = edges[0][2], edges[1][2] if len(edges) > 1 else None
    log.info(
        "gateway listening",
        extra={"http_port": http_port, "https_port": https_port, "grpc_port": grpc_port},
    )
    SANDBOX_STATES.attach(directory.records)
    sweep = VolumeSweep(volumes, directory, settings.volume_sweep_interval_s,
                        settings.volume_sweep_grace_s)
    sweep.start()
    hooks.start()
    return RunningGateway(
        http_port, https_port, grpc_port, service, directory, routes, app, key_records, secrets,
        volumes, sweep, [(server, task) for server, task, _ in edges], grpc_server, session,
        pool, builds, event_store=events_store, event_hub=hub, webhooks=hooks,
    )


async def _serve_edge(
    app: ASGIApp, settings: GatewaySettings, address: str, tls: TlsCertificate | None
) -> tuple[EmbeddedServer, asyncio.Task[None], int]:
    """One listener of the HTTP edge; with a certificate, it terminates TLS."""
    sock = _bind(address)
    config = uvicorn.Config(
        app,
        lifespan="off",
        http=guarded_http_protocol(settings.header_timeout_s),
        ws="websockets-sansio",
        log_config=None,
        access_log=False,
        # Streams stay open for hours; only idle keep-alive connections between requests expire.
        timeout_keep_alive=75,
        ws_ping_interval=None,
        timeout_graceful_shutdown=settings.shutdown_grace_s,
        ssl_certfile=tls.cert if tls else None,
        ssl_keyfile=tls.key if tls else None,
    )
    server, task = await start_http_server(config, sock)
    return server, task, sock.getsockname()[1]
