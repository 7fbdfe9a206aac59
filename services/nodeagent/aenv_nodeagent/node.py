"""The node agent assembled: guest artifacts, template snapshots, sandboxes, gRPC API, data-plane
proxy and cluster registration, started and stopped as one unit."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import time
from pathlib import Path

import aiohttp
import grpc
import uvicorn
from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2_grpc
from aenv_common.cluster import ClusterStore, NodeRegistration
from aenv_common.grpc_server import start_grpc_server
from aenv_common.http_server import start_http_server
from aenv_nodeagent.artifacts import ensure_base_rootfs, ensure_guest_artifacts
from aenv_nodeagent.artifacts.preload import ensure_preload_library
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.lifecycle import SandboxLifecycle
from aenv_nodeagent.metrics import MetricsSampler
from aenv_nodeagent.network import NetworkConfig, NetworkManager
from aenv_nodeagent.persistence import SnapshotPersistence
from aenv_nodeagent.pool import WarmPool
from aenv_nodeagent.proxy import SandboxConnections, build_proxy_app
from aenv_nodeagent.recovery import recover
from aenv_nodeagent.sandboxes import SandboxManager
from aenv_nodeagent.servicer import NodeAgentServicer
from aenv_nodeagent.snapshot_records import SnapshotPublisher
from aenv_nodeagent.templates import TemplateInputs, TemplateStore
from aenv_nodeagent.vmm import AcceleratorChoice, detect_accelerator

log = logging.getLogger(__name__)

BASE_TEMPLATE = "base"


def default_envd_packages() -> list[Path]:
    """Source trees installed onto every guest's tools disk: the generated protos and envd. Only
    their location is looked up; nothing of envd is imported here."""
    found: list[Path] = []
    for module, levels in (("envd", 3), ("aenv_envd", 2)):
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"cannot locate the {module} package for the guest tools disk")
        found.append(Path(spec.origin).parents[levels - 1])
    return found


async def base_template_inputs(
    settings: NodeAgentSettings, accel: AcceleratorChoice
) -> TemplateInputs:
    """What the `base` template is made of on this node (artifacts are built if missing)."""
    cache = settings.resolved_cache_dir()
    artifacts, rootfs, preload = await asyncio.gather(
        ensure_guest_artifacts(cache, default_envd_packages()), ensure_base_rootfs(cache),
        ensure_preload_library(cache),
    )
    return TemplateInputs(
        BASE_TEMPLATE, artifacts, rootfs, accel,
        vcpus=settings.default_vcpus, memory_mib=settings.default_memory_mib,
        disk_mib=settings.default_disk_mib, tcg_tb_mib=settings.tcg_tb_mib,
        preload_library=preload.path,
    )


class NodeAgent:
    def __init__(self, settings: NodeAgentSettings) -> None:
        self.settings = settings
        self.accel: AcceleratorChoice | None = None
        self.kernel_version = ""
        self._store: ClusterStore | None = None
        self._session: aiohttp.ClientSession | None = None
        self._connections = SandboxConnections()
        self.network: NetworkManager | None = None
        self._grpc: grpc.aio.Server | None = None
        self._proxy: uvicorn.Server | None = None
        self._tasks: list[asyncio.Task[object]] = []
        self._registration: NodeRegistration | None = None
        self.manager: SandboxManager | None = None
        self.lifecycle: SandboxLifecycle | None = None
        self.templates: TemplateStore | None = None
        self.pool: WarmPool | None = None
        self.grpc_port = 0

    async def start(self) -> None:
        s = self.settings
        self.accel = detect_accelerator(s.pvm_guest_kernel)
        self._store = store = await ClusterStore.connect(s.common)
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        envd = EnvdClient(self._session)
        self.network = network = NetworkManager(
            NetworkConfig(prefix=s.net_prefix, pool_cidr=s.net_pool_cidr))
        recovered = await recover(s.node_id, s.resolved_state_dir(), network, store,
                                  await store.list_sandboxes())

        self.templates = await self._prepare_templates(network, envd)
        self.pool = WarmPool(network, s.resolved_state_dir() / "pool",
                             slots=s.warm_pool_slots, overlays_per_backing=s.warm_pool_overlays,
                             vms_per_template=s.warm_pool_vms,
                             vm_root=s.resolved_state_dir() / "sandboxes")
        self.pool.start()
        self.manager = SandboxManager(
            s.node_id, s.resolved_state_dir(), self.templates, network, envd, store,
            ready_timeout_s=s.restore_ready_timeout_s, pool=self.pool,
            metrics_max_samples=s.metrics_max_samples,
        )
        self.manager.on_traffic_cut = self._connections.cut
        self.lifecycle = SandboxLifecycle(
            self.manager, self.templates, network, envd, store, s.resolved_state_dir(),
            ready_timeout_s=s.restore_ready_timeout_s, persistence=self._persistence(),
            persist_paused=s.snapstore_persist_paused,
        )
        snapshot_records = SnapshotPublisher(store, s.node_id)
        if self.lifecycle.persistence is not None:
            self.lifecycle.persistence.on_persisted = snapshot_records.mark_persisted
        self.lifecycle.on_snapshot_lost = snapshot_records.withdraw
        await self.lifecycle.adopt(recovered.adopted)
        paused = self.lifecycle.load()
        await snapshot_records.sync(self.lifecycle.snapshots.listed())
        servicer = NodeAgentServicer(
            self.manager, self.lifecycle, self.node_record, snapshot_records)
        self._grpc, self.grpc_port = await start_grpc_server(
            s.listen,
            [(nodeagent_pb2_grpc.add_NodeAgentServiceServicer_to_server, servicer,
              "aenv.nodeagent.v1.NodeAgentService")],
        )
        await self._start_proxy()
        self._registration = NodeRegistration(store, self.node_record, ttl=s.heartbeat_ttl_s)
        await self._registration.start()
        self.manager.on_allocation_change = self._registration.publish
        self._tasks.append(asyncio.create_task(self.manager.run_expiry()))
        self._tasks.append(asyncio.create_task(self._metrics_sampler().run()))
        log.info(
            "node agent ready",
            extra={"node_id": s.node_id, "accelerator": str(self.accel.accel),
                   "reason": self.accel.reason, "grpc": s.listen, "proxy": s.proxy_listen,
                   "paused_sandboxes": len(paused)},
        )

    def _persistence(self) -> SnapshotPersistence | None:
        s = self.settings
        if not s.snapstore_address:
            return None
        return SnapshotPersistence(s.snapstore_address, max_pushes=s.snapstore_max_pushes)

    def _metrics_sampler(self) -> MetricsSampler:
        assert self.manager is not None and self.lifecycle is not None
        lifecycle, s = self.lifecycle, self.settings
        return MetricsSampler(
            self.manager, self.manager.metrics_history,
            interval_s=s.metrics_interval_s, timeout_s=s.metrics_sample_timeout_s,
            # Paused sandboxes keep their history (no new samples) until they are killed.
            kept=lambda: {record.sandbox_id for record in lifecycle.records()},
        )

    async def _prepare_templates(self, network: NetworkManager, envd: EnvdClient) -> TemplateStore:
        s = self.settings
        assert self.accel is not None and self._store is not None
        inputs = await base_template_inputs(s, self.accel)
        self.kernel_version = inputs.artifacts.kernel_version
        templates = TemplateStore(
            s.resolved_cache_dir() / "templates", network, envd,
            boot_timeout_s=s.boot_timeout_s, boot_attempts=s.boot_attempts,
        )
        templates.register(inputs)
        snap = await templates.get(BASE_TEMPLATE)
        created = Timestamp()
        created.GetCurrentTime()
        await self._store.put_template(cluster_pb2.TemplateRecord(
            template_id=BASE_TEMPLATE,
            aliases=[BASE_TEMPLATE],
            default_resources=cluster_pb2.Resources(
                vcpus=snap.vcpus, memory_mib=snap.memory_mib, disk_mib=snap.disk_mib),
            envd_version=snap.envd_version,
            created_at=created,
        ))
        return templates

    async def _start_proxy(self) -> None:
        assert self.manager is not None and self._session is not None
        host, _, port = self.settings.proxy_listen.rpartition(":")
        config = uvicorn.Config(
            build_proxy_app(self.manager, self._connections), host=host, port=int(port),
            log_config=None, access_log=False, lifespan="off", timeout_keep_alive=75,
            # Long-lived streams (process output, watches) must not hold up a stop.
            timeout_graceful_shutdown=3,
        )
        self._proxy, serving = await start_http_server(config)
        self._tasks.append(serving)

    def node_record(self) -> cluster_pb2.NodeRecord:
        s = self.settings
        now = Timestamp()
        now.FromNanoseconds(time.time_ns())
        manager, templates = self.manager, self.templates
        return cluster_pb2.NodeRecord(
            node_id=s.node_id,
            nodeagent_address=s.nodeagent_address(),
            proxy_address=s.proxy_address(),
            capacity=cluster_pb2.Resources(
                vcpus=s.capacity_vcpus, memory_mib=s.capacity_memory_mib),
            allocated=manager.allocated() if manager else cluster_pb2.Resources(),
            sandbox_count=len(manager.all()) if manager else 0,
            cached_templates=[t.template_id for t in templates.cached()] if templates else [],
            accelerator=str(self.accel.accel) if self.accel else "",
            kernel_version=self.kernel_version,
            heartbeat_time=now,
        )

    async def stop(self) -> None:
        """Kills the running sandboxes (paused ones and snapshots stay on disk for the next
        start), then closes the servers."""
        if self._grpc is not None:
            await self._grpc.stop(grace=1.0)
        if self.lifecycle is not None:
            await self.lifecycle.memory_images.close()
            if self.lifecycle.persistence is not None:
                await self.lifecycle.persistence.close()
        if self.manager is not None:
            await self.manager.kill_all()
        if self.pool is not None:
            await self.pool.close()
        if self.lifecycle is not None:
            await self.lifecycle.settled()
        if self.network is not None:
            await self.network.settled()
        if self._proxy is not None:
            self._proxy.should_exit = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._registration is not None:
            await self._registration.stop()
        await self._connections.close()
        if self._session is not None:
            await self._session.close()
        if self._store is not None:
            await self._store.close()
