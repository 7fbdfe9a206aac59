"""Sandbox operations, shared by the REST and gRPC edges (which only translate formats).

Create: scheduler places -> the chosen node agent restores -> the record it returns is the answer.
Everything else goes to the node agent that owns the sandbox, found through the directory. A paused
sandbox whose node is gone is first moved to a live node (handover.py) when it is used.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from opentelemetry import trace

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv.scheduler.v1 import scheduler_pb2
from aenv_common.errors import (
    Conflict,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    at_capacity,
)
from aenv_common.ids import new_sandbox_id, new_secret
from aenv_common.limits import MAX_FORK_CHILDREN
from aenv_common.rollout import create_span
from aenv_gateway.cluster.clients import ForkOutcome, NodeAgentClients, SchedulerClient
from aenv_gateway.cluster.directory import Located, Owner, SandboxDirectory
from aenv_gateway.core.creates import NodeCreates
from aenv_gateway.core.egress_checks import EgressChecks
from aenv_gateway.core.idempotency import IdempotentCreates
from aenv_gateway.core.leases import Leases
from aenv_gateway.core.listing import (
    PAUSED,
    RUNNING,
    VISIBLE_STATES,
    ListQuery,
    Page,
    matches,
    order_key,
)
from aenv_gateway.core.paging import paginate
from aenv_gateway.core.policy import default_network
from aenv_gateway.core.resumes import Connected, Resumes
from aenv_gateway.core.takeovers import Handover
from aenv_gateway.core.templates.catalog import Source
from aenv_gateway.core.volumes.mounts import MountRequest, VolumeMounts
from aenv_gateway.keys.auth import ADMIN_KEY_ID, current_caller

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)

# A node refuses a create as full when it filled up since the scheduler last saw it (creates that
# raced): the create goes back to the scheduler, whose admission then answers for capacity.
NODE_REFUSALS = 3
REPLACE_AFTER_S = 0.5

# E2B's refresh keeps a sandbox alive at least this long (its SandboxTimeoutDefault), and takes
# a duration of at most this (its OpenAPI's maximum).
REFRESH_MIN_S = 15
REFRESH_MAX_S = 3600

# A template name -> the node-side template it creates and its catalog template (None: the name
# is taken as it is).
TemplateResolver = Callable[[str], Awaitable[Source | None]]


@dataclass(frozen=True)
class CreateRequest:
    template_id: str
    timeout_s: int
    env_vars: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    network: cluster_pb2.NetworkPolicy = field(default_factory=default_network)
    lifecycle: cluster_pb2.Lifecycle = field(default_factory=cluster_pb2.Lifecycle)
    idempotency_key: str | None = None
    volume_mounts: tuple[MountRequest, ...] = ()
    # The experiment lease to live under (else the metadata's `aenv.lease`; docs/leases.md).
    lease_id: str = ""


class SandboxService:
    def __init__(
        self,
        directory: SandboxDirectory,
        scheduler: SchedulerClient,
        nodeagents: NodeAgentClients,
        max_timeout_s: int,
        idempotent: IdempotentCreates,
        templates: TemplateResolver,
        creates: NodeCreates,
        egress: EgressChecks,
        mounts: VolumeMounts,
        leases: Leases,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._directory = directory
        self.leases = leases
        self.mounts = mounts
        self._creates = creates
        self.egress = egress
        self._templates = templates
        self._scheduler = scheduler
        self._nodeagents = nodeagents
        self._max_timeout = max_timeout_s
        self._clock = clock
        self._idempotent = idempotent
        self._waking: dict[str, asyncio.Future[Located]] = {}
        self._resumes = Resumes(directory, nodeagents, self.set_timeout, clock)
        self._handover = Handover(directory, scheduler, nodeagents)

    async def create(self, request: CreateRequest) -> cluster_pb2.SandboxRecord:
        self.check_create(request)
        await self.egress.admit(current_caller(), request.network)
        lease_id, metadata = await self.leases.admit(
            current_caller(), request.lease_id, request.metadata)
        request = replace(request, lease_id=lease_id, metadata=metadata)
        if request.idempotency_key is None:
            return await self._create(request)
        # Scoped by the API key the edge checked: one caller's key never answers another's.
        return await self._idempotent.run(
            current_caller(), request.idempotency_key, lambda: self._create(request))

    def check_create(self, request: CreateRequest) -> None:
        """:raise InvalidArgument: the request itself is malformed (no create is tried)."""
        self.check_timeout(request.timeout_s)
        if not request.template_id:
            raise InvalidArgument("templateID is required")
        self.mounts.check_paths(request.volume_mounts)

    async def _create(self, request: CreateRequest) -> cluster_pb2.SandboxRecord:
        # A template built through the template API: its tag's build.
        built = await self._templates(request.template_id)
        spec = cluster_pb2.SandboxSpec(
            sandbox_id=new_sandbox_id(),
            template_id=built.image if built else request.template_id,
            alias=request.template_id if built else "",
            catalog_template_id=built.template_id if built else "",
            env_vars=request.env_vars,
            metadata=request.metadata,
            envd_access_token=new_secret(),
            timeout_seconds=request.timeout_s,
            network=request.network,
            lifecycle=request.lifecycle,
            traffic_access_token=new_secret() if request.network.private_traffic else "",
            # Whose secrets fill its network rules' placeholders (docs/egress.md, "Secrets").
            owner_key_id=current_caller(),
            lease_id=request.lease_id,
        )
        # A span of the caller's trace: its header's, else its metadata's `traceparent`, which
        # the sandbox keeps for its later operations (aenv_common/rollout.py).
        with create_span(tracer, "sandbox.create", spec):
            # Mounts with tickets for this id (volumes/mounts.py); a grant leaves nothing to undo.
            await self.mounts.for_spec(spec, request.volume_mounts)
            with self.mounts.volumes.mounting([m.volume_id for m in spec.volume_mounts]):
                placement, record = await self._place_and_create(spec)
        owner = Owner(placement.node_id, placement.nodeagent_address, placement.proxy_address)
        self._directory.remember(record, owner)
        log.info(
            "sandbox created",
            extra={
                "sandbox_id": record.sandbox_id,
                "node_id": owner.node_id,
                "template_id": record.template_id,
            },
        )
        return record

    async def _place_and_create(
        self, spec: cluster_pb2.SandboxSpec
    ) -> tuple[scheduler_pb2.Placement, cluster_pb2.SandboxRecord]:
        """:raise ResourceExhausted: the scheduler refused (with its retry hint), or nodes
        refused NODE_REFUSALS + 1 placements as full (retry hint: REPLACE_AFTER_S)."""
        refusals = 0
        while True:
            placement = await self._scheduler.schedule(spec)
            try:
                # Sent again with the same id if unanswered (creates.py): the id is its key.
                return placement, await self._creates.create(placement.nodeagent_address, spec)
            except ResourceExhausted as refused:
                if refused.retry_after_s is not None:
                    raise  # the scheduler's own answer
                if refusals == NODE_REFUSALS:
                    raise at_capacity(refused.message, REPLACE_AFTER_S) from refused
                refusals += 1
                log.info("node full; placing the create again", extra={
                    "sandbox_id": spec.sandbox_id, "node_id": placement.node_id})
            await asyncio.sleep(REPLACE_AFTER_S)

    async def close(self) -> None:
        """Stops killing the sandboxes of abandoned creates (creates.py)."""
        await self._creates.close()

    async def get(self, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        located = self._directory.find(sandbox_id)
        if located is None:
            # Its node is gone: the last record tells paused (stored) from lost.
            if (orphan := self._directory.orphan(sandbox_id)) is not None:
                return _visible(orphan)
            raise NotFound(f'sandbox "{sandbox_id}" not found')
        record = await self._nodeagents.get(located.owner.nodeagent_address, sandbox_id)
        return _visible(record)

    def list(self, query: ListQuery) -> Page:
        matching = [r for r in self._directory.records() if matches(r, query)]
        items, next_cursor = paginate(
            matching, order_key, newest_first=query.newest_first, limit=query.limit,
            cursor=query.cursor,
        )
        return Page(items, next_cursor)

    async def kill(self, sandbox_id: str) -> None:
        if (orphan := self._handover.stored_orphan(sandbox_id)) is not None:
            await self._handover.discard(orphan)
            self._directory.forget(sandbox_id)
            log.info("sandbox killed", extra={"sandbox_id": sandbox_id})
            return
        located = self._directory.locate(sandbox_id)
        try:
            await self._nodeagents.kill(located.owner.nodeagent_address, sandbox_id,
                                        *_kill_cause(located.record))
        finally:
            # Also on NotFound: the owner no longer has it, whatever the mirror still says.
            self._directory.forget(sandbox_id)
        log.info("sandbox killed", extra={"sandbox_id": sandbox_id})

    async def set_timeout(self, sandbox_id: str, timeout_s: int) -> cluster_pb2.SandboxRecord:
        """Sets the time to live to `timeout_s` from now (may shorten it). As on E2B, 0 (or
        less) is "now": the timeout's action (kill, or pause as the lifecycle asks) runs before
        the answer; and the sandbox lives at most the longest timeout since it started, so a
        longer one is cut to that, not refused."""
        located = await self._locate(sandbox_id)
        ttl = self._within_lifetime(max(timeout_s, 0), located.record)
        record = await self._nodeagents.set_timeout(
            located.owner.nodeagent_address, sandbox_id, ttl
        )
        if record.state == cluster_pb2.SANDBOX_STATE_KILLING:
            self._directory.forget(sandbox_id)
            log.info("sandbox killed", extra={"sandbox_id": sandbox_id, "reason": "timeout 0"})
        elif ttl == 0:
            self._directory.remember(record, located.owner)
        return record

    def _within_lifetime(self, ttl_s: int, record: cluster_pb2.SandboxRecord) -> int:
        if not record.HasField("started_at"):
            return min(ttl_s, self._max_timeout)
        lived_s = time.time() - record.started_at.ToNanoseconds() / 1e9
        return max(0, min(ttl_s, int(self._max_timeout - lived_s)))

    async def refresh(self, sandbox_id: str, duration_s: int | None) -> None:
        """E2B's keep-alive: the sandbox lives `duration_s` (default and at least 15 s, at most
        the longest timeout) from now, unless it lives longer already: never shortened."""
        located = self._directory.locate(sandbox_id)
        if located.record.state != RUNNING:
            raise NotFound(f'sandbox "{sandbox_id}" not found')
        ttl = min(max(duration_s or REFRESH_MIN_S, REFRESH_MIN_S), self._max_timeout)
        await self._nodeagents.set_timeout(
            located.owner.nodeagent_address, sandbox_id, ttl, extend_only=True)

    def observed(self, sandbox_id: str) -> Located | None:
        """Where a sandbox's metrics and logs are read: its node; None for a paused sandbox
        whose node is gone (what the node kept is gone with it).

        :raise NotFound: no such sandbox visible to clients.
        """
        if self._handover.stored_orphan(sandbox_id) is not None:
            return None
        located = self._directory.locate(sandbox_id)
        if located.record.state not in VISIBLE_STATES:
            raise NotFound(f'sandbox "{sandbox_id}" not found')
        return located

    async def update_network(
        self, sandbox_id: str, network: cluster_pb2.NetworkPolicy
    ) -> cluster_pb2.SandboxRecord:
        """Replaces the sandbox's egress policy as a whole (checked first against the secrets of
        the key that created it)."""
        located = self.running(sandbox_id)
        await self.egress.admit(located.record.owner_key_id, network)
        return await self._nodeagents.update_network(
            located.owner.nodeagent_address, sandbox_id, network
        )

    async def _locate(self, sandbox_id: str) -> Located:
        """The sandbox and its node; a paused sandbox whose node is gone is moved first."""
        located = self._directory.find(sandbox_id)
        if located is not None:
            return located
        if (orphan := self._handover.stored_orphan(sandbox_id)) is not None:
            return await self._handover.take_over(orphan)
        if (orphan := self._directory.orphan(sandbox_id)) is not None:
            _visible(orphan)  # NotFound, saying it was lost with its node
        raise NotFound(f'sandbox "{sandbox_id}" not found')

    def running(self, sandbox_id: str) -> Located:
        located = self._directory.locate(sandbox_id)
        if located.record.state != RUNNING:
            raise Conflict(f'sandbox "{sandbox_id}" is not running')
        return located

    async def connect(
        self, sandbox_id: str, timeout_s: int | None, *, reboot: bool = False
    ) -> Connected:
        """Makes the sandbox usable: a running one lives at least `timeout_s` from now (E2B's
        keep-alive: never shortened; None: untouched), a paused one is resumed (`reboot`:
        cold-booted from its disk, memory dropped)."""
        if timeout_s is not None:
            self.check_timeout(timeout_s)
        located = await self._locate(sandbox_id)
        state = located.record.state
        if state == PAUSED:
            return await self._resumes.resume(located, timeout_s, reboot)
        if state != RUNNING:
            raise NotFound(f'sandbox "{sandbox_id}" not found')
        record = located.record
        if timeout_s is not None and self._clock() + timeout_s > record.end_at.seconds:
            record = await self.set_timeout(sandbox_id, timeout_s)
        return Connected(record, resumed=False)

    async def resume(
        self, sandbox_id: str, timeout_s: int | None, *, reboot: bool = False,
        auto_pause: bool | None = None,
    ) -> Connected:
        """Legacy `/resume`: only for paused sandboxes. Its `autoPause` may only restate the
        sandbox's lifecycle: a resume here keeps it."""
        if timeout_s is not None:
            self.check_timeout(timeout_s)
        located = await self._locate(sandbox_id)
        if located.record.state != PAUSED:
            raise Conflict(f'sandbox "{sandbox_id}" is not paused')
        if auto_pause is not None and auto_pause != located.record.lifecycle.auto_pause:
            raise InvalidArgument("autoPause: a resume keeps the sandbox's lifecycle here; "
                                  "it cannot change on_timeout")
        return await self._resumes.resume(located, timeout_s, reboot)

    async def pause(
        self, sandbox_id: str, keep_memory: bool = True, *, require_healthy_guest: bool = False
    ) -> cluster_pb2.SandboxRecord:
        """Conflict when already paused (the SDK's pause() then returns False). Without memory
        only the filesystem is kept and the resume cold-boots. A guest agent that does not
        answer is refused (Unavailable) with `require_healthy_guest` or without memory; else the
        memory pause is marked envd_unresponsive_at_pause (node agent, sandbox/pause.py)."""
        if self._handover.stored_orphan(sandbox_id) is not None:
            raise Conflict(f'sandbox "{sandbox_id}" is already paused')
        located = self._directory.locate(sandbox_id)
        if located.record.state == PAUSED:
            raise Conflict(f'sandbox "{sandbox_id}" is already paused')
        record = await self._nodeagents.pause(
            located.owner.nodeagent_address, sandbox_id, keep_memory,
            require_healthy_guest=require_healthy_guest)
        self._directory.remember(record, located.owner)
        return record

    async def wake(self, sandbox_id: str) -> Located | None:
        """Data-plane auto-resume: a paused sandbox created with lifecycle.auto_resume is resumed
        (once: concurrent requests wait for the same resume). None when there is no running
        sandbox to forward to."""
        located = self._directory.find(sandbox_id)
        if located is not None and located.record.state == RUNNING:
            return located
        record = located.record if located else self._handover.stored_orphan(sandbox_id)
        if record is None or record.state != PAUSED or not record.lifecycle.auto_resume:
            return None
        waking = self._waking.get(sandbox_id)
        if waking is None:
            waking = asyncio.ensure_future(self._resume_for_traffic(sandbox_id))
            self._waking[sandbox_id] = waking
            waking.add_done_callback(lambda _: self._waking.pop(sandbox_id, None))
        woken = await asyncio.shield(waking)
        log.info("sandbox resumed by traffic", extra={"sandbox_id": sandbox_id})
        return woken

    async def _resume_for_traffic(self, sandbox_id: str) -> Located:
        located = await self._locate(sandbox_id)
        try:
            connected = await self._resumes.resume(located, None)
        except Conflict:
            # Resumed meanwhile through another gateway: forward if it runs now.
            address = located.owner.nodeagent_address
            record = await self._nodeagents.get(address, sandbox_id)
            if record.state != RUNNING:
                raise
            return Located(record, located.owner)
        return Located(connected.record, located.owner)

    async def reset(self, sandbox_id: str, snapshot_id: str) -> cluster_pb2.SandboxRecord:
        """Rewinds a running sandbox in place to a snapshot held by its node: by its id, or as
        E2B names it (`snap-…:default`, `aenv/name:tag`)."""
        if not snapshot_id:
            raise InvalidArgument("snapshotID is required")
        named = await self._templates(snapshot_id)
        snapshot_id = named.image if named is not None else snapshot_id
        located = self.running(sandbox_id)
        record = await self._nodeagents.reset(
            located.owner.nodeagent_address, sandbox_id, snapshot_id
        )
        self._directory.remember(record, located.owner)
        log.info("sandbox reset", extra={"sandbox_id": sandbox_id, "snapshot_id": snapshot_id})
        return record

    async def fork(
        self, sandbox_id: str, count: int, timeout_s: int, *, copy_on_write: bool = False
    ) -> Sequence[ForkOutcome]:
        """`count` children on the parent's node; one outcome (sandbox or error) per child. The
        children mount the parent's volumes, or copy-on-write clones of its read-write ones
        (volumes/mounts.py)."""
        if not 1 <= count <= MAX_FORK_CHILDREN:
            raise InvalidArgument(f"count must be between 1 and {MAX_FORK_CHILDREN}")
        self.check_timeout(timeout_s)
        located = self.running(sandbox_id)
        request = nodeagent_pb2.ForkSandboxRequest(
            sandbox_id=sandbox_id, count=count, timeout_seconds=timeout_s,
            child_ids=[new_sandbox_id() for _ in range(count)],
            child_tokens=[new_secret() for _ in range(count)],
        )
        address = located.owner.nodeagent_address
        results = await self.mounts.forked(
            located.record, request, copy_on_write,
            lambda forked: self._nodeagents.fork(address, forked))
        for result in results:
            if isinstance(result, cluster_pb2.SandboxRecord):
                self._directory.remember(result, located.owner)
        return results

    def check_timeout(self, timeout_s: int) -> None:
        if not 0 < timeout_s <= self._max_timeout:
            raise InvalidArgument(f"timeout must be between 1 and {self._max_timeout} seconds")


def _kill_cause(
    record: cluster_pb2.SandboxRecord,
) -> tuple[cluster_pb2.DeathCause, str]:
    """The administrator's kill of another key's sandbox is a death its owner is told of
    (ADMIN_KILL); any other kill is its owner's (no cause)."""
    if current_caller() == ADMIN_KEY_ID and record.owner_key_id not in ("", ADMIN_KEY_ID):
        return cluster_pb2.DEATH_CAUSE_ADMIN_KILL, "killed by an administrator"
    return cluster_pb2.DEATH_CAUSE_UNSPECIFIED, ""


def _visible(record: cluster_pb2.SandboxRecord) -> cluster_pb2.SandboxRecord:
    if record.state in VISIBLE_STATES:
        return record
    if record.state == cluster_pb2.SANDBOX_STATE_LOST:
        raise NotFound(f'sandbox "{record.sandbox_id}" was lost with its node')
    raise NotFound(f'sandbox "{record.sandbox_id}" not found')
