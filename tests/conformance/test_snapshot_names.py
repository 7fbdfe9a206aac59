"""Snapshots named as E2B names them, through the official SDK (sync and async) against real
microVMs: `create_snapshot(name)` answers `aenv/<name>:<tag>`, a name reused is a new build of
the same snapshot template (the newest wins its tag, an earlier tag stays creatable), sandboxes
are created by name, name:tag and the full id, listed and deleted by name; unnamed snapshots
answer `snap-…:default` and their bare ids keep working; bad names are 400, unknown ones 404."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from e2b import AsyncSandbox, Sandbox, SnapshotInfo
from e2b.exceptions import SandboxException

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]


def _name(kind: str) -> str:
    return f"names-{kind}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def made(e2b_vars: dict[str, str]) -> Iterator[tuple[list[Sandbox], list[str]]]:
    """Sandboxes and snapshots the test made: killed and deleted also when it fails."""
    sandboxes: list[Sandbox] = []
    snapshots: list[str] = []
    try:
        yield sandboxes, snapshots
    finally:
        for sandbox in sandboxes:
            sandbox.kill()
        for snapshot_id in snapshots:
            Sandbox.delete_snapshot(snapshot_id)


def test_named_snapshots_reused_created_listed_and_deleted(
    fresh_sbx: Sandbox, made: tuple[list[Sandbox], list[str]]
) -> None:
    sandboxes, snapshots = made
    name = _name("sync")
    full = f"aenv/{name}"

    def child(template: str) -> Sandbox:
        sandbox = Sandbox.create(template, timeout=300)
        sandboxes.append(sandbox)
        return sandbox

    fresh_sbx.files.write("/tmp/state", "one")
    first = fresh_sbx.create_snapshot(name.upper())  # names are lower-cased, as E2B's
    snapshots.append(first.snapshot_id)
    assert (first.snapshot_id, first.names) == (f"{full}:default", [full])
    fresh_sbx.files.write("/tmp/state", "two")
    again = fresh_sbx.create_snapshot(name)
    assert (again.snapshot_id, again.names) == (f"{full}:default", [full])
    fresh_sbx.files.write("/tmp/state", "three")
    tagged = Sandbox.create_snapshot(fresh_sbx.sandbox_id, f"{name}:v1")
    assert (tagged.snapshot_id, tagged.names) == (f"{full}:v1", [full])

    # The newest build of the default tag wins; the earlier tag keeps its own build.
    assert child(name).files.read("/tmp/state") == "two"
    assert child(tagged.snapshot_id).files.read("/tmp/state") == "three"

    listed = Sandbox.list_snapshots(name=name).next_items()
    assert [(s.snapshot_id, s.names) for s in listed] == [(f"{full}:v1", [full])]
    by_tag = Sandbox.list_snapshots(name=f"{full}:default").next_items()
    assert [s.snapshot_id for s in by_tag] == [f"{full}:default"]
    of_source = Sandbox.list_snapshots(sandbox_id=fresh_sbx.sandbox_id).next_items()
    assert f"{full}:v1" in {s.snapshot_id for s in of_source}

    with pytest.raises(SandboxException) as no_tag:
        Sandbox.create(f"{name}:v9", timeout=60)
    assert f"tag 'v9' does not exist for template '{name}'" in str(no_tag.value)

    assert Sandbox.delete_snapshot(tagged.snapshot_id) is True  # the template, every build
    assert Sandbox.delete_snapshot(tagged.snapshot_id) is False
    assert Sandbox.list_snapshots(name=name).next_items() == []
    with pytest.raises(SandboxException) as gone:
        Sandbox.create(name, timeout=60)
    assert gone.value.status_code == 404
    assert f"template '{name}' not found" in str(gone.value)


def test_unnamed_snapshots_keep_their_ids_and_bad_names_are_refused(
    fresh_sbx: Sandbox, made: tuple[list[Sandbox], list[str]]
) -> None:
    sandboxes, snapshots = made
    fresh_sbx.files.write("/tmp/state", "unnamed")
    unnamed = fresh_sbx.create_snapshot()
    snapshots.append(unnamed.snapshot_id)
    bare_id = unnamed.snapshot_id.removesuffix(":default")
    assert bare_id.startswith("snap-") and unnamed.snapshot_id == f"{bare_id}:default"
    assert unnamed.names == []
    assert SnapshotInfo(unnamed.snapshot_id, []) in Sandbox.list_snapshots(
        sandbox_id=fresh_sbx.sandbox_id).next_items()

    restored = Sandbox.create(bare_id, timeout=300)  # an id as aenv gave them before
    sandboxes.append(restored)
    assert restored.files.read("/tmp/state") == "unnamed"

    for bad, message in (("not a name!", "Invalid name: invalid template ID: not a name!"),
                         ("other-team/snap", "namespace 'other-team' must match your team"),
                         ("snap:bad tag", "Invalid name: invalid tag: bad tag")):
        with pytest.raises(SandboxException) as refused:
            fresh_sbx.create_snapshot(bad)
        assert refused.value.status_code == 400 and message in str(refused.value), bad
    with pytest.raises(SandboxException) as unknown:
        Sandbox.create(_name("unknown"), timeout=60)
    assert unknown.value.status_code == 404

    assert Sandbox.delete_snapshot(unnamed.snapshot_id) is True
    assert Sandbox.delete_snapshot(bare_id) is False
    assert Sandbox.delete_snapshot(f"aenv/{_name('unknown')}") is False


@pytest.mark.asyncio(loop_scope="session")
async def test_async_sdk_names_snapshots_the_same(async_sbx: AsyncSandbox) -> None:
    name = _name("async")
    children: list[AsyncSandbox] = []
    try:
        await async_sbx.files.write("/tmp/async-state", "first")
        first = await async_sbx.create_snapshot(name)
        await async_sbx.files.write("/tmp/async-state", "second")
        second = await AsyncSandbox.create_snapshot(async_sbx.sandbox_id, f"aenv/{name}")
        assert first.snapshot_id == second.snapshot_id == f"aenv/{name}:default"
        children.append(await AsyncSandbox.create(f"{name}:default", timeout=300))
        assert await children[0].files.read("/tmp/async-state") == "second"
        listed = await AsyncSandbox.list_snapshots(name=name).next_items()
        assert [s.snapshot_id for s in listed] == [f"aenv/{name}:default"]
    finally:
        for child in children:
            await child.kill()
        await AsyncSandbox.delete_snapshot(f"aenv/{name}:default")
    assert await AsyncSandbox.list_snapshots(name=name).next_items() == []
