"""Creating a sandbox: a restore of its template's snapshot, or of a snapshot when the template
id names one (pulled from snapstore when this node lacks it). A create never cold-boots a
template's guest."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import AenvError
from aenv_nodeagent.phases import PhaseTimer
from aenv_nodeagent.sandbox.context import WingContext
from aenv_nodeagent.sandbox.model import Sandbox
from aenv_nodeagent.sandbox.plans import FromSnapshot, FromTemplate
from aenv_nodeagent.sandbox.records import check_resources, lease_on_expiry, validate_spec
from aenv_nodeagent.sandbox.restore import Restorer
from aenv_nodeagent.snapshots.store import SnapshotMeta

log = logging.getLogger(__name__)

Plan = TypeVar("Plan", FromTemplate, FromSnapshot)
CREATED = cluster_pb2.SANDBOX_EVENT_TYPE_CREATED
KILLED = cluster_pb2.SANDBOX_EVENT_TYPE_KILLED


class Creates:
    """New sandboxes from templates and snapshots."""

    def __init__(self, wing: WingContext, restorer: Restorer) -> None:
        self._events = wing.events
        self._registry = wing.registry
        self._templates = wing.templates
        self._snapshots = wing.snapshot_store
        self._layers = wing.disk.store
        self._restorer = restorer
        self._sources = wing.sources
        self._persistence = wing.persistence
        self._records = wing.records

    async def create(self, spec: cluster_pb2.SandboxSpec) -> Sandbox:
        """From a template, or from a snapshot when `template_id` names one.

        :raise InvalidArgument: a bad spec, or a size the template does not have.
        :raise NotFound: no such template or snapshot.
        :raise Conflict: the id is taken, or the snapshot cannot be restored here.
        :raise AenvError: the restore failed; nothing of it is left.
        """
        validate_spec(spec)
        if (made := self._made_before(spec)) is not None:
            return made
        snapshot = self._snapshots.find(spec.template_id) or await self._pull(spec.template_id)
        if snapshot is not None:
            return await self.from_snapshot(self._snapshots.get(spec.template_id), spec)
        with self._registry.creating(spec.sandbox_id), PhaseTimer.operation(
                "sandbox.create", spec,
                template_id=spec.template_id) as timer:
            with self._announced(spec):
                template = await timer.timed("template", self._templates.get(spec.template_id))
                check_resources(spec, template)
                sandbox = await self._restorer.restore(
                    await self._leased(self._sources.from_template(spec, template)), timer)
        log.info("sandbox created", extra={
            "sandbox_id": spec.sandbox_id, "template": spec.template_id, **timer.fields()})
        return sandbox

    async def from_snapshot(
        self, snapshot: SnapshotMeta, spec: cluster_pb2.SandboxSpec, *,
        parent: Sequence[str] = (),
    ) -> Sandbox:
        """A new sandbox restored from one of this node's snapshots (a create, a fork child:
        `parent` names its parent in the child's CREATED and READY events).

        :raise InvalidArgument, Conflict, AenvError: as `create`.
        """
        validate_spec(spec)
        with self._registry.creating(spec.sandbox_id), PhaseTimer.operation(
                "sandbox.create", spec,
                template_id=snapshot.snapshot_id) as timer:
            with self._announced(spec, parent):
                template = await self._templates.get(snapshot.template_id)
                sandbox = await self._restorer.restore(
                    await self._leased(self._sources.from_snapshot(spec, snapshot, template)),
                    timer, related=parent)
        log.info("sandbox restored from snapshot", extra={
            "sandbox_id": spec.sandbox_id, "snapshot_id": snapshot.snapshot_id,
            **timer.fields()})
        return sandbox

    async def _leased(self, plan: Plan) -> Plan:
        """The plan, its record saying what its lease's lapse will do to it."""
        plan.record.lease_on_expiry = await lease_on_expiry(self._records, plan.record.lease_id)
        return plan

    @contextlib.contextmanager
    def _announced(
        self, spec: cluster_pb2.SandboxSpec, parent: Sequence[str] = ()
    ) -> Iterator[None]:
        """CREATED as the create is accepted (in the background: not on its critical path);
        READY comes with its record. A create that fails after CREATED ends its story with
        KILLED, saying why, so a follower of the sandbox is not left waiting."""
        self._events.announce_soon(spec, CREATED, related=parent)
        try:
            yield
        except AenvError as err:
            self._events.announce_soon(spec, KILLED, detail=f"its create failed: {err.message}",
                                       related=parent)
            raise

    def _made_before(self, spec: cluster_pb2.SandboxSpec) -> Sandbox | None:
        """The sandbox an earlier attempt of this very create made: the caller sends a create
        again, same id and token, when the answer was lost (this agent crashed after publishing
        it and adopted it since), and gets that sandbox instead of a Conflict."""
        sandbox = self._registry.serving(spec.sandbox_id)
        if sandbox is None or not spec.envd_access_token or self._registry.is_busy(
                spec.sandbox_id):
            return None  # (busy: being paused, snapshotted, …; the create is refused)
        record = sandbox.record
        if (record.envd_access_token, record.template_id) != (spec.envd_access_token,
                                                              spec.template_id):
            return None
        log.info("create repeated: the sandbox it made", extra={"sandbox_id": spec.sandbox_id})
        return sandbox

    async def _pull(self, snapshot_id: str) -> SnapshotMeta | None:
        """A snapshot this node lacks, from snapstore (never asked for a known template)."""
        if self._persistence is None or self._templates.has(snapshot_id):
            return None
        return await self._persistence.fetch(
            snapshot_id, self._snapshots, self._layers, self._template_disk)

    async def _template_disk(self, template_id: str) -> Path:
        return (await self._templates.get(template_id)).disk
