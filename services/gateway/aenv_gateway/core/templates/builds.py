"""Running E2B template builds: a requested build (catalog.py) starts when the SDK sends its
steps; the scheduler picks a node, whose `BuildTemplate` stream the build's record follows —
status, log lines with their step, and the reason and step of a failure — so any gateway can
answer the SDK's status polls from etcd.

A build's node-side template is named by its image id. Equal inputs make an equal template, so a
build whose inputs match a ready build reuses that one's image (unless `force`), and one whose
inputs match a build in flight follows it instead of building the same thing twice. Which build
makes the template of some inputs is the inputs' claim in etcd (records.py), so this holds
across gateway replicas: of builds asked for at once through any gateways, one builds and the
others follow its record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2
from aenv.scheduler.v1.scheduler_pb2 import Placement
from aenv_common.errors import AenvError, Conflict, NotFound
from aenv_common.ids import new_sandbox_id
from aenv_gateway.cluster.clients import NodeAgentClients, SchedulerClient
from aenv_gateway.core.templates.build_spec import BuildStart
from aenv_gateway.core.templates.catalog import TemplateCatalog, now_timestamp
from aenv_gateway.core.templates.records import INPUTS, BuildRecord, Claim

log = logging.getLogger(__name__)

WAITING = cluster_pb2.BUILD_STATUS_WAITING
BUILDING = cluster_pb2.BUILD_STATUS_BUILDING
READY = cluster_pb2.BUILD_STATUS_READY
ERROR = cluster_pb2.BUILD_STATUS_ERROR
# etcd takes values up to 1.5 MiB: a build keeps this many lines of at most this many characters
# (then only error lines), and is written at most this often while it runs.
MAX_LOG_ENTRIES = 1500
MAX_LINE_CHARS = 500
FLUSH_INTERVAL_S = 0.5
# A running build's record is written at least this often; one not written for STALE_S while
# it says "building" was left by a gateway that stopped (or lost etcd) mid-build.
HEARTBEAT_S = 30.0
STALE_S = 120.0
# A follower reads the record of the build it follows this often.
FOLLOW_POLL_S = 0.5
CLAIM_ATTEMPTS = 16
BASE_STEP = "base"
# Every node has the built-in template: a build from an image is placed as a sandbox of it.
PLACE_IMAGE_BUILDS_AS = "base"


@dataclass(frozen=True)
class BuildStatusPage:
    record: BuildRecord
    entries: list[cluster_pb2.BuildLogEntry]


class TemplateBuilds:
    def __init__(
        self,
        catalog: TemplateCatalog,
        scheduler: SchedulerClient,
        nodeagents: NodeAgentClients,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._catalog = catalog
        self._records = catalog.records
        self._scheduler = scheduler
        self._nodeagents = nodeagents
        self._clock = clock
        self._running: dict[str, asyncio.Task[None]] = {}

    def building(self, build: BuildRecord) -> bool:
        """Running here, or on another gateway that still writes its record."""
        return build.build_id in self._running or (
            build.status == BUILDING and not self._stale(build))

    async def start(self, template_id: str, build_id: str, start: BuildStart) -> None:
        """Starts a requested build in the background (the SDK then polls its status).

        :raise NotFound: no such build of this template, or `fromTemplate` names a template
            of the catalog with no ready build (another name fails the build on its node).
        :raise Conflict: it was started already.
        """
        build = await self._build_of(template_id, build_id)
        if build.status != WAITING or build_id in self._running:
            raise Conflict(f"build '{build_id}' was already started")
        parent = None
        if start.from_template:
            parent = await self._catalog.resolve(start.from_template) or start.from_template
        build.status = BUILDING
        build.updated_at.CopyFrom(now_timestamp(self._clock))
        await self._records.put_build(build)
        task = asyncio.ensure_future(self._run(build, start, parent))
        self._running[build_id] = task
        task.add_done_callback(lambda _: self._running.pop(build_id, None))

    async def status(
        self, template_id: str, build_id: str, offset: int, limit: int
    ) -> BuildStatusPage:
        """:raise NotFound: no such build of this template."""
        build = await self._build_of(template_id, build_id)
        if self._abandoned(build):
            journal = BuildJournal(build, self._records.put_build, self._clock)
            journal.fail("the build was interrupted: the gateway running it stopped")
            await journal.finish()
        return BuildStatusPage(build, list(build.logs[offset:offset + limit]))

    def _abandoned(self, build: BuildRecord) -> bool:
        return build.status == BUILDING and build.build_id not in self._running and self._stale(
            build)

    def _stale(self, build: BuildRecord) -> bool:
        written = build.updated_at.ToNanoseconds() / 1e9 if build.HasField("updated_at") else 0
        return self._clock() - written > STALE_S

    async def _build_of(self, template_id: str, build_id: str) -> BuildRecord:
        template = await self._catalog.find(template_id)
        build = await self._records.get_build(build_id)
        if template is None or build is None or build.template_id != template.template_id:
            raise NotFound(f"build '{build_id}' of template '{template_id}' not found")
        return build

    async def stop(self) -> None:
        """Ends the builds this gateway runs (their nodes undo what they made)."""
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, build: BuildRecord, start: BuildStart, parent: str | None) -> None:
        journal = BuildJournal(build, self._records.put_build, self._clock)
        heartbeat = asyncio.ensure_future(journal.keep_alive())
        try:
            placement = await self._resolve_inputs(journal, start, parent)
            await self._make(journal, start, parent, placement)
            # Tags first: an SDK seeing "ready" creates from the tag at once.
            await self._catalog.publish(journal.record)
            journal.record.status = READY
            await journal.finish()
            log.info("template build ready", extra={"template_id": build.template_id,
                                                    "build_id": build.build_id})
        except AenvError as err:
            journal.fail(err.message, err.step if isinstance(err, _Failed) else None)
            await journal.finish()
            log.info("template build failed", extra={"template_id": build.template_id,
                                                     "build_id": build.build_id,
                                                     "reason": err.message[:200]})
        except asyncio.CancelledError:
            journal.fail("the build was interrupted: its gateway stopped")
            await asyncio.shield(journal.finish())
            raise
        finally:
            heartbeat.cancel()

    async def _resolve_inputs(
        self, journal: BuildJournal, start: BuildStart, parent: str | None
    ) -> Placement | None:
        """The build's inputs digest. An image's reference is resolved to its digest by the
        node that would build it (the registries are the nodes' to reach): a tag pushed again
        is then other inputs. Returns that node's placement (None: nothing placed yet)."""
        build, placement, image_digest = journal.record, None, None
        if start.from_image and "@" in start.from_image:
            image_digest = start.from_image.rsplit("@", 1)[1]  # pinned: nothing to resolve
        elif start.from_image:
            placement = await self._place(journal, parent)
            image_digest = await self._nodeagents.resolve_image(
                placement.nodeagent_address, start.resolve_request())
            journal.add(f"{start.from_image} is {image_digest}", BASE_STEP)
        build.inputs_digest = start.digest(build, parent, image_digest)
        return placement

    async def _place(self, journal: BuildJournal, parent: str | None) -> Placement:
        build = journal.record
        journal.add("waiting for a node", BASE_STEP)
        placement = await self._scheduler.schedule(cluster_pb2.SandboxSpec(
            sandbox_id=new_sandbox_id(), template_id=parent or PLACE_IMAGE_BUILDS_AS,
            resources=build.resources))
        build.node_id = placement.node_id
        return placement

    async def _make(
        self, journal: BuildJournal, start: BuildStart, parent: str | None,
        placement: Placement | None,
    ) -> None:
        """Reuses or follows the build that holds the inputs' claim, else claims it and builds."""
        own = journal.record
        for _ in range(CLAIM_ATTEMPTS):
            held = await self._records.get_claim(INPUTS, own.inputs_digest)
            other = await self._records.get_build(held.holder_id) if held else None
            if other is not None and other.status == READY and not start.force:
                journal.add(f"reusing the template of build {other.build_id} (same inputs)",
                            BASE_STEP)
                journal.adopt(other)
                return
            if other is not None and other.status == BUILDING and not self._stale(other):
                await self._follow(journal, other.build_id)
                return
            if other is not None and other.status == READY:
                break  # forced: built again, while the ready build keeps the claim
            if await self._claim(own, held):
                break
        else:
            raise Conflict("builds of the same inputs kept starting; try again")
        await self._on_a_node(journal, start, parent, placement)

    async def _claim(self, own: BuildRecord, held: Claim | None) -> bool:
        """Takes the inputs' claim over from nobody, a failed, interrupted or deleted build."""
        return await self._records.claim(INPUTS, own.inputs_digest, own.build_id,
                                         held.revision if held else 0)

    async def _follow(self, journal: BuildJournal, leader_id: str) -> None:
        """Waits for the build in flight (on any gateway) and ends as it does."""
        journal.add("following a build of the same inputs in flight", BASE_STEP)
        while True:
            leader = await self._records.get_build(leader_id)
            if leader is None:
                raise _Failed("the build it followed was deleted", BASE_STEP)
            if leader.status in (READY, ERROR):
                journal.adopt(leader)
                return
            if self._stale(leader):
                raise _Failed("the build it followed was interrupted: the gateway running it "
                              "stopped", BASE_STEP)
            await asyncio.sleep(FOLLOW_POLL_S)

    async def _on_a_node(
        self, journal: BuildJournal, start: BuildStart, parent: str | None,
        placement: Placement | None,
    ) -> None:
        build = journal.record
        if placement is None:
            placement = await self._place(journal, parent)
        journal.add(f"building on node {placement.node_id}", BASE_STEP)
        request = start.node_request(build.build_id, build.build_id, parent, build)
        async for event in self._nodeagents.build_template(placement.nodeagent_address, request):
            if event.HasField("log"):
                journal.add(event.log.message, event.log.step, event.log.level or "info")
            else:
                built = event.result.template
                build.image_id = built.template_id
                build.envd_version = built.envd_version
                build.resources.CopyFrom(built.default_resources)
                phases = ", ".join(f"{k} {v / 1000:.1f}s" for k, v in
                                   sorted(event.result.phases_ms.items()))
                journal.add(f"template ready ({phases})", "finalize")


class BuildJournal:
    """A running build's record: lines are added as they come and written out in batches."""

    def __init__(
        self,
        record: BuildRecord,
        write: Callable[[BuildRecord], Awaitable[None]],
        clock: Callable[[], float],
    ) -> None:
        self.record = record
        self._write = write
        self._clock = clock
        self._last_write = 0.0
        self._pending: asyncio.Task[None] | None = None
        self._dropped = 0

    def add(self, message: str, step: str = "", level: str = "info") -> None:
        logs = self.record.logs
        if len(logs) >= MAX_LOG_ENTRIES and level != "error":
            self._dropped += 1
            return
        logs.append(cluster_pb2.BuildLogEntry(
            time=now_timestamp(self._clock), level=level, message=message[:MAX_LINE_CHARS],
            step=step))
        self._schedule_write()

    def fail(self, reason: str, step: str | None = None) -> None:
        """Ends it failed; the step is the one under way unless given."""
        steps = [entry.step for entry in self.record.logs if entry.step]
        self.record.status = ERROR
        self.record.reason = reason
        self.record.reason_step = step or (steps[-1] if steps else BASE_STEP)
        self.add(reason, self.record.reason_step, "error")

    def adopt(self, other: BuildRecord) -> None:
        """This build made no template itself: it is `other`'s (ready, or failed as it did)."""
        self.record.image_id = other.image_id or other.build_id
        self.record.envd_version = other.envd_version
        self.record.node_id = other.node_id
        if other.status == ERROR:
            raise _Failed(other.reason, other.reason_step)

    async def keep_alive(self) -> None:
        """Writes the record now and then while nothing else does (a long quiet step)."""
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            self._schedule_write()

    async def finish(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
        if self._dropped:
            self.record.logs.append(cluster_pb2.BuildLogEntry(
                time=now_timestamp(self._clock), level="warn",
                message=f"{self._dropped} log lines were not kept"))
        self.record.finished_at.CopyFrom(now_timestamp(self._clock))
        await self._flush()

    def _schedule_write(self) -> None:
        if self._pending is None or self._pending.done():
            self._pending = asyncio.ensure_future(self._write_soon())

    async def _write_soon(self) -> None:
        wait = self._last_write + FLUSH_INTERVAL_S - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await self._flush()

    async def _flush(self) -> None:
        self._last_write = time.monotonic()
        self.record.updated_at.CopyFrom(now_timestamp(self._clock))
        try:
            await self._write(self.record)
        except AenvError as err:
            log.warning("could not write a build's record",
                        extra={"build_id": self.record.build_id, "error": err.message})


class _Failed(AenvError):
    """The build it followed failed: so does this one, for the same reason."""

    def __init__(self, message: str, step: str) -> None:
        super().__init__(message)
        self.step = step
