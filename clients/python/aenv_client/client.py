"""Async client of the gateway's native gRPC API (`aenv.gateway.v1.GatewayService`).

    async with GatewayClient("127.0.0.1:50051", api_key) as client:
        results = await client.create_sandboxes("base", count=16, idempotency_key="step-7")
        sandboxes = [r for r in results if not isinstance(r, AenvError)]

One channel for the client's life; every call has a deadline (the client's default or its own
`timeout_s`); reads and creates are sent again when the gateway did not answer (creates always
carry an idempotency key, made up when none is given, so a retry never makes a second sandbox).
Errors are the typed errors of `aenv_client.errors`; a sandbox this client created that is gone
without it killing it raises SandboxDied.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Literal

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2
from aenv_client.errors import AenvError, item_error
from aenv_client.events import EventCalls
from aenv_client.guest import GuestCalls
from aenv_client.leases import LeaseCalls

# One batch item or fork child: its sandbox, or the typed error it failed with.
CreateOutcome = cluster_pb2.SandboxRecord | AenvError
ForkOutcome = CreateOutcome


def new_idempotency_key() -> str:
    return str(uuid.uuid4())



class GatewayClient(EventCalls, LeaseCalls, GuestCalls):
    """Sandboxes, snapshots and forks (here), calls into a sandbox (guest.py), their
    lifecycle events (events.py), experiment leases and bulk operations (leases.py)."""

    async def create_sandbox(
        self,
        template_id: str,
        *,
        timeout_seconds: int = 0,
        env_vars: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
        network: cluster_pb2.NetworkPolicy | None = None,
        lifecycle: cluster_pb2.Lifecycle | None = None,
        idempotency_key: str | None = None,
        volume_mounts: Sequence[VolumeMountArg] = (),
        lease_id: str = "",
        timeout_s: float | None = None,
    ) -> cluster_pb2.SandboxRecord:
        """`volume_mounts`: `VolumeMountRequest`s, or `(path, volume id or name)` pairs, or
        `(path, volume, read_only)`. `lease_id`: the experiment lease it lives under."""
        request = gateway_pb2.CreateSandboxRequest(
            template_id=template_id,
            timeout_seconds=timeout_seconds,
            env_vars=dict(env_vars or {}),
            metadata=dict(metadata or {}),
            network=network,
            lifecycle=lifecycle,
            idempotency_key=idempotency_key or new_idempotency_key(),
            volume_mounts=[volume_mount(m) for m in volume_mounts],
            lease_id=lease_id,
        )
        reply: gateway_pb2.CreateSandboxResponse = await self._call(
            self._stub.CreateSandbox, request, timeout_s, retry=True
        )
        self._alive.add(reply.sandbox.sandbox_id)
        return reply.sandbox

    async def create_sandboxes(
        self,
        template_id: str = "",
        *,
        count: int = 0,
        items: list[gateway_pb2.CreateSandboxRequest] | None = None,
        timeout_seconds: int = 0,
        env_vars: Mapping[str, str] | None = None,
        metadata: Mapping[str, str] | None = None,
        network: cluster_pb2.NetworkPolicy | None = None,
        lifecycle: cluster_pb2.Lifecycle | None = None,
        idempotency_key: str | None = None,
        lease_id: str = "",
        timeout_s: float | None = None,
    ) -> list[CreateOutcome]:
        """`count` sandboxes of one spec, or one per item (its fields over the shared ones);
        one outcome per sandbox, in order. Sent again with the same idempotency key, the batch
        answers the sandboxes already made and creates only the items that failed."""
        request = gateway_pb2.CreateSandboxesRequest(
            template_id=template_id,
            count=count,
            items=items or [],
            timeout_seconds=timeout_seconds,
            env_vars=dict(env_vars or {}),
            metadata=dict(metadata or {}),
            network=network,
            lifecycle=lifecycle,
            idempotency_key=idempotency_key or new_idempotency_key(),
            lease_id=lease_id,
        )
        reply: gateway_pb2.CreateSandboxesResponse = await self._call(
            self._stub.CreateSandboxes, request, timeout_s, retry=True
        )
        outcomes = [_outcome(result) for result in reply.results]
        self._alive.update(o.sandbox_id for o in outcomes if not isinstance(o, AenvError))
        return outcomes


    async def list_sandboxes(
        self,
        metadata: Mapping[str, str] | None = None,
        *,
        states: Sequence[cluster_pb2.SandboxState] = (),
        template_id: str = "",
        timeout_s: float | None = None,
    ) -> list[cluster_pb2.SandboxRecord]:
        """Every running and paused sandbox matching the filters (all of them, in one page)."""
        page = await self.list_sandboxes_page(
            metadata, states=states, template_id=template_id, timeout_s=timeout_s
        )
        return list(page.sandboxes)

    async def list_sandboxes_page(
        self,
        metadata: Mapping[str, str] | None = None,
        *,
        states: Sequence[cluster_pb2.SandboxState] = (),
        template_id: str = "",
        page_size: int = 0,
        page_token: str = "",
        timeout_s: float | None = None,
    ) -> gateway_pb2.ListSandboxesResponse:
        """One page (at most `page_size`, newest first); pass its `next_page_token` for the
        next one, until it is empty."""
        request = gateway_pb2.ListSandboxesRequest(
            metadata=dict(metadata or {}),
            states=states,
            template_id=template_id,
            page_size=page_size,
            page_token=page_token,
        )
        reply: gateway_pb2.ListSandboxesResponse = await self._call(
            self._stub.ListSandboxes, request, timeout_s, retry=True
        )
        return reply

    async def kill_sandbox(self, sandbox_id: str, *, timeout_s: float | None = None) -> None:
        request = gateway_pb2.KillSandboxRequest(sandbox_id=sandbox_id)
        try:
            await self._call(self._stub.KillSandbox, request, timeout_s, sandbox_id=sandbox_id)
        finally:
            self._alive.discard(sandbox_id)

    async def pause_sandbox(
        self, sandbox_id: str, *, filesystem_only: bool = False, timeout_s: float | None = None
    ) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.PauseSandboxRequest(
            sandbox_id=sandbox_id, filesystem_only=filesystem_only
        )
        reply: gateway_pb2.PauseSandboxResponse = await self._call(
            self._stub.PauseSandbox, request, timeout_s, sandbox_id=sandbox_id
        )
        return reply.sandbox

    async def resume_sandbox(
        self,
        sandbox_id: str,
        *,
        timeout_seconds: int = 0,
        reboot: bool = False,
        timeout_s: float | None = None,
    ) -> gateway_pb2.ResumeSandboxResponse:
        """`resumed` in the reply is False when the sandbox was already running."""
        request = gateway_pb2.ResumeSandboxRequest(
            sandbox_id=sandbox_id, timeout_seconds=timeout_seconds, reboot=reboot
        )
        reply: gateway_pb2.ResumeSandboxResponse = await self._call(
            self._stub.ResumeSandbox, request, timeout_s, sandbox_id=sandbox_id
        )
        return reply

    async def set_timeout(
        self, sandbox_id: str, timeout_seconds: int, *, timeout_s: float | None = None
    ) -> cluster_pb2.SandboxRecord:
        """Lets the sandbox live `timeout_seconds` (>= 0) from now, shorter or longer than
        before (cut to the longest lifetime since it started; `end_at` says when). 0 ends it
        now: killed (state KILLING), or paused when its lifecycle asks. Conflict while paused.
        A sandbox its timeout ends later is SandboxDied to this client's calls, as any sandbox
        gone under it."""
        request = gateway_pb2.SetSandboxTimeoutRequest(
            sandbox_id=sandbox_id, timeout_seconds=timeout_seconds
        )
        reply: gateway_pb2.SetSandboxTimeoutResponse = await self._call(
            self._stub.SetSandboxTimeout, request, timeout_s, sandbox_id=sandbox_id
        )
        if reply.sandbox.state == cluster_pb2.SANDBOX_STATE_KILLING:
            self._alive.discard(sandbox_id)  # ended by this client, as by kill_sandbox
        return reply.sandbox

    async def sandbox_metrics(
        self,
        sandbox_id: str,
        *,
        start: int | None = None,
        end: int | None = None,
        timeout_s: float | None = None,
    ) -> list[gateway_pb2.SandboxMetric]:
        """The CPU, memory and disk samples its node took while it ran, oldest first, within
        [start, end] (unix seconds; None: open on that side)."""
        request = gateway_pb2.GetSandboxMetricsRequest(sandbox_id=sandbox_id, start=start, end=end)
        reply: gateway_pb2.GetSandboxMetricsResponse = await self._call(
            self._stub.GetSandboxMetrics, request, timeout_s, retry=True, sandbox_id=sandbox_id
        )
        return list(reply.metrics)

    async def create_snapshot(
        self,
        sandbox_id: str,
        name: str = "",
        *,
        filesystem_only: bool = False,
        timeout_s: float | None = None,
    ) -> cluster_pb2.SnapshotRecord:
        request = gateway_pb2.CreateSnapshotRequest(
            sandbox_id=sandbox_id, name=name, filesystem_only=filesystem_only
        )
        reply: gateway_pb2.CreateSnapshotResponse = await self._call(
            self._stub.CreateSnapshot, request, timeout_s, sandbox_id=sandbox_id
        )
        return reply.snapshot

    async def list_snapshots(
        self,
        *,
        sandbox_id: str = "",
        name: str = "",
        limit: int = 0,
        page_token: str = "",
        timeout_s: float | None = None,
    ) -> gateway_pb2.ListSnapshotsResponse:
        request = gateway_pb2.ListSnapshotsRequest(
            sandbox_id=sandbox_id, name=name, limit=limit, page_token=page_token
        )
        reply: gateway_pb2.ListSnapshotsResponse = await self._call(
            self._stub.ListSnapshots, request, timeout_s, retry=True
        )
        return reply

    async def delete_snapshot(self, snapshot_id: str, *, timeout_s: float | None = None) -> None:
        request = gateway_pb2.DeleteSnapshotRequest(snapshot_id=snapshot_id)
        await self._call(self._stub.DeleteSnapshot, request, timeout_s)

    async def fork_sandbox(
        self,
        sandbox_id: str,
        count: int = 1,
        *,
        timeout_seconds: int = 0,
        volume_mode: VolumeMode = "shared",
        timeout_s: float | None = None,
    ) -> list[ForkOutcome]:
        """Group fork: `count` copy-on-write children of a running sandbox in one call; one
        outcome per child, in order (a child's error does not fail the others). The children
        mount the parent's volumes (`volume_mode="shared"`), or each its own copy-on-write
        clone of every read-write one (`"copy_on_write"`), which goes with the child."""
        request = gateway_pb2.ForkSandboxRequest(
            sandbox_id=sandbox_id, count=count, timeout_seconds=timeout_seconds,
            volume_mode=_VOLUME_MODES[volume_mode],
        )
        reply: gateway_pb2.ForkSandboxResponse = await self._call(
            self._stub.ForkSandbox, request, timeout_s, sandbox_id=sandbox_id
        )
        outcomes = [_fork_outcome(result) for result in reply.results]
        self._alive.update(o.sandbox_id for o in outcomes if not isinstance(o, AenvError))
        return outcomes

    async def reset_sandbox(
        self, sandbox_id: str, snapshot_id: str, *, timeout_s: float | None = None
    ) -> cluster_pb2.SandboxRecord:
        request = gateway_pb2.ResetSandboxRequest(sandbox_id=sandbox_id, snapshot_id=snapshot_id)
        reply: gateway_pb2.ResetSandboxResponse = await self._call(
            self._stub.ResetSandbox, request, timeout_s, sandbox_id=sandbox_id
        )
        return reply.sandbox



VolumeMode = Literal["shared", "copy_on_write"]
_VOLUME_MODES = {"shared": gateway_pb2.VOLUME_FORK_MODE_SHARED,
                 "copy_on_write": gateway_pb2.VOLUME_FORK_MODE_COPY_ON_WRITE}
VolumeMountArg = gateway_pb2.VolumeMountRequest | tuple[str, str] | tuple[str, str, bool]


def volume_mount(mount: VolumeMountArg) -> gateway_pb2.VolumeMountRequest:
    """A mount as the gateway takes it: at `path`, the volume by id or name."""
    if isinstance(mount, gateway_pb2.VolumeMountRequest):
        return mount
    path, volume, *read_only = mount
    return gateway_pb2.VolumeMountRequest(path=path, volume=volume,
                                          read_only=bool(read_only and read_only[0]))


def _outcome(result: gateway_pb2.CreateResult) -> CreateOutcome:
    if result.HasField("sandbox"):
        return result.sandbox
    return item_error(result.error)


def _fork_outcome(result: gateway_pb2.ForkResult) -> ForkOutcome:
    if result.HasField("sandbox"):
        return result.sandbox
    return item_error(result.error)
