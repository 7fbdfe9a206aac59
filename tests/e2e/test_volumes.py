"""Volumes with real guests on the shared single-node platform, through the unmodified
E2B SDK and the native gRPC API: the content API with no sandbox; two sandboxes on one volume
(a file closed in one is whole in the other, a name made by one is found by the other at once);
a read-only mount (EROFS); a quota (the guest sees ENOSPC, nothing else breaks); pause/resume and
a snapshot (a sandbox created from it mounts the same volume); fork shared (children see one
volume) and copy-on-write (each child writes the same path and reads its own, the parent's
volume unchanged, the clones gone with the children); a node-agent crash (the running guests'
mounts keep working once it is back); another key sees nothing; deleting a mounted volume: 409.

Two sandboxes and four volumes serve the whole module; the forks and the snapshot's sandbox
come and go within their tests."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest
import pytest_asyncio
from e2b import AsyncSandbox, AsyncVolume
from e2b.exceptions import NotFoundException, SandboxException, VolumeException

from aenv.cluster.v1 import cluster_pb2
from aenv.gateway.v1 import gateway_pb2
from aenv_cli.client import GatewayClient
from aenv_cli.platform import Platform
from aenv_client import AenvError
from aenv_client.client import VolumeMode
from aenv_common.cluster import ClusterStore
from aenv_common.config import CommonSettings

from .conftest import until
from .volumes.guest import (
    ENOSPC_TEXT,
    EROFS_TEXT,
    SANDBOX_TIMEOUT_S,
    create_volume,
    destroyed_after,
    install_write_probe,
    kill_quietly,
    sdk_environment,
    sh,
    sh_status,
    unique,
    write_probe,
)

pytestmark = [
    pytest.mark.vm,
    pytest.mark.sdk,
    pytest.mark.etcd,
    pytest.mark.netns,
    pytest.mark.asyncio(loop_scope="session"),
]

MIB = 1 << 20
QUOTA_BYTES = 8 * MIB
# How long the gateway may take to destroy a killed fork child's clones: the shared platform's
# sweep runs every 2 s and spares clones younger than 30 s (tests/conftest.py).
CLONE_SWEEP_WITHIN_S = 90.0


@dataclass
class World:
    platform: Platform
    shared: AsyncVolume  # /data in a and b
    small: AsyncVolume  # /q in a, QUOTA_BYTES
    readonly: AsyncVolume  # /ro in b, read-only
    a: AsyncSandbox
    b: AsyncSandbox
    made: list[str] = field(default_factory=list)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def world(platform: Platform) -> AsyncIterator[World]:
    with sdk_environment(platform.e2b_env()):
        async with destroyed_after([]) as volumes:
            shared = await AsyncVolume.create(unique("shared"))
            volumes.append(shared)
            small = await create_volume(
                platform.api_url, platform.api_key, unique("small"), quota_bytes=QUOTA_BYTES
            )
            volumes.append(small)
            readonly = await AsyncVolume.create(unique("readonly"))
            volumes.append(readonly)
            await readonly.write_file("/seed.txt", "seeded by the content API\n")
            made: list[str] = []
            try:
                a = await AsyncSandbox.create(
                    timeout=SANDBOX_TIMEOUT_S, volume_mounts={"/data": shared, "/q": small}
                )
                made.append(a.sandbox_id)
                # Read-only is the native API's (E2B's mount model has no flag).
                async with GatewayClient.for_home(platform.home, timeout_s=600) as client:
                    record = await client.create_sandbox(
                        "base",
                        timeout_seconds=SANDBOX_TIMEOUT_S,
                        volume_mounts=[
                            gateway_pb2.VolumeMountRequest(path="/data", volume=shared.name),
                            gateway_pb2.VolumeMountRequest(
                                path="/ro", volume=readonly.volume_id, read_only=True
                            ),
                        ],
                    )
                made.append(record.sandbox_id)
                b = await AsyncSandbox.connect(record.sandbox_id)
                await asyncio.gather(install_write_probe(a), install_write_probe(b))
                yield World(platform, shared, small, readonly, a, b, made)
            finally:
                await kill_quietly(made)


async def test_content_api_round_trip_without_a_sandbox(world: World) -> None:
    volume = await AsyncVolume.create(unique("content"))
    try:
        assert volume.volume_id.startswith("vol-") and len(volume.volume_id) == 24
        listed = {v.volume_id: v.name for v in await AsyncVolume.list()}
        assert listed[volume.volume_id] == volume.name
        info = await AsyncVolume.get_info(volume.volume_id)
        assert (info.name, info.token) == (volume.name, volume.token)

        await volume.make_dir("/a/b/c", force=True)
        blob = os.urandom(3 * MIB + 12345)  # several 1 MiB messages and a ragged tail
        written = await volume.write_file("/a/b/c/blob.bin", io.BytesIO(blob))
        assert written.size == len(blob)
        assert await volume.read_file("/a/b/c/blob.bin", format="bytes") == blob
        streamed = b"".join(
            [c async for c in await volume.read_file("/a/b/c/blob.bin", format="stream")]
        )
        assert streamed == blob
        await volume.write_file("/a/note.txt", "first")
        await volume.write_file("/a/note.txt", "replaced")  # overwrite in place
        assert await volume.read_file("/a/note.txt") == "replaced"

        names = {e.path for e in await volume.list("/a", depth=3)}
        assert {"/a/b", "/a/b/c", "/a/b/c/blob.bin", "/a/note.txt"} <= names
        changed = await volume.update_metadata("/a/note.txt", mode=0o600)
        assert changed.mode & 0o777 == 0o600
        assert await volume.exists("/a/note.txt") and not await volume.exists("/nope")
        with pytest.raises(NotFoundException):
            await volume.read_file("/nope")
        await volume.remove("/a")  # a directory with everything in it
        assert not await volume.exists("/a/b/c/blob.bin")
    finally:
        assert await AsyncVolume.destroy(volume.volume_id) is True
    assert await AsyncVolume.destroy(volume.volume_id) is False  # 404: gone
    with pytest.raises(NotFoundException):
        await AsyncVolume.get_info(volume.volume_id)


async def test_a_closed_file_is_whole_in_another_sandbox(world: World) -> None:
    a, b = world.a, world.b
    digest = await sh(a, "head -c 4194304 /dev/urandom > /data/blob && md5sum < /data/blob")
    assert await sh(b, "md5sum < /data/blob") == digest
    # A name another sandbox makes is found at once (no negative lookup cache) and listed
    # within the attribute cache's second.
    await sh(b, "echo made-by-b > /data/from-b")
    assert await sh(a, "cat /data/from-b") == "made-by-b\n"
    await _eventually_listed(a, "/data", "from-b")
    # Rewritten in place and closed: the other sandbox's next open sees the new bytes whole.
    await sh(a, "printf 'second version' > /data/from-b")
    assert await sh(b, "cat /data/from-b") == "second version"
    # The guest's default user writes there too (a volume's root is 0777, as E2B's).
    await sh(a, "echo by-user > /data/by-user.txt", user="user")
    assert await sh(b, "stat -c %u /data/by-user.txt && cat /data/by-user.txt") == (
        "1000\nby-user\n"
    )
    # The content API sees the guests' files, and the guests what it writes.
    assert await world.shared.read_file("/from-b") == "second version"
    await world.shared.write_file("/from-api.txt", "written with no sandbox")
    assert await sh(a, "cat /data/from-api.txt") == "written with no sandbox"
    mounts = await sh(a, "grep ' /data ' /proc/mounts")
    assert f"169.254.0.22:/{world.shared.volume_id} /data nfs" in mounts
    info = await AsyncSandbox.get_info(a.sandbox_id)
    assert {(m["name"], m["path"]) for m in info.volume_mounts} == {
        (world.shared.name, "/data"),
        (world.small.name, "/q"),
    }


async def test_a_read_only_mount_refuses_writes(world: World) -> None:
    b = world.b
    assert await sh(b, "cat /ro/seed.txt") == "seeded by the content API\n"
    code, out = await sh_status(b, "touch /ro/new")
    assert code != 0 and EROFS_TEXT in out, out
    code, out = await sh_status(b, "rm /ro/seed.txt")
    assert code != 0 and EROFS_TEXT in out, out
    # The guest's root may remount it read-write; the volume server still refuses (its grant is
    # read-only: NFS3ERR_ROFS).
    code, out = await sh_status(b, "mount -o remount,rw /ro")
    assert code == 0, out
    assert (await sh(b, "awk '$2 == \"/ro\" {print $4}' /proc/mounts")).startswith("rw,")
    code, out = await sh_status(b, "touch /ro/new")
    assert code != 0 and EROFS_TEXT in out, out
    assert await world.readonly.read_file("/seed.txt") == "seeded by the content API\n"
    assert not await world.readonly.exists("/new")


async def test_a_write_past_the_quota_is_enospc_and_nothing_else_breaks(world: World) -> None:
    a = world.a
    await sh(a, "echo kept > /q/keep")
    # The guest sees the quota as the file system's size (FSSTAT).
    assert (await sh(a, "df -B1 --output=size /q")).split()[-1] == str(QUOTA_BYTES)
    assert await write_probe(a, "/q/big", 2 * QUOTA_BYTES) == f"ENOSPC {ENOSPC_TEXT}"
    # The sandbox, the other file and the other volume are fine; room made is usable again.
    assert await sh(a, "cat /q/keep") == "kept\n"
    assert await sh(a, "echo still > /data/after-enospc && cat /data/after-enospc") == "still\n"
    await sh(a, "rm -f /q/big")
    assert await write_probe(a, "/q/fits", QUOTA_BYTES // 2) == "ok"
    with pytest.raises(VolumeException):
        await world.small.write_file("/too-big", b"\0" * QUOTA_BYTES)
    assert not await world.small.exists("/too-big")  # nothing left of the refused write


async def test_mounts_survive_pause_resume_and_a_snapshot(world: World) -> None:
    a = world.a
    await sh(a, "echo before-pause > /data/paused.txt")
    assert await a.pause()
    await world.shared.write_file("/while-paused.txt", "written while paused")
    a = world.a = await AsyncSandbox.connect(a.sandbox_id)
    assert await sh(a, "cat /data/paused.txt /data/while-paused.txt") == (
        "before-pause\nwritten while paused"
    )
    await sh(a, "echo after-resume > /data/resumed.txt")
    assert await sh(world.b, "cat /data/resumed.txt") == "after-resume\n"

    snapshot = await a.create_snapshot()
    try:
        child = await AsyncSandbox.create(template=snapshot.snapshot_id, timeout=300)
        world.made.append(child.sandbox_id)
        try:
            assert await sh(child, "cat /data/resumed.txt /q/keep") == "after-resume\nkept\n"
            await sh(child, "echo from-snapshot-child > /data/snap-child.txt")
            assert await sh(world.b, "cat /data/snap-child.txt") == "from-snapshot-child\n"
            info = await AsyncSandbox.get_info(child.sandbox_id)
            assert {m["path"] for m in info.volume_mounts} == {"/data", "/q"}
        finally:
            await AsyncSandbox.kill(child.sandbox_id)
    finally:
        await AsyncSandbox.delete_snapshot(snapshot.snapshot_id)


async def test_forks_share_or_copy_the_volumes(world: World) -> None:
    a = world.a
    await sh(a, "echo parent > /data/forked.txt")
    async with GatewayClient.for_home(world.platform.home, timeout_s=600) as client:
        shared = await _children(client, a.sandbox_id, "shared")
        try:
            one, two = [await AsyncSandbox.connect(c) for c in shared]
            await sh(one, "echo from-one > /data/shared-fork.txt")
            assert await sh(two, "cat /data/shared-fork.txt /data/forked.txt") == (
                "from-one\nparent\n"
            )
            assert await sh(a, "cat /data/shared-fork.txt") == "from-one\n"
        finally:
            await kill_quietly(shared)

        cow = await _children(client, a.sandbox_id, "copy_on_write")
        try:
            kids = [await AsyncSandbox.connect(c) for c in cow]
            for n, kid in enumerate(kids):
                assert await sh(kid, "cat /data/forked.txt /q/keep") == "parent\nkept\n"
                await sh(kid, f"echo child-{n} > /data/forked.txt && echo {n} > /q/kid")
            for n, kid in enumerate(kids):
                assert await sh(kid, "cat /data/forked.txt /q/kid") == f"child-{n}\n{n}\n"
            # The parent's volumes are as they were at the fork.
            assert await sh(a, "cat /data/forked.txt") == "parent\n"
            assert (await sh_status(a, "cat /q/kid"))[0] != 0
            assert await world.shared.read_file("/forked.txt") == "parent\n"
            clones = await _clones_of(world, cow)
            assert len(clones) == 2 * len(cow), clones  # /data and /q of each child
            assert {c.cloned_from for c in clones} == {
                world.shared.volume_id,
                world.small.volume_id,
            }
        finally:
            await kill_quietly(cow)

    async def clones_gone() -> bool:
        return not await _clones_of(world, cow)

    await until(clones_gone, CLONE_SWEEP_WITHIN_S, "the fork children's clones destroyed")


async def test_mounts_outlive_a_node_agent_crash(world: World) -> None:
    await world.platform.restart_service("nodeagent", crash=True)
    # The guests' NFS clients re-dial the relay the new agent opened for its adopted sandboxes.
    await sh(world.a, "echo after-crash > /data/after-crash.txt")
    assert await sh(world.b, "cat /data/after-crash.txt") == "after-crash\n"
    assert await sh(world.b, "md5sum < /data/blob") == await sh(world.a, "md5sum < /data/blob")


async def test_another_key_neither_lists_nor_mounts_nor_reads(world: World) -> None:
    platform, shared = world.platform, world.shared
    async with httpx.AsyncClient(
        base_url=platform.api_url, headers={"X-API-Key": platform.api_key}, timeout=60
    ) as admin:
        made = await admin.post("/admin/keys", json={"name": unique("other")})
        assert made.status_code in (200, 201), made.text
        other, other_id = made.json()["key"], made.json()["keyID"]
        try:
            ids = {v.volume_id for v in await AsyncVolume.list(api_key=other)}
            assert shared.volume_id not in ids
            with pytest.raises(NotFoundException):
                await AsyncVolume.get_info(shared.volume_id, api_key=other)
            assert await AsyncVolume.destroy(shared.volume_id, api_key=other) is False
            async with httpx.AsyncClient(base_url=platform.api_url, timeout=60) as anyone:
                for headers in ({"X-API-Key": other}, {"Authorization": f"Bearer {other}"}):
                    answer = await anyone.get(
                        f"/volumecontent/{shared.volume_id}/file",
                        params={"path": "/from-api.txt"},
                        headers=headers,
                    )
                    assert answer.status_code in (401, 403, 404), answer.text
            with pytest.raises(SandboxException):
                made_by_other = await AsyncSandbox.create(
                    api_key=other, timeout=60, volume_mounts={"/data": shared.name}
                )
                await AsyncSandbox.kill(made_by_other.sandbox_id)
            async with GatewayClient(platform.grpc_address, other, timeout_s=60) as client:
                with pytest.raises(AenvError):
                    await client.create_sandbox(
                        "base",
                        volume_mounts=[
                            gateway_pb2.VolumeMountRequest(path="/x", volume=shared.volume_id)
                        ],
                    )
        finally:
            await admin.delete(f"/admin/keys/{other_id}")


async def test_deleting_a_mounted_volume_is_refused(world: World) -> None:
    async with httpx.AsyncClient(
        base_url=world.platform.api_url,
        headers={"X-API-Key": world.platform.api_key},
        timeout=60,
    ) as http:
        answer = await http.delete(f"/volumes/{world.shared.volume_id}")
        assert answer.status_code == 409, answer.text
        assert world.a.sandbox_id in answer.text or world.b.sandbox_id in answer.text
    with pytest.raises(VolumeException):
        await AsyncVolume.destroy(world.shared.volume_id)
    assert await world.shared.read_file("/from-api.txt") == "written with no sandbox"


# -- helpers -----------------------------------------------------------------------------------


async def _eventually_listed(sandbox: AsyncSandbox, directory: str, name: str) -> None:
    async def listed() -> bool:
        return name in (await sh(sandbox, f"ls {directory}")).split()

    await until(listed, 5, f"{name} listed in {directory}")


async def _children(client: GatewayClient, parent: str, mode: VolumeMode) -> list[str]:
    outcomes = await client.fork_sandbox(parent, 2, timeout_seconds=300, volume_mode=mode)
    made = [o.sandbox_id for o in outcomes if not isinstance(o, AenvError)]
    errors = [o for o in outcomes if isinstance(o, AenvError)]
    if errors:
        await kill_quietly(made)
    assert not errors, errors
    return made


async def _clones_of(world: World, children: list[str]) -> list[cluster_pb2.VolumeRecord]:
    store = await ClusterStore.connect(CommonSettings(etcd_endpoints=world.platform.etcd_endpoints))
    try:
        records = await store.list_records("volumes", cluster_pb2.VolumeRecord)
    finally:
        await store.close()
    return [r for r in records if r.ephemeral_for_sandbox_id in set(children)]
