"""The node agent assembled: guest artifacts, template snapshots, sandboxes, gRPC API, data-plane
proxy and cluster registration, started and stopped as one unit."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import logging
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import grpc
import uvicorn
from google.protobuf.timestamp_pb2 import Timestamp
from prometheus_client import REGISTRY

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2_grpc
from aenv_common.cluster import ClusterStore, NodeRegistration
from aenv_common.errors import AenvError
from aenv_common.events import EventLog
from aenv_common.grpc_server import start_grpc_server
from aenv_common.http_server import start_http_server
from aenv_common.metrics import MetricsEndpoint
from aenv_common.snapshots import snapstore_stub
from aenv_nodeagent.artifacts import ensure_base_rootfs, ensure_guest_artifacts
from aenv_nodeagent.artifacts.preload import ensure_preload_library
from aenv_nodeagent.artifacts.rootfs import (
    BACKGROUND_NICE,
    CODE_INTERPRETER_ROOTFS,
    ensure_rootfs_build,
    is_rootfs_cached,
)
from aenv_nodeagent.capacity.eviction import Evictions
from aenv_nodeagent.capacity.guard import NodeCapacity
from aenv_nodeagent.capacity.host import MIB, memory_available_mib
from aenv_nodeagent.config import NodeAgentSettings
from aenv_nodeagent.confinement import Confinement, LimitSettings, choose
from aenv_nodeagent.egress.startup import start_egress
from aenv_nodeagent.egress.supervisor import EgressSupervisor
from aenv_nodeagent.envd_client import EnvdClient, guest_session
from aenv_nodeagent.guest_commands import GuestCommands
from aenv_nodeagent.images import BlobCache, RegistryHosts, load_credentials
from aenv_nodeagent.leases import LeaseReaper, WingSandboxes
from aenv_nodeagent.metrics import NodeCollector, NodeReadings
from aenv_nodeagent.network import NetworkConfig, NetworkManager
from aenv_nodeagent.network.host_nat import HostNat
from aenv_nodeagent.network.resolved_sets import ResolvedSets
from aenv_nodeagent.pool import WarmPool
from aenv_nodeagent.proxy import SandboxConnections, build_proxy_app
from aenv_nodeagent.restart.recovery import recover
from aenv_nodeagent.sandbox.context import SandboxSettings, WingContext
from aenv_nodeagent.sandbox.events import SandboxEvents
from aenv_nodeagent.sandbox.liveness import LivenessSettings
from aenv_nodeagent.sandbox.registry import SandboxRegistry
from aenv_nodeagent.sandbox.wing import SandboxWing
from aenv_nodeagent.sandbox_metrics import MetricsSampler
from aenv_nodeagent.servicer import NodeAgentServicer
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence
from aenv_nodeagent.snapshots.records import SnapshotPublisher
from aenv_nodeagent.templates import TemplateInputs, TemplateStore
from aenv_nodeagent.templates.bases import ImageBases
from aenv_nodeagent.templates.bounds import BuildCacheSizes, build_cache_bounds, run_bounds
from aenv_nodeagent.templates.builds import ImageDiskSizes, TemplateBuilds
from aenv_nodeagent.templates.cache import TemplateCache
from aenv_nodeagent.templates.code_interpreter import (
    CODE_INTERPRETER_TEMPLATE,
    code_interpreter_inputs,
)
from aenv_nodeagent.templates.distribution import TemplateDistribution, cluster_templates
from aenv_nodeagent.templates.model import BASE_TEMPLATE
from aenv_nodeagent.templates.outdated import OutdatedCaptures, node_disks
from aenv_nodeagent.templates.retire import RetiredMarks, RetiredTemplates
from aenv_nodeagent.templates.saved import SavedTemplates
from aenv_nodeagent.templates.steps import BuildContexts
from aenv_nodeagent.vmm import AcceleratorChoice, QemuDriver, VmJail, detect_accelerator
from aenv_nodeagent.vmm.driver import VmmDriver
from aenv_nodeagent.vmm.jail_choice import choose as choose_jail
from aenv_nodeagent.vmm.uids import UidRange
from aenv_nodeagent.volumes import VolumeEndpoint, VolumeRelays

log = logging.getLogger(__name__)


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



async def _publish_builtin(
    store: ClusterStore, inputs: TemplateInputs, envd_version: str
) -> None:
    """A template every node has, under its own name."""
    created = Timestamp()
    created.GetCurrentTime()
    await store.put_template(cluster_pb2.TemplateRecord(
        template_id=inputs.template_id,
        aliases=[inputs.template_id],
        default_resources=cluster_pb2.Resources(
            vcpus=inputs.vcpus, memory_mib=inputs.memory_mib, disk_mib=inputs.disk_mib),
        envd_version=envd_version,
        created_at=created,
    ))


async def _prewarm(templates: TemplateStore, template_id: str) -> None:
    """Captures the template ahead of its first create (a failure is that create's to report)."""
    try:
        await templates.get(template_id)
    except AenvError as err:
        log.warning("template prewarm failed",
                    extra={"template": template_id, "error": err.message})


class _Templates(NamedTuple):
    """This node's templates, where it keeps the ones it built or pulled, and snapstore's."""

    store: TemplateStore
    saved: SavedTemplates
    distribution: TemplateDistribution | None

class NodeAgent:
    """Starts its parts in order, each registered with its stop on one exit stack, so `stop`
    undoes exactly what `start` did, in reverse."""

    def __init__(self, settings: NodeAgentSettings) -> None:
        self.settings = settings
        self.accel: AcceleratorChoice | None = None
        self.kernel_version = ""
        self.registry = SandboxRegistry(settings.node_id)
        self.sandboxes: SandboxWing | None = None
        self.templates: TemplateStore | None = None
        self.grpc_port = 0
        self.confinement: Confinement | None = None
        self.capacity: NodeCapacity | None = None
        self.egress: EgressSupervisor | None = None  # its pid: what bench/egress.py measures
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> None:
        s, stack = self.settings, self._stack
        self.accel = detect_accelerator(s.pvm_guest_kernel)
        store = await ClusterStore.connect(s.common)
        stack.push_async_callback(store.close)
        session = guest_session()
        stack.push_async_callback(session.close)
        connections = SandboxConnections()
        stack.push_async_callback(connections.close)
        net_config = NetworkConfig(prefix=s.net_prefix, pool_cidr=s.net_pool_cidr)
        resolved = ResolvedSets(net_config)
        self.egress = egress = await start_egress(s, store, net_config, resolved.add)
        stack.push_async_callback(egress.stop)  # after the sandboxes: their slots detach first
        envd = EnvdClient(session, egress_ca_pem=egress.ca_cert_pem)
        host_nat = HostNat.of(net_config, s.egress_forward_destinations)
        await host_nat.ensure()
        stack.push_async_callback(host_nat.remove)  # after the last slot's guest is gone
        relays = VolumeRelays(VolumeEndpoint(s.snapstore_address))
        stack.push_async_callback(relays.close)  # after the sandboxes: their slots stop theirs
        network = NetworkManager(net_config, egress=egress, resolved=resolved, host_nat=host_nat,
                                 relays=relays)
        stack.push_async_callback(network.settled)
        driver = QemuDriver(self._jail(), s.vmm_start_timeout_s)
        events = SandboxEvents(store, s.node_id, EventLog(store, s.common.events_retention_s)
                               if s.events_enabled else None)
        stack.push_async_callback(events.close)  # after the sandboxes' last deaths
        recovered = await recover(s.node_id, s.resolved_state_dir(), network, store,
                                  await store.list_sandboxes(), driver.jail,
                                  templates_dir=s.resolved_templates_dir(), relays=relays,
                                  events=events)
        publisher = SnapshotPublisher(store, s.node_id)
        persistence = self._persistence(publisher)
        kept = await self._prepare_templates(
            store, network, envd, driver, GuestCommands(session), persistence)
        self.templates = templates = kept.store
        builds = self._template_builds(kept, store, session)
        builds.load_saved()  # before the sandboxes that stand on them are taken back
        if kept.distribution is not None:  # the pushes a stop cut short
            self._run(kept.distribution.resume(kept.saved.load_all(),
                                               lambda: cluster_templates(store)))
        pool = WarmPool(network, s.resolved_state_dir() / "pool",
                        slots=s.warm_pool_slots, overlays_per_backing=s.warm_pool_overlays,
                        vms_per_template=s.warm_pool_vms,
                        guests_per_template=s.warm_pool_guests,
                        snapshot_vms_per_template=s.warm_pool_snapshot_vms,
                        vm_root=s.resolved_state_dir() / "sandboxes",
                        room=lambda: (memory_available_mib()
                                      > s.warm_pool_guests_min_available_mib))
        pool.start()
        stack.push_async_callback(pool.close)
        # Stopped after the sandboxes are killed: until then the cluster sees the node alive.
        registration = NodeRegistration(store, self.node_record, ttl=s.heartbeat_ttl_s)
        stack.push_async_callback(registration.stop)
        wing = WingContext.of(
            SandboxSettings(s.resolved_state_dir(), ready_timeout_s=s.restore_ready_timeout_s,
                            persist_paused=s.snapstore_persist_paused,
                            metrics_max_samples=s.metrics_max_samples,
                            fork_restores_at_once=s.fork_restores_at_once),
            self.registry, store, templates, network, envd, events=events,
            cut_traffic=connections.cut, allocation_changed=registration.publish,
            persistence=persistence)
        self.sandboxes = sandboxes = SandboxWing(wing, driver, pool=pool, relays=relays,
                                                 publisher=publisher,
                                                 commands=GuestCommands(session))
        stack.push_async_callback(sandboxes.stop)
        self.capacity = capacity = NodeCapacity.of_host(
            s, self.registry, templates, wing.snapshot_store, self.node_record)
        await sandboxes.takeback.adopt(recovered.adopted)
        paused = sandboxes.takeback.load()
        await publisher.sync(wing.snapshot_store.listed())
        grpc_server, self.grpc_port = await start_grpc_server(
            s.listen,
            [(nodeagent_pb2_grpc.add_NodeAgentServiceServicer_to_server,
              NodeAgentServicer(sandboxes, self.node_record, builds, capacity),
              "aenv.nodeagent.v1.NodeAgentService")],
        )
        stack.push_async_callback(grpc_server.stop, 1.0)
        await self._start_proxy(connections)
        await self._serve_metrics(pool)
        await capacity.meter.sample()  # the first record says what the node uses already
        await registration.start()
        await sandboxes.takeback.republish_running()
        self._run(capacity.meter.run(registration.publish, s.pressure_interval_s))
        self._run(sandboxes.kills.run_expiry())
        self._run(sandboxes.exits.run())
        # Experiment leases: this node's sandboxes end when their lease lapses (leases/).
        reaper = LeaseReaper(store, WingSandboxes(sandboxes, store),
                             interval_s=s.lease_reconcile_interval_s,
                             concurrency=s.lease_reap_concurrency)
        await reaper.start()
        stack.push_async_callback(reaper.stop)
        self._run(sandboxes.liveness(LivenessSettings(
            s.liveness_interval_s, s.liveness_failures, s.liveness_timeout_s)).run())
        self._run(Evictions(self.registry, sandboxes.kills.kill, s.evict_below_available_mib).run(
            s.pressure_interval_s))
        self._run(self._metrics_sampler(sandboxes).run())
        self._run(sandboxes.logs.run())
        self._run(TemplateCache(
            templates, int(s.template_cache_max_gib * (1 << 30)), sandboxes.templates_in_use,
            pool.forget_template).run(s.template_cache_trim_interval_s))
        marks = RetiredMarks(store, s.node_id)
        self._run(RetiredTemplates(
            templates, kept.saved, marks.ids, sandboxes.templates_in_use,
            pool.forget_template, marks).run(s.template_cache_trim_interval_s))
        self._run(OutdatedCaptures(
            templates, node_disks(s.resolved_state_dir()), pool.forget_template, persistence,
        ).run(s.template_cache_trim_interval_s))
        self._run(run_bounds(build_cache_bounds(
            templates, s.resolved_image_cache_dir(), s.resolved_templates_dir(),
            BuildCacheSizes(*(int(gib * (1 << 30)) for gib in (
                s.image_blob_cache_max_gib, s.image_bases_max_gib, s.step_layers_max_gib,
                s.pulled_rootfs_max_gib)))),
            s.template_cache_trim_interval_s))
        log.info(
            "node agent ready",
            extra={"node_id": s.node_id, "accelerator": str(self.accel.accel),
                   "reason": self.accel.reason, "grpc": s.listen, "proxy": s.proxy_listen,
                   "paused_sandboxes": len(paused)},
        )

    async def stop(self) -> None:
        """Undo `start`: the running sandboxes are killed (paused ones and snapshots stay on
        disk for the next start), then the servers and connections close."""
        await self._stack.aclose()

    async def _serve_metrics(self, pool: WarmPool) -> None:
        s, registry, capacity = self.settings, self.registry, self.capacity
        if s.metrics_listen is None or capacity is None:
            return
        collector = NodeCollector(NodeReadings(
            sandboxes_by_state=lambda: {"running": len(registry.all()),
                                        "paused": len(registry.paused_ids())},
            pool_depth=pool.sizes,
            pool_takes=lambda: dict(pool.takes),
            capacity=capacity.offer.capacity,
            allocated=registry.allocated,
            vm_pss_bytes=capacity.meter.measured_bytes,
            host_available_bytes=lambda: capacity.meter.available_mib * MIB,
            memory_budget_mib=capacity.offer.memory_budget_mib,
            pressure=lambda: capacity.meter.pressure,
        ))
        REGISTRY.register(collector)
        self._stack.callback(REGISTRY.unregister, collector)
        endpoint = await MetricsEndpoint.start(s.metrics_listen)
        self._stack.push_async_callback(endpoint.stop)

    def _run(self, work: Coroutine[None, None, object]) -> None:
        task = asyncio.create_task(work)

        async def cancel() -> None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

        self._stack.push_async_callback(cancel)

    def _jail(self) -> VmJail:
        """How VMs are confined here (a cgroup each and a jail, when the host can): said in the
        node's record; with vmm_cgroups or vmm_jail required, the start fails where the host
        cannot."""
        s = self.settings
        try:
            confinement = choose(
                s.vmm_cgroups, s.resolved_state_dir(),
                LimitSettings(s.vmm_memory_overhead_mib, s.vmm_pids_max), s.vmm_cgroup_parent)
            jailing = choose_jail(s.vmm_jail, UidRange(s.vmm_uid_first, s.vmm_uid_count))
        except AenvError as err:
            log.error("node agent cannot start", extra={"error": err.message})
            raise
        if confinement.cgroups is not None:
            # Registered before the sandboxes: their VMs are gone when the slices go.
            self._stack.callback(confinement.cgroups.close)
        self.confinement = dataclasses.replace(
            confinement, status=f"{confinement.status}; {jailing.status}")
        return VmJail(confinement.cgroups, nofile=s.vmm_nofile_max, uids=jailing.uids)

    def _persistence(self, publisher: SnapshotPublisher) -> SnapshotPersistence | None:
        s = self.settings
        if not s.snapstore_address:
            return None
        return SnapshotPersistence(s.snapstore_address, max_pushes=s.snapstore_max_pushes,
                                   on_persisted=publisher.mark_persisted,
                                   push_nice=s.snapstore_push_nice)

    def _metrics_sampler(self, sandboxes: SandboxWing) -> MetricsSampler:
        s = self.settings
        return MetricsSampler(
            sandboxes.guest_metrics, sandboxes.guest_metrics.history,
            interval_s=s.metrics_interval_s, timeout_s=s.metrics_sample_timeout_s,
            # Paused sandboxes keep their history (no new samples) until they are killed.
            kept=lambda: {record.sandbox_id for record in sandboxes.registry.records()},
        )

    async def _prepare_templates(
        self, store: ClusterStore, network: NetworkManager, envd: EnvdClient, driver: VmmDriver,
        commands: GuestCommands, persistence: SnapshotPersistence | None,
    ) -> _Templates:
        s = self.settings
        assert self.accel is not None
        inputs = await base_template_inputs(s, self.accel)
        self.kernel_version = inputs.artifacts.kernel_version
        root = s.resolved_templates_dir()
        saved = SavedTemplates(root / "built", inputs)
        distribution = (TemplateDistribution(persistence, root, saved)
                        if persistence is not None else None)
        templates = TemplateStore(
            root, network, envd, driver, commands,
            boot_timeout_s=s.boot_timeout_s, boot_attempts=s.boot_attempts,
            contexts=BuildContexts(root / "contexts", self._snapstore_stub()),
            remote=distribution, ready_timeout_s=s.build_ready_timeout_s,
        )
        templates.register(inputs)
        snap = await templates.get(BASE_TEMPLATE)
        await _publish_builtin(store, inputs, snap.envd_version)
        interpreter = self._code_interpreter(store, templates, inputs, snap.envd_version)
        if is_rootfs_cached(s.resolved_cache_dir(), CODE_INTERPRETER_ROOTFS):
            await interpreter
        else:
            # A first start: its rootfs takes minutes to build, so the node is ready with base
            # and publishes code-interpreter-v1 when that is done.
            log.info("building code-interpreter-v1's rootfs in the background")
            self._run(interpreter)
        return _Templates(templates, saved, distribution)

    async def _code_interpreter(
        self, store: ClusterStore, templates: TemplateStore, base: TemplateInputs, envd: str
    ) -> None:
        s = self.settings
        try:
            rootfs = await ensure_rootfs_build(
                s.resolved_cache_dir(), CODE_INTERPRETER_ROOTFS, nice=BACKGROUND_NICE)
        except AenvError as err:  # the node serves base; a restart tries again
            log.error("code-interpreter-v1's rootfs build failed", extra={"error": err.message})
            return
        log.info("code-interpreter-v1's rootfs ready", extra={"built": rootfs.entry.built})
        interpreter = code_interpreter_inputs(base, rootfs.image)
        templates.register(interpreter)
        # Same tools disk as base's, so the same envd.
        await _publish_builtin(store, interpreter, envd)
        if s.prewarm_code_interpreter:
            self._run(_prewarm(templates, CODE_INTERPRETER_TEMPLATE))

    def _snapstore_stub(self) -> Any | None:
        """A snapstore client for template builds' uploaded files (None: no snapstore)."""
        if not self.settings.snapstore_address:
            return None
        channel = grpc.aio.insecure_channel(self.settings.snapstore_address)
        self._stack.push_async_callback(channel.close)
        return snapstore_stub(channel)

    def _template_builds(
        self, kept: _Templates, store: ClusterStore, session: aiohttp.ClientSession
    ) -> TemplateBuilds:
        s = self.settings
        images = s.resolved_image_cache_dir()
        hosts = RegistryHosts(s.registry_mirrors, s.insecure_registries, s.registry_mirror_only)
        bases = ImageBases(images / "bases", BlobCache(images), hosts,
                           load_credentials(s.registry_credentials_file), session)
        return TemplateBuilds(kept.store, bases, kept.saved, store.put_template,
                              kept.distribution,
                              ImageDiskSizes(s.template_min_free_disk_mib, s.template_max_disk_mib))

    async def _start_proxy(self, connections: SandboxConnections) -> None:
        host, _, port = self.settings.proxy_listen.rpartition(":")
        config = uvicorn.Config(
            build_proxy_app(self.registry, connections), host=host, port=int(port),
            log_config=None, access_log=False, lifespan="off", timeout_keep_alive=75,
            # Long-lived streams (process output, watches) must not hold up a stop.
            timeout_graceful_shutdown=3,
        )
        proxy, serving = await start_http_server(config)

        async def stop() -> None:
            proxy.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await serving

        self._stack.push_async_callback(stop)

    def node_record(self) -> cluster_pb2.NodeRecord:
        s = self.settings
        now = Timestamp()
        now.FromNanoseconds(time.time_ns())
        templates = self.templates
        record = cluster_pb2.NodeRecord(
            node_id=s.node_id,
            nodeagent_address=s.nodeagent_address(),
            proxy_address=s.proxy_address(),
            allocated=self.registry.allocated(),
            sandbox_count=len(self.registry.all()),
            cached_templates=[t.template_id for t in templates.cached()] if templates else [],
            accelerator=str(self.accel.accel) if self.accel else "",
            kernel_version=self.kernel_version,
            heartbeat_time=now,
            confinement=self.confinement.status if self.confinement else "",
        )
        if self.capacity is not None:
            self.capacity.fill(record)
        return record
