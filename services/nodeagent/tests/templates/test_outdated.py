"""Captures of the built-in templates made under older inputs (the artifacts changed) leave the
node and snapstore (a real one, in process) — but never one a sandbox's disk, a pre-made overlay
or a snapshot layer stands on, one whose RAM a sandbox or snapshot pinned, one used lately, nor
the current capture or any other template's; pulled disks go once no capture stands on them, and
snapstore's once no capture there names them."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import grpc

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.snapshots import snapstore_stub
from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence
from aenv_nodeagent.templates.disk_files import BACKING_FILE
from aenv_nodeagent.templates.guest_disks import PULLED_DISKS_DIR, PUSHED_AT, GuestDisks
from aenv_nodeagent.templates.model import (
    BASE_TEMPLATE,
    META_FILE,
    TemplateInputs,
    snapshot_dir,
)
from aenv_nodeagent.templates.outdated import OutdatedCaptures
from aenv_nodeagent.templates.store import TemplateStore

from ..fakes.templates import FakeTemplates

DAY = 86400.0


def _captured(root: Path, inputs: TemplateInputs, *, used: float) -> Path:
    """A capture of `inputs` on disk as TemplateStore keeps it, last used at `used`."""
    directory = snapshot_dir(root, inputs)
    directory.mkdir(parents=True)
    (directory / "disk.qcow2").write_bytes(b"")
    (directory / "memory").write_bytes(b"ram")
    (directory / "state").write_bytes(b"")
    (directory / META_FILE).write_text(json.dumps({
        "template_id": inputs.template_id, "directory": str(directory), "vcpus": 1,
        "memory_mib": 128, "disk_mib": 64, "accelerator": "tcg", "kernel_version": "k",
        "artifacts_digest": inputs.artifacts.digest, "envd_version": "0.9.0",
        "boot_seconds": 1.0}))
    os.utime(directory / META_FILE, (used, used))
    return directory


def _older(inputs: TemplateInputs, n: int) -> TemplateInputs:
    """The same template under artifacts of another build (another key)."""
    artifacts = dataclasses.replace(inputs.artifacts, digest=f"{n}" * 64)
    return dataclasses.replace(inputs, artifacts=artifacts)


async def test_outdated_builtin_captures_go_unless_something_stands_on_them(
    tmp_path: Path, snapstore: str,
) -> None:
    now = 1_000 * DAY
    fake = FakeTemplates(tmp_path / "fake")
    fake.add(BASE_TEMPLATE)
    fake.add("web")
    base, web = fake.inputs(BASE_TEMPLATE), fake.inputs("web")
    none: Any = None  # the sweep only reads and removes what is on disk
    root = tmp_path / "templates"
    store = TemplateStore(root, none, none, none, none, boot_timeout_s=1, boot_attempts=1)
    store.register(base)
    store.register(web)
    idle = now - 2 * DAY

    current = _captured(root, base, used=idle)
    gone = _captured(root, _older(base, 1), used=idle)
    under_sandbox = _captured(root, _older(base, 2), used=idle)
    pinned = _captured(root, _older(base, 3), used=idle)
    recent = _captured(root, _older(base, 4), used=now - 60)
    other_template = _captured(root, _older(web, 5), used=idle)  # the cache's, not ours
    # A sandbox's disk on one (through a snapshot layer), a paused sandbox's RAM pin on another.
    sandboxes = tmp_path / "sandboxes"
    sandboxes.mkdir()
    await create_overlay(under_sandbox / "disk.qcow2", sandboxes / "layer.qcow2")
    await create_overlay(sandboxes / "layer.qcow2", sandboxes / "disk.qcow2")
    os.link(pinned / "memory", sandboxes / "base-memory")
    # The dropped capture was pulled with disks; the current one stands on one of them too.
    disks = root / PULLED_DISKS_DIR
    disks.mkdir()
    for name in ("sha256-shared", "sha256-only-old"):
        (disks / name).write_bytes(b"disk")
        (disks / (name + ".sha256")).write_text("stamp")
    (gone / BACKING_FILE).write_text(json.dumps({
        "rootfs": str(disks / "sha256-shared"), "tools_disk": str(disks / "sha256-only-old")}))
    (current / BACKING_FILE).write_text(json.dumps({
        "rootfs": str(disks / "sha256-shared"), "tools_disk": str(base.artifacts.tools_disk)}))

    persistence = SnapshotPersistence(snapstore)
    forgotten: list[Path] = []
    try:
        manifest = f"template-{BASE_TEMPLATE}-{gone.name}"

        async def files() -> dict[str, Path]:
            return {"memory": gone / "memory"}

        async def done() -> None:
            pass

        persistence.push_soon(manifest, files, done, {})
        await persistence.persisted(manifest)

        async def forget(template_id: str, disk: Path) -> None:
            forgotten.append(disk)

        sweep = OutdatedCaptures(store, lambda: list(sandboxes.glob("*.qcow2")), forget,
                                 persistence, clock=lambda: now)
        assert await sweep.sweep() == [gone]
        assert forgotten == [gone / "disk.qcow2"]
        for kept in (current, under_sandbox, pinned, recent, other_template):
            assert (kept / META_FILE).is_file(), kept
        assert not gone.exists()
        assert sorted(p.name for p in disks.iterdir()) == ["sha256-shared", "sha256-shared.sha256"]
        assert await sweep.sweep() == []  # nothing more, nothing twice
    finally:
        await persistence.close()
    check = SnapshotPersistence(snapstore)
    try:
        assert manifest not in await check.manifests()
    finally:
        await check.close()

    # Once the sandbox and the pin are gone, so are their captures; the recent one ages.
    (sandboxes / "disk.qcow2").unlink()
    (sandboxes / "layer.qcow2").unlink()
    (sandboxes / "base-memory").unlink()
    later = OutdatedCaptures(store, lambda: [], forget, clock=lambda: now + 2 * DAY)
    assert sorted(await later.sweep()) == sorted([under_sandbox, pinned, recent])
    assert (current / META_FILE).is_file() and (other_template / META_FILE).is_file()


async def test_snapstore_keeps_the_disks_a_capture_names_and_recent_ones(
    tmp_path: Path, snapstore: str,
) -> None:
    now = 1_000 * DAY
    old, recent = str(int(now - 2 * DAY)), str(int(now - 60))
    persistence = SnapshotPersistence(snapstore)
    stored = _Stored(persistence, tmp_path)
    try:
        await stored.put(f"template-base-{'2' * 24}", {
            "kind": "template", "template_id": BASE_TEMPLATE, "rootfs": "sha256:aa",
            "tools_disk": "sha256:bb"})
        await stored.put(f"template-web-{'1' * 24}", {  # a built template's: its tools disk
            "kind": "template", "template_id": "web", "rootfs": "sha256:ee",
            "tools_disk": "sha256:ff"})
        await stored.put("template-web", {"kind": "template", "template_id": "web"})  # inputs
        for disk, pushed in (("aa", old), ("bb", old), ("cc", old), ("dd", recent),
                             ("ff", old)):
            await stored.put(f"guest-disk-{disk}", {"kind": "template-disk",
                                                      PUSHED_AT: pushed})
        disks = GuestDisks(persistence, tmp_path / "node")
        # A capture pushed before disks travelled names none: nothing can be told unused.
        older = f"template-code-interpreter-v1-{'0' * 24}"
        await stored.put(older, {"kind": "template", "template_id": "code-interpreter-v1"})
        assert await disks.collect(DAY, now) == []
        await _delete(snapstore, older)
        # cc: the disk of a capture gone (dropped as outdated); dd: pushed a minute ago, its
        # capture may be on its way.
        assert await disks.collect(DAY, now) == ["guest-disk-cc"]
    finally:
        await persistence.close()  # waits for the deletes
    check = SnapshotPersistence(snapstore)
    try:
        assert await check.manifests() == {
            f"template-base-{'2' * 24}", f"template-web-{'1' * 24}", "template-web",
            "guest-disk-aa", "guest-disk-bb", "guest-disk-dd", "guest-disk-ff"}
    finally:
        await check.close()


class _Stored:
    """Manifests put into snapstore with the labels given (their one file is a dummy)."""

    def __init__(self, persistence: SnapshotPersistence, tmp: Path) -> None:
        self._persistence = persistence
        self._file = tmp / "dummy"
        self._file.write_bytes(b"x")

    async def put(self, manifest: str, labels: dict[str, str]) -> None:
        async def files() -> dict[str, Path]:
            return {"file": self._file}

        async def done() -> None:
            pass

        self._persistence.push_soon(manifest, files, done, labels)
        await self._persistence.persisted(manifest)


async def _delete(snapstore: str, manifest: str) -> None:
    async with grpc.aio.insecure_channel(snapstore) as channel:
        await snapstore_stub(channel).DeleteManifest(
            pb.DeleteManifestRequest(snapshot_id=manifest))
