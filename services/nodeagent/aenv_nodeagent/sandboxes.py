"""Sandboxes on this node: restore a template snapshot into a new microVM, track, expire, kill.

A create never cold-boots: it maps the template's frozen RAM copy-on-write, puts a private qcow2
overlay over the template's frozen disk layer, loads the device state, and hands envd its
identity. Whatever fails along the way is undone, so a failed create leaks nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import aiohttp
from google.protobuf.timestamp_pb2 import Timestamp
from opentelemetry import trace

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, InvalidArgument, NotFound, Unavailable
from aenv_common.ids import is_valid_sandbox_id
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.envd_client import EnvdClient
from aenv_nodeagent.metrics import (
    ALL_TIME,
    DEFAULT_MAX_SAMPLES,
    SAMPLE_ERRORS,
    MetricSample,
    MetricsHistory,
    Window,
)
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkManager, netns_exec_prefix
from aenv_nodeagent.pool import WarmPool
from aenv_nodeagent.templates import TemplateInputs, TemplateSnapshot, TemplateStore, vm_spec
from aenv_nodeagent.vmm import QemuVm

T = TypeVar("T")
log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 24 * 3600


class SandboxRecords(Protocol):
    """Where sandbox records are published (etcd in production); this node is their only writer."""

    async def put_sandbox(self, rec: cluster_pb2.SandboxRecord) -> object: ...
    async def delete_sandbox(self, sandbox_id: str) -> None: ...


@dataclass
class Sandbox:
    record: cluster_pb2.SandboxRecord
    slot: NetSlot
    vm: QemuVm
    directory: Path
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def host(self) -> str:
        """Where the node reaches the guest's ports (DNAT inside the sandbox's netns)."""
        return self.slot.ns_ip


def timestamp(seconds: float) -> Timestamp:
    ts = Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def egress_policy(net: cluster_pb2.NetworkPolicy) -> EgressPolicy:
    return EgressPolicy(
        allow_internet=net.allow_internet_access,
        allow_out=list(net.allow_out),
        deny_out=list(net.deny_out),
        dns_servers=list(net.dns_servers),
    )


class SandboxManager:
    def __init__(
        self,
        node_id: str,
        state_dir: Path,
        templates: TemplateStore,
        network: NetworkManager,
        envd: EnvdClient,
        records: SandboxRecords,
        *,
        ready_timeout_s: float,
        pool: WarmPool | None = None,
        metrics_max_samples: int = DEFAULT_MAX_SAMPLES,
    ) -> None:
        self._node_id = node_id
        self._pool = pool
        self._dir = state_dir / "sandboxes"
        self._templates = templates
        self._network = network
        self._envd = envd
        self._records = records
        self._ready_timeout_s = ready_timeout_s
        self._sandboxes: dict[str, Sandbox] = {}
        self._busy: set[str] = set()
        # Sandboxes being killed: still tracked, no longer sent traffic.
        self._leaving: set[str] = set()
        # Filled by a MetricsSampler; a ring lives until its sandbox is killed (kept over a pause).
        self.metrics_history = MetricsHistory(metrics_max_samples)
        # Called after this node's allocation changed (the node record carries it to the
        # scheduler, whose reservations end once the node reports the sandbox).
        self.on_allocation_change: Callable[[], Awaitable[None]] | None = None
        # What an expired sandbox gets instead of a kill (auto-pause), when set.
        self.on_expired: Callable[[str], Awaitable[object]] | None = None
        # Ends the traffic in flight to a sandbox whose VM stops (the proxy's connections).
        self.on_traffic_cut: Callable[[str], Awaitable[None]] | None = None

    # --- queries -------------------------------------------------------------------------------

    def get(self, sandbox_id: str) -> Sandbox:
        try:
            return self._sandboxes[sandbox_id]
        except KeyError:
            raise NotFound(f"sandbox \"{sandbox_id}\" not found") from None

    def find(self, sandbox_id: str) -> Sandbox | None:
        return self._sandboxes.get(sandbox_id)

    def serving(self, sandbox_id: str) -> Sandbox | None:
        """The sandbox, if its VM takes traffic (tracked and not being killed)."""
        return None if sandbox_id in self._leaving else self._sandboxes.get(sandbox_id)

    def all(self) -> list[Sandbox]:
        return list(self._sandboxes.values())

    def is_running(self, sandbox_id: str) -> bool:
        return sandbox_id in self._sandboxes

    def sampling_targets(self) -> list[str]:
        # Busy ones are being paused, captured or reset: a request into the guest now would
        # compete with the operation (or be captured half-done into a snapshot).
        return [sid for sid in self._sandboxes if sid not in self._busy]

    def allocated(self) -> cluster_pb2.Resources:
        total = cluster_pb2.Resources()
        for sbx in self._sandboxes.values():
            total.vcpus += sbx.record.resources.vcpus
            total.memory_mib += sbx.record.resources.memory_mib
            total.disk_mib += sbx.record.resources.disk_mib
        return total

    # --- create --------------------------------------------------------------------------------

    async def new_slot(self, policy: EgressPolicy) -> NetSlot:
        """A network slot for a sandbox, from the warm pool when there is one."""
        if self._pool is not None:
            return await self._pool.take_slot(policy)
        return await self._network.create_slot(policy)

    async def new_overlay(self, backing: Path, path: Path) -> None:
        if self._pool is not None:
            await self._pool.take_overlay(backing, path)
        else:
            await create_overlay(backing, path)

    async def create(self, spec: cluster_pb2.SandboxSpec) -> Sandbox:
        validate_spec(spec)
        if spec.sandbox_id in self._sandboxes or spec.sandbox_id in self._busy:
            raise Conflict(f"sandbox \"{spec.sandbox_id}\" already exists")
        self._busy.add(spec.sandbox_id)
        try:
            with tracer.start_as_current_span("sandbox.create") as span:
                span.set_attribute("sandbox.id", spec.sandbox_id)
                span.set_attribute("template.id", spec.template_id)
                return await self._create(spec)
        finally:
            self._busy.discard(spec.sandbox_id)

    async def _create(self, spec: cluster_pb2.SandboxSpec) -> Sandbox:
        timings: dict[str, float] = {}
        template = await timed(timings, "template", self._templates.get(spec.template_id))
        _check_resources(spec, template)
        directory = self._dir / spec.sandbox_id
        cleanup = Undo()
        try:
            slot, vm = await self._restore_target(spec, template, directory, timings, cleanup)
            await timed(timings, "restore", vm.restore(template.state))
            await timed(
                timings, "envd_ready", self._envd.wait_healthy(slot.ns_ip, self._ready_timeout_s)
            )
            version = await timed(
                timings,
                "envd_init",
                self._envd.init(
                    slot.ns_ip, env_vars=spec.env_vars, access_token=spec.envd_access_token
                ),
            )
            record = self.new_record(spec, template, version)
            sandbox = Sandbox(record, slot, vm, directory, timings)
            self._sandboxes[spec.sandbox_id] = sandbox
            cleanup.push(lambda: self._forget(spec.sandbox_id))
            await timed(timings, "publish", self._records.put_sandbox(record))
        except BaseException:
            await cleanup.run()
            raise
        await self._allocation_changed()
        log.info(
            "sandbox created",
            extra={"sandbox_id": spec.sandbox_id, "template": spec.template_id,
                   **ms_fields(timings)},
        )
        return sandbox

    async def _restore_target(
        self, spec: cluster_pb2.SandboxSpec, template: TemplateSnapshot, directory: Path,
        timings: dict[str, float], cleanup: Undo,
    ) -> tuple[NetSlot, QemuVm]:
        """The sandbox's directory, slot and a QEMU waiting for the template's state: a
        pre-started one from the warm pool when there is one, else built now."""
        pool, pooled = self._pool, None
        if pool is not None:
            pool.want_vms(template.template_id, functools.partial(self._launch_pooled, template))
            pooled = pool.take_vm(template.template_id)
        if pool is None or pooled is None:
            return await self._build_target(spec, template, directory, timings, cleanup)
        cleanup.push(lambda: _rmtree(pooled.directory))
        cleanup.push(lambda: _rmtree(directory))
        cleanup.push(lambda: self._network.destroy_slot(pooled.slot))
        cleanup.push(pooled.vm.shutdown)
        pooled.directory.rename(directory)
        await timed(timings, "pooled_vm",
                    pool.adopt_policy(pooled.slot, egress_policy(spec.network)))
        return pooled.slot, pooled.vm

    async def _build_target(
        self, spec: cluster_pb2.SandboxSpec, template: TemplateSnapshot, directory: Path,
        timings: dict[str, float], cleanup: Undo,
    ) -> tuple[NetSlot, QemuVm]:
        directory.mkdir(parents=True, exist_ok=False)
        cleanup.push(lambda: _rmtree(directory))
        slot_task = asyncio.ensure_future(
            timed(timings, "network", self.new_slot(egress_policy(spec.network)))
        )
        try:
            await timed(timings, "overlay",
                        self.new_overlay(template.disk, directory / "disk.qcow2"))
        finally:
            # The slot is built meanwhile; whatever happened to the overlay, it is undone.
            slot = await slot_task
            cleanup.push(lambda: self._network.destroy_slot(slot))
        inputs = self._templates.inputs(template.template_id)
        vm = await timed(timings, "launch",
                         launch_restore_target(inputs, directory, template.memory, slot))
        cleanup.push(vm.shutdown)
        return slot, vm

    async def _launch_pooled(
        self, template: TemplateSnapshot, directory: Path, slot: NetSlot
    ) -> QemuVm:
        await create_overlay(template.disk, directory / "disk.qcow2")
        inputs = self._templates.inputs(template.template_id)
        return await launch_restore_target(inputs, directory, template.memory, slot,
                                           disk_by_fd=True)

    def new_record(
        self, spec: cluster_pb2.SandboxSpec, template: TemplateSnapshot, envd_version: str
    ) -> cluster_pb2.SandboxRecord:
        now = time.time()
        timeout = spec.timeout_seconds or DEFAULT_TIMEOUT_S
        return cluster_pb2.SandboxRecord(
            sandbox_id=spec.sandbox_id,
            node_id=self._node_id,
            template_id=spec.template_id,
            state=cluster_pb2.SANDBOX_STATE_RUNNING,
            resources=cluster_pb2.Resources(
                vcpus=template.vcpus, memory_mib=template.memory_mib, disk_mib=template.disk_mib
            ),
            metadata=dict(spec.metadata),
            started_at=timestamp(now),
            end_at=timestamp(now + timeout),
            envd_access_token=spec.envd_access_token,
            envd_version=envd_version,
            alias=spec.template_id,
            network=spec.network,
            lifecycle=spec.lifecycle,
            env_vars=dict(spec.env_vars),
            traffic_access_token=spec.traffic_access_token,
            base_template_id=template.template_id,
        )

    # --- hand-over to pause/resume/fork (aenv_nodeagent.lifecycle) ------------------------------

    async def register(self, sandbox: Sandbox) -> None:
        """Track a sandbox restored elsewhere (resume, fork, snapshot) and publish its record."""
        self._sandboxes[sandbox.record.sandbox_id] = sandbox
        await self._records.put_sandbox(sandbox.record)
        await self._allocation_changed()

    async def detach(self, sandbox_id: str) -> Sandbox:
        """Stop tracking a sandbox whose VM is gone (paused) without touching its files."""
        sandbox = self._sandboxes.pop(sandbox_id)
        await self.cut_traffic(sandbox_id)
        await self._allocation_changed()
        return sandbox

    async def cut_traffic(self, sandbox_id: str) -> None:
        """End the requests in flight to the sandbox's VM: its guest answers none of them now."""
        if self.on_traffic_cut is not None:
            await self.on_traffic_cut(sandbox_id)

    @property
    def node_id(self) -> str:
        return self._node_id

    @contextlib.asynccontextmanager
    async def exclusive(self, sandbox_id: str) -> AsyncIterator[None]:
        """One operation at a time per sandbox: a second one is refused, never queued."""
        if sandbox_id in self._busy:
            raise Conflict(f"sandbox \"{sandbox_id}\" is busy")
        self._busy.add(sandbox_id)
        try:
            yield
        finally:
            self._busy.discard(sandbox_id)

    # --- lifecycle -----------------------------------------------------------------------------

    async def set_timeout(self, sandbox_id: str, timeout_s: int) -> cluster_pb2.SandboxRecord:
        if not 0 <= timeout_s <= MAX_TIMEOUT_S:
            raise InvalidArgument(f"timeout must be between 0 and {MAX_TIMEOUT_S} seconds")
        sandbox = self.get(sandbox_id)
        sandbox.record.end_at.CopyFrom(timestamp(time.time() + timeout_s))
        await self._records.put_sandbox(sandbox.record)
        return sandbox.record

    async def sample(self, sandbox_id: str) -> MetricSample:
        """One live sample of envd's figures; Unavailable when the guest does not answer."""
        sandbox = self.get(sandbox_id)
        try:
            data = await self._envd.metrics(sandbox.host, sandbox.record.envd_access_token)
            return MetricSample.from_envd(data, time.time())
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise Unavailable(f"envd of \"{sandbox_id}\" did not answer: {err!r}") from err

    async def metrics(self, sandbox_id: str, window: Window = ALL_TIME) -> list[MetricSample]:
        """The kept samples in the window, oldest first. A running sandbox not sampled yet gets
        one live sample, so a fresh sandbox answers too."""
        self.get(sandbox_id)
        history = self.metrics_history
        if not history.has(sandbox_id) and sandbox_id not in self._busy:
            history.add(sandbox_id, await self.sample(sandbox_id))
        return history.window(sandbox_id, window)

    async def latest_metric(self, sandbox_id: str) -> MetricSample | None:
        """The newest sample (a live one when there is none yet); None when the guest does not
        answer or an operation holds the sandbox. Paused ones keep their newest sample."""
        try:
            await self.metrics(sandbox_id)
        except NotFound:
            pass  # paused (its kept history answers) or unknown
        except SAMPLE_ERRORS as err:
            log.debug("live metrics sample failed",
                      extra={"sandbox_id": sandbox_id, "error": repr(err)})
        return self.metrics_history.latest(sandbox_id)

    async def update_network(
        self, sandbox_id: str, network: cluster_pb2.NetworkPolicy
    ) -> cluster_pb2.SandboxRecord:
        sandbox = self.get(sandbox_id)
        # The update replaces egress settings only; how the sandbox's ports are reached stays.
        updated = cluster_pb2.NetworkPolicy()
        updated.CopyFrom(network)
        updated.private_traffic = sandbox.record.network.private_traffic
        updated.mask_request_host = sandbox.record.network.mask_request_host
        await self._network.update_policy(sandbox.slot, egress_policy(updated))
        sandbox.record.network.CopyFrom(updated)
        await self._records.put_sandbox(sandbox.record)
        return sandbox.record

    async def kill(self, sandbox_id: str) -> None:
        sandbox = self.get(sandbox_id)
        if sandbox_id in self._busy:
            raise Conflict(f"sandbox \"{sandbox_id}\" is busy")
        self._busy.add(sandbox_id)
        try:
            with tracer.start_as_current_span("sandbox.kill") as span:
                span.set_attribute("sandbox.id", sandbox_id)
                await self._destroy(sandbox)
        finally:
            self._busy.discard(sandbox_id)
        log.info("sandbox killed", extra={"sandbox_id": sandbox_id})

    async def _destroy(self, sandbox: Sandbox) -> None:
        sandbox_id = sandbox.record.sandbox_id
        self._leaving.add(sandbox_id)
        await self.cut_traffic(sandbox_id)
        # QEMU first: the netns lives on while a process holds it.
        await sandbox.vm.shutdown()
        await self._network.destroy_slot(sandbox.slot)
        _rmtree(sandbox.directory)
        self._forget(sandbox_id)
        await self._records.delete_sandbox(sandbox.record.sandbox_id)
        await self._allocation_changed()

    async def _allocation_changed(self) -> None:
        if self.on_allocation_change is not None:
            try:
                await self.on_allocation_change()
            except Exception:
                # The periodic heartbeat publishes it again shortly.
                log.warning("publishing the node record failed", exc_info=True)

    def _forget(self, sandbox_id: str) -> None:
        self._sandboxes.pop(sandbox_id, None)
        self._leaving.discard(sandbox_id)
        self.metrics_history.drop(sandbox_id)

    async def kill_expired(self, now: float | None = None) -> list[str]:
        now = time.time() if now is None else now
        expired = [
            sid
            for sid, sbx in self._sandboxes.items()
            if sbx.record.end_at.ToNanoseconds() / 1e9 <= now and sid not in self._busy
        ]
        for sid in expired:
            with contextlib.suppress(NotFound):
                await (self.on_expired or self.kill)(sid)
        return expired

    async def run_expiry(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.kill_expired()
            except Exception:
                log.exception("expiry pass failed")

    async def kill_all(self) -> None:
        results = await asyncio.gather(
            *(self.kill(sid) for sid in list(self._sandboxes)), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException) and not isinstance(result, NotFound):
                log.error("kill on shutdown failed", extra={"error": repr(result)})


async def launch_restore_target(
    inputs: TemplateInputs, directory: Path, memory: Path, slot: NetSlot, disk: str = "disk.qcow2",
    *, mem_shared: bool = False, disk_by_fd: bool = False,
) -> QemuVm:
    """A QEMU waiting for an incoming state in the sandbox's netns, its RAM mapped copy-on-write
    from `memory` (or written through to it with `mem_shared`), its root disk `directory/disk`
    (handed over open with `disk_by_fd`, so the directory may be renamed before the restore)."""
    spec = vm_spec(inputs, directory / disk, memory, mem_shared=mem_shared,
                   root_by_fd=disk_by_fd)
    return await QemuVm.launch(
        spec,
        directory / "vm",
        incoming=True,
        argv_prefix=netns_exec_prefix(slot),
        console_log=directory / "console.log",
    )


async def boot_from_disk(
    inputs: TemplateInputs, directory: Path, slot: NetSlot, disk: str = "disk.qcow2"
) -> QemuVm:
    """A fresh boot of the template's kernel on the sandbox's own disk (filesystem-only pauses
    and snapshots). Its RAM is a private mapping of a sparse file: it starts zeroed and nothing
    the guest writes reaches the host's disk."""
    ram = directory / "boot.ram"
    with ram.open("wb") as fh:
        fh.truncate(inputs.memory_mib << 20)
    return await QemuVm.launch(
        vm_spec(inputs, directory / disk, ram, mem_shared=False),
        directory / "vm",
        incoming=False,
        argv_prefix=netns_exec_prefix(slot),
        console_log=directory / "console.log",
    )


class Undo:
    """Undo steps of a multi-step operation, run newest first when it fails."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], Awaitable[object] | object]] = []

    def push(self, step: Callable[[], Awaitable[object] | object]) -> None:
        self._steps.append(step)

    async def run(self) -> None:
        for step in reversed(self._steps):
            try:
                result = step()
                if asyncio.iscoroutine(result):
                    await asyncio.shield(result)
            except Exception:
                log.exception("cleanup step failed")


async def timed(timings: dict[str, float], phase: str, awaitable: Awaitable[T]) -> T:
    started = time.perf_counter()
    with tracer.start_as_current_span(f"sandbox.{phase}"):
        result = await awaitable
    timings[phase] = (time.perf_counter() - started) * 1000
    return result


def ms_fields(timings: dict[str, float]) -> dict[str, float]:
    return {f"{phase}_ms": round(ms, 2) for phase, ms in timings.items()}


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def validate_spec(spec: cluster_pb2.SandboxSpec) -> None:
    if not is_valid_sandbox_id(spec.sandbox_id):
        raise InvalidArgument(f"invalid sandbox id {spec.sandbox_id!r}")
    if not spec.template_id:
        raise InvalidArgument("templateID is required")
    if spec.timeout_seconds > MAX_TIMEOUT_S:
        raise InvalidArgument(f"timeout must be at most {MAX_TIMEOUT_S} seconds")


def _check_resources(spec: cluster_pb2.SandboxSpec, template: TemplateSnapshot) -> None:
    """A restore maps the template's RAM as it is: a sandbox has exactly the template's size."""
    asked = spec.resources
    if asked.vcpus and asked.vcpus != template.vcpus:
        raise InvalidArgument(f"template '{template.template_id}' has {template.vcpus} vCPUs")
    if asked.memory_mib and asked.memory_mib != template.memory_mib:
        raise InvalidArgument(
            f"template '{template.template_id}' has {template.memory_mib} MiB of memory"
        )
