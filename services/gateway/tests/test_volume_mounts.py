"""Mounts through the native API (aenv_client over gRPC) and REST, forks (shared and
copy-on-write), the sweep of clones, sandboxes from snapshots, the content routes' auth and
statuses, and nothing left half-made after a failure; over a fake snapstore VolumeService."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import aiohttp
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_client import GatewayClient
from aenv_common.errors import InvalidArgument, NotFound, ResourceExhausted, Unavailable
from aenv_gateway.core.volumes.names import check_disjoint, check_mount_path

from .conftest import API_KEY
from .volume_stack import VolumeStack, volume_stack

OTHER_KEY = "e2b_" + "ab" * 20


@pytest.fixture
async def vstack() -> AsyncIterator[VolumeStack]:
    async with volume_stack(volume_sweep_grace_s=0.0) as running:
        await running.stack.gateway.api_keys.put(cluster_pb2.ApiKeyRecord(
            key_id="other", sha256=hashlib.sha256(OTHER_KEY.encode()).hexdigest()))
        yield running


@pytest.fixture
async def client(vstack: VolumeStack) -> AsyncIterator[GatewayClient]:
    async with GatewayClient(f"127.0.0.1:{vstack.stack.gateway.grpc_port}", API_KEY,
                             timeout_s=10) as made:
        yield made


async def _volume(
    vstack: VolumeStack, name: str, key: str = API_KEY, **extra: object
) -> dict[str, str]:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{vstack.url}/volumes", json={"name": name, **extra},
                             headers={"X-API-Key": key}) as response:
            assert response.status == 201, await response.text()
            body: dict[str, str] = await response.json()
            return body


def test_mount_paths() -> None:
    assert check_mount_path("/data/x") == "/data/x"
    for bad in ("data", "/", "/a/./b", "/a//b", "/a/", "/proc", "/proc/1", "/sys/x", "/dev"):
        with pytest.raises(InvalidArgument):
            check_mount_path(bad)
    check_disjoint(["/a", "/ab", "/b/c"])
    for clash in (["/a", "/a"], ["/a/b/c", "/a-b", "/a"]):
        with pytest.raises(InvalidArgument):
            check_disjoint(clash)


async def test_native_create_by_id_and_name_and_no_tickets_out(
    vstack: VolumeStack, client: GatewayClient
) -> None:
    data = await _volume(vstack, "data")
    await _volume(vstack, "ro")
    record = await client.create_sandbox(
        "base", volume_mounts=[("/data", data["volumeID"]), ("/ro", "ro", True)])
    assert [(m.path, m.name, m.read_only, m.ticket) for m in record.volume_mounts] == [
        ("/data", "data", False, ""), ("/ro", "ro", True, "")]
    spec = vstack.stack.nodeagent.specs[-1]
    assert all(m.ticket for m in spec.volume_mounts)
    got = await client.get_sandbox(record.sandbox_id)
    assert all(not m.ticket for m in got.volume_mounts)
    assert [(g.sandbox_id, g.read_only) for g in vstack.snapstore.grants] == [
        (record.sandbox_id, False), (record.sandbox_id, True)]


async def test_another_keys_volume_is_unknown(
    vstack: VolumeStack, client: GatewayClient
) -> None:
    theirs = await _volume(vstack, "theirs", OTHER_KEY)
    for volume in (theirs["volumeID"], "theirs"):
        with pytest.raises(NotFound):
            await client.create_sandbox("base", volume_mounts=[("/x", volume)])
    assert vstack.stack.nodeagent.specs == [] and vstack.snapstore.grants == []
    async with aiohttp.ClientSession(headers={"X-API-Key": API_KEY}) as http:
        async with http.get(f"{vstack.url}/volumes/{theirs['volumeID']}") as response:
            assert response.status == 404
            assert (await response.json())["message"] == "Volume not found"
        async with http.delete(f"{vstack.url}/volumes/{theirs['volumeID']}") as response:
            assert response.status == 404
        async with http.get(f"{vstack.url}/volumes") as response:
            assert await response.json() == []


async def test_a_failed_snapstore_create_leaves_nothing(vstack: VolumeStack) -> None:
    vstack.snapstore.failures["CreateVolume"] = [Unavailable("snapstore restarting")]
    async with aiohttp.ClientSession(headers={"X-API-Key": API_KEY}) as http:
        async with http.post(f"{vstack.url}/volumes", json={"name": "v"}) as response:
            assert response.status == 503
        assert vstack.records() == {} and vstack.snapstore.volumes == {}
        async with http.post(f"{vstack.url}/volumes", json={"name": "v"}) as response:
            assert response.status == 201  # the name was not left claimed


async def test_content_auth_and_statuses(vstack: VolumeStack) -> None:
    vol = await _volume(vstack, "c", quotaBytes=10)
    base = f"{vstack.url}/volumecontent/{vol['volumeID']}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/path", params={"path": "/"}) as response:
            assert response.status == 401
        wrong = {"Authorization": "Bearer not-the-token"}
        async with http.get(f"{base}/path", params={"path": "/"}, headers=wrong) as response:
            assert response.status == 401
        async with http.get(f"{base}/path", params={"path": "/"},
                            headers={"X-API-Key": API_KEY}) as response:
            assert response.status == 200 and (await response.json())["type"] == "directory"
        async with http.get(f"{base}/path", params={"path": "/"},
                            headers={"X-API-Key": OTHER_KEY}) as response:
            assert response.status == 404
        token = {"Authorization": f"Bearer {vol['token']}"}
        async with http.get(f"{base}/path", params={"path": "/nope"}, headers=token) as response:
            assert response.status == 404
        async with http.put(f"{base}/file", params={"path": "/f"}, data=b"x" * 11,
                            headers=token) as response:
            assert response.status == 507  # the quota: not a 429 any client would retry
        async with http.get(f"{base}/file", params={"path": "/f"}, headers=token) as response:
            assert response.status == 404  # the refused write left nothing
        async with http.get(f"{base}/path", params={"path": "relative"},
                            headers=token) as response:
            assert response.status == 400


async def test_delete_in_use_names_the_sandboxes(
    vstack: VolumeStack, client: GatewayClient
) -> None:
    vol = await _volume(vstack, "busy")
    first = await client.create_sandbox("base", volume_mounts=[("/a", "busy")])
    second = await client.create_sandbox("base", volume_mounts=[("/b", "busy")])
    await client.pause_sandbox(second.sandbox_id)
    async with aiohttp.ClientSession(headers={"X-API-Key": API_KEY}) as http:
        async with http.delete(f"{vstack.url}/volumes/{vol['volumeID']}") as response:
            assert response.status == 409
            message = (await response.json())["message"]
        assert first.sandbox_id in message and second.sandbox_id in message
        assert vol["volumeID"] in vstack.snapstore.volumes
        await client.kill_sandbox(first.sandbox_id)
        await client.kill_sandbox(second.sandbox_id)
        async with http.delete(f"{vstack.url}/volumes/{vol['volumeID']}") as response:
            assert response.status == 204
    assert vstack.records() == {} and vstack.snapstore.volumes == {}


async def test_shared_fork_mounts_the_parents_volumes(
    vstack: VolumeStack, client: GatewayClient
) -> None:
    vol = await _volume(vstack, "shared")
    parent = await client.create_sandbox("base", volume_mounts=[("/s", "shared")])
    outcomes = await client.fork_sandbox(parent.sandbox_id, 1)
    request = vstack.stack.nodeagent.forks[-1]
    [child_mounts] = request.child_volume_mounts
    [mount] = child_mounts.mounts
    assert (mount.volume_id, mount.seen_as) == (vol["volumeID"], vol["volumeID"])
    assert mount.ticket.startswith(f"t.{request.child_ids[0]}.")
    assert isinstance(outcomes[0], cluster_pb2.SandboxRecord)
    assert not outcomes[0].volume_mounts[0].ticket
    assert vstack.snapstore.calls.count("CloneVolume") == 0


async def test_copy_on_write_fork_clones_per_child(
    vstack: VolumeStack, client: GatewayClient
) -> None:
    rw = await _volume(vstack, "rw")
    ro = await _volume(vstack, "ro")
    parent = await client.create_sandbox("base", volume_mounts=[("/rw", "rw"), ("/ro", "ro", True)])
    # The fake node starts the first child and fails the second.
    outcomes = await client.fork_sandbox(parent.sandbox_id, 2, volume_mode="copy_on_write")
    request = vstack.stack.nodeagent.forks[-1]
    started, failed = request.child_ids
    assert isinstance(outcomes[0], cluster_pb2.SandboxRecord) and not isinstance(
        outcomes[1], cluster_pb2.SandboxRecord)
    first = {m.path: m for m in request.child_volume_mounts[0].mounts}
    assert first["/ro"].volume_id == ro["volumeID"] and first["/ro"].read_only
    clone_id = first["/rw"].volume_id
    assert clone_id != rw["volumeID"] and first["/rw"].seen_as == rw["volumeID"]
    assert first["/rw"].ticket == f"t.{started}.{clone_id}.{rw['volumeID']}.0"
    clone = vstack.records()[clone_id]
    assert (clone.ephemeral_for_sandbox_id, clone.cloned_from, clone.owner_key_id,
            clone.name) == (started, rw["volumeID"], "admin", f"rw-{started}")
    # The failed child's clone is gone, the started one's stays (with its data).
    assert vstack.snapstore.calls.count("CloneVolume") == 2
    assert {r.ephemeral_for_sandbox_id for r in vstack.records().values()} == {"", started}
    assert set(vstack.snapstore.volumes) == {rw["volumeID"], ro["volumeID"], clone_id}
    assert failed not in {r.ephemeral_for_sandbox_id for r in vstack.records().values()}

    # The sweep keeps a clone while its sandbox lives, and takes it once it is gone.
    sweep = vstack.stack.gateway.sweep
    assert await sweep.sweep() == []
    await client.kill_sandbox(started)
    assert await sweep.sweep() == [clone_id]
    assert clone_id not in vstack.snapstore.volumes and clone_id not in vstack.records()


async def test_a_failed_fork_removes_every_clone(
    vstack: VolumeStack, client: GatewayClient
) -> None:
    await _volume(vstack, "rw")
    parent = await client.create_sandbox("base", volume_mounts=[("/rw", "rw")])
    vstack.stack.nodeagent.fork_failures.append(InvalidArgument("the node refused"))
    with pytest.raises(InvalidArgument):
        await client.fork_sandbox(parent.sandbox_id, 3, volume_mode="copy_on_write")
    assert vstack.snapstore.calls.count("CloneVolume") == 3
    assert len(vstack.records()) == 1 and len(vstack.snapstore.volumes) == 1
    # A clone that fails half way also leaves nothing.
    vstack.snapstore.failures["CloneVolume"] = [ResourceExhausted("backend full")]
    with pytest.raises(ResourceExhausted):
        await client.fork_sandbox(parent.sandbox_id, 2, volume_mode="copy_on_write")
    assert len(vstack.records()) == 1 and len(vstack.snapstore.volumes) == 1


async def test_a_sandbox_from_a_snapshot_mounts_its_volumes(
    vstack: VolumeStack, client: GatewayClient
) -> None:
    vol = await _volume(vstack, "snapped")
    source = await client.create_sandbox("base", volume_mounts=[("/v", "snapped")])
    snapshot = await client.create_snapshot(source.sandbox_id)
    vstack.stack.scheduler.templates.add(snapshot.snapshot_id)
    made = await client.create_sandbox(snapshot.snapshot_id)
    spec = vstack.stack.nodeagent.specs[-1]
    [mount] = spec.volume_mounts
    assert (mount.path, mount.volume_id, mount.seen_as) == ("/v", vol["volumeID"], vol["volumeID"])
    assert mount.ticket.startswith(f"t.{made.sandbox_id}.")
    # Its volume gone, the snapshot cannot be created from.
    await client.kill_sandbox(source.sandbox_id)
    await client.kill_sandbox(made.sandbox_id)
    async with aiohttp.ClientSession(headers={"X-API-Key": API_KEY}) as http:
        async with http.delete(f"{vstack.url}/volumes/{vol['volumeID']}") as response:
            assert response.status == 204
    with pytest.raises(NotFound):
        await client.create_sandbox(snapshot.snapshot_id)
