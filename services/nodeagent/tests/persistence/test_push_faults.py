"""A snapshot push (the node agent's push code) against faults of real processes: the S3 server
going away mid-push, the snapstore or the pushing node agent SIGKILLed mid-upload. A store never
holds a manifest that names a missing chunk, and the push completes once the part is back,
sending only what the store lacks. Each fault is tripped by the bytes that reached S3, so it lands
mid-push every run."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path

import grpc
import pytest
from prometheus_client import REGISTRY

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.snapshots import snapstore_stub
from aenv_nodeagent.snapshots.persistence import PushState, SnapshotPersistence

from .s3_rig import S3Gate, SnapstoreProcess, moto_server, s3_objects, stopped

pytestmark = pytest.mark.s3

MIB = 1 << 20
SIZE = 24 * MIB  # 12 chunks of 2 MiB, incompressible
TRIP_AT = 7 * MIB  # a few chunks in S3, most not
PUSHER = Path(__file__).with_name("pusher.py")


class Rig:
    def __init__(self, moto: int, gate: S3Gate, snapstore: SnapstoreProcess, memory: Path):
        self.moto, self.gate, self.snapstore, self.memory = moto, gate, snapstore, memory
        self.persistence = SnapshotPersistence(snapstore.address, retry_delays_s=[0.5] * 60)
        self._faults: set[asyncio.Task[None]] = set()

    def push(self, manifest_id: str) -> None:
        async def files() -> Mapping[str, Path]:
            return {"memory": self.memory}

        async def pushed() -> None:
            return None

        self.persistence.push_soon(manifest_id, files, pushed, labels={})

    def soon(self, fault: Callable[[], Awaitable[None]]) -> Callable[[], None]:
        """A fault for the gate to trip (it runs in the gate's own task)."""

        def trip() -> None:
            task = asyncio.ensure_future(fault())
            self._faults.add(task)

        return trip

    async def faults_done(self) -> None:
        await asyncio.gather(*self._faults)

    async def assert_complete(self, manifest_id: str) -> pb.Manifest:
        """The manifest is stored, every chunk it names is in S3, and it pulls back whole."""
        async with grpc.aio.insecure_channel(self.snapstore.address) as channel:
            reply = await snapstore_stub(channel).GetManifest(
                pb.GetManifestRequest(snapshot_id=manifest_id)
            )
        stored = {key.rpartition("/")[2] for key in await s3_objects(self.moto, "chunks/")}
        named = {d.removeprefix("sha256:") for f in reply.manifest.files for d in f.chunk_digests}
        assert named <= stored
        pulled = await self.persistence.pull(manifest_id, self.memory.parent / manifest_id)
        assert pulled["memory"].read_bytes() == self.memory.read_bytes()
        manifest: pb.Manifest = reply.manifest
        return manifest


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    memory = tmp_path / "memory"
    memory.write_bytes(os.urandom(SIZE))
    async with moto_server() as moto:
        gate = S3Gate(moto)
        await gate.open()
        snapstore = SnapstoreProcess(tmp_path, gate.endpoint)
        try:
            async with stopped(snapstore):
                await snapstore.start()
                made = Rig(moto, gate, snapstore, memory)
                try:
                    yield made
                finally:
                    await made.persistence.close()
                    await made.faults_done()
        finally:
            await gate.close()


def _attempts(outcome: str) -> float:
    return (
        REGISTRY.get_sample_value("aenv_node_snapshot_push_attempts_total", {"outcome": outcome})
        or 0.0
    )


async def _until(check: Callable[[], bool], within_s: float, what: str) -> None:
    async with asyncio.timeout(within_s):
        while not check():  # noqa: ASYNC110 - the push's status has no event to wait on
            await asyncio.sleep(0.05)
    assert check(), what


async def test_a_push_is_retried_while_s3_is_down_and_completes_when_it_returns(
    rig: Rig,
) -> None:
    failed_before = _attempts("failed")
    rig.gate.trip_after(TRIP_AT, rig.soon(rig.gate.close))
    rig.push("s3-down")
    status = rig.persistence.status["s3-down"]
    await _until(lambda: status.state is PushState.RETRYING, 120, "a failed attempt")
    await asyncio.sleep(2)  # more attempts, all failing while S3 is down
    assert status.state is PushState.RETRYING and status.attempts >= 2
    assert "S3" in status.last_error, status.last_error
    assert _attempts("failed") > failed_before  # and the node's metrics say so
    assert await s3_objects(rig.moto, "manifests/") == []  # nothing half-written names chunks

    await rig.gate.open()
    await asyncio.wait_for(rig.persistence.persisted("s3-down"), 120)
    assert rig.persistence.status["s3-down"].state is PushState.PUSHED
    await rig.assert_complete("s3-down")
    assert rig.persistence.stats["s3-down"].sent_chunks < SIZE // (2 * MIB)  # resumed


async def test_a_snapstore_killed_mid_upload_leaves_no_manifest_and_the_push_resumes(
    rig: Rig,
) -> None:
    async def kill_snapstore() -> None:
        await rig.snapstore.kill()

    rig.gate.trip_after(TRIP_AT, rig.soon(kill_snapstore))
    rig.push("snapstore-killed")
    status = rig.persistence.status["snapstore-killed"]
    await _until(lambda: status.state is PushState.RETRYING, 120, "a failed attempt")
    assert await s3_objects(rig.moto, "manifests/") == []
    assert await s3_objects(rig.moto, "chunks/")  # the upload was under way

    await rig.snapstore.start()  # on its port again
    await asyncio.wait_for(rig.persistence.persisted("snapstore-killed"), 120)
    assert rig.persistence.status["snapstore-killed"].state is PushState.PUSHED
    await rig.assert_complete("snapstore-killed")
    assert rig.persistence.stats["snapstore-killed"].sent_chunks < SIZE // (2 * MIB)


async def test_a_node_agent_killed_mid_upload_leaves_no_manifest_and_its_successor_resumes(
    rig: Rig,
) -> None:
    agent = await asyncio.create_subprocess_exec(
        sys.executable, str(PUSHER), rig.snapstore.address, "agent-killed", str(rig.memory)
    )

    async def kill_agent() -> None:
        agent.kill()

    rig.gate.trip_after(TRIP_AT, rig.soon(kill_agent))
    try:
        assert await asyncio.wait_for(agent.wait(), 120) == -9
    finally:
        if agent.returncode is None:
            agent.kill()
            await agent.wait()
    async with grpc.aio.insecure_channel(rig.snapstore.address) as channel:
        listed = await snapstore_stub(channel).ListManifests(pb.ListManifestsRequest())
    assert list(listed.snapshot_ids) == []  # cleanly absent
    assert await s3_objects(rig.moto, "chunks/")

    rig.push("agent-killed")  # its successor pushes what the dead one had not
    await asyncio.wait_for(rig.persistence.persisted("agent-killed"), 120)
    await rig.assert_complete("agent-killed")
    assert rig.persistence.stats["agent-killed"].sent_chunks < SIZE // (2 * MIB)
