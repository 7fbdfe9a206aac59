"""Templates through snapstore (a real one, in process) between two nodes' template folders:
what one shares, the other pulls on first ask — its rootfs placed by digest when the recorded
path is not on this host, its snapshot re-pointed at that rootfs; nothing left in staging. A
built-in template's capture goes with the disks it was made on, for nodes whose own differ."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import grpc

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.snapshots import snapstore_stub
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence
from aenv_nodeagent.templates.disk_files import BACKING_FILE, DISKS_FILE
from aenv_nodeagent.templates.distribution import (
    TemplateDistribution,
    snapshot_manifest,
)
from aenv_nodeagent.templates.guest_disks import PULLED_DISKS_DIR, disk_digests, disk_manifest
from aenv_nodeagent.templates.model import (
    BASE_TEMPLATE,
    DISK_FILE,
    TemplateInputs,
    TemplateSnapshot,
    backed_inputs,
    load_snapshot,
    snapshot_dir,
    with_disks,
)
from aenv_nodeagent.templates.saved import SavedTemplates

from ..fakes.templates import FakeTemplates


def _backing_of(disk: Path) -> str:
    info = subprocess.run(["qemu-img", "info", "--output=json", str(disk)],
                          capture_output=True, check=True, text=True).stdout
    backing: str = json.loads(info)["backing-filename"]
    return backing


def _built_at(node: Path, made: Path, template_id: str = "web") -> tuple[
        TemplateInputs, SavedTemplates, TemplateSnapshot]:
    """A template built and captured on the node of folder `node`, saved there."""
    source = FakeTemplates(made)
    snapshot = source.add(template_id)
    inputs = source.inputs(template_id)
    saved = SavedTemplates(node / "built", inputs)
    saved.save(inputs)
    # The node's own snapshot folder layout (keyed by the inputs), as TemplateStore keeps it.
    keyed = snapshot_dir(node, inputs)
    keyed.parent.mkdir(parents=True)
    snapshot.directory.rename(keyed)
    (keyed / "template.json").write_text(json.dumps({
        "template_id": template_id, "directory": str(keyed), "vcpus": 1, "memory_mib": 128,
        "disk_mib": 64, "accelerator": snapshot.accelerator,
        "kernel_version": snapshot.kernel_version, "artifacts_digest": snapshot.artifacts_digest,
        "envd_version": "0.9.0", "boot_seconds": 1.5}))
    captured = load_snapshot(keyed)
    assert captured is not None
    return inputs, saved, captured


async def test_a_shared_template_is_pulled_with_its_rootfs_and_snapshot(
    tmp_path: Path, snapstore: str,
) -> None:
    inputs, saved_a, captured = _built_at(tmp_path / "a", tmp_path / "made")

    pushing = SnapshotPersistence(snapstore)
    pulling = SnapshotPersistence(snapstore)
    try:
        TemplateDistribution(pushing, tmp_path / "a", saved_a).share_soon(inputs, captured)
        await TemplateDistribution(pushing, tmp_path / "a", saved_a).shared("web", inputs.key())
        await pushing.persisted(f"template-web-{inputs.key()}")
        inputs.rootfs.path.unlink()  # another host: the recorded rootfs path is not here

        node_b = tmp_path / "b"
        # The same artifacts, accelerator and sizes: the snapshot fits node b.
        saved_b = SavedTemplates(node_b / "built", inputs)
        distribution = TemplateDistribution(pulling, node_b, saved_b)
        pulled = await distribution.fetch("web")
        assert pulled is not None and pulled.recipe == inputs.recipe
        assert pulled.rootfs.path == node_b / "rootfs" / "rootfs-digest"
        assert pulled.rootfs.path.is_file()
        local = load_snapshot(snapshot_dir(node_b, pulled))
        assert local is not None and local.boot_seconds == 1.5
        assert _backing_of(local.directory / DISK_FILE) == str(pulled.rootfs.path)
        assert saved_b.path("web").is_file()
        assert not list(node_b.glob(".pull-*"))
        assert await distribution.fetch("never-shared") is None
    finally:
        await pushing.close()
        await pulling.close()


async def test_a_built_template_is_pulled_with_the_tools_disk_it_was_captured_on(
    tmp_path: Path, snapstore: str,
) -> None:
    inputs, saved_a, captured = _built_at(tmp_path / "a", tmp_path / "made")
    inputs.rootfs.path.write_bytes(b"the base disk node a made from the image")
    inputs.artifacts.tools_disk.write_bytes(b"node a's tools disk")
    persistence = SnapshotPersistence(snapstore)
    try:
        a = TemplateDistribution(persistence, tmp_path / "a", saved_a)
        a.share_soon(inputs, captured)
        await a.shared("web", inputs.key())
        digests = await disk_digests(inputs)
        assert (await persistence.labels(f"template-web-{inputs.key()}")).items() >= (
            digests.items())

        # Node b built its tools disk from the same inputs: other bytes.
        (tmp_path / "b-tools.img").write_bytes(b"node b's tools disk")
        own = with_disks(inputs, inputs.rootfs.path, tmp_path / "b-tools.img")
        node_b = tmp_path / "b"
        b = TemplateDistribution(persistence, node_b, SavedTemplates(node_b / "built", own))
        pulled = await b.fetch("web")
        assert pulled is not None and pulled.artifacts.tools_disk == tmp_path / "b-tools.img"
        directory = snapshot_dir(node_b, pulled)
        assert load_snapshot(directory) is not None  # a's capture: b need not run the recipe
        on = backed_inputs(pulled, directory)
        assert on.artifacts.tools_disk.parent == node_b / PULLED_DISKS_DIR
        assert on.artifacts.tools_disk.read_bytes() == b"node a's tools disk"
        assert on.rootfs.path == pulled.rootfs.path  # the rootfs came with the inputs
        assert not list(node_b.glob(".pull-*"))
    finally:
        await persistence.close()


async def test_a_capture_is_not_pulled_onto_a_rootfs_of_other_bytes(
    tmp_path: Path, snapstore: str,
) -> None:
    inputs, saved_a, captured = _built_at(tmp_path / "a", tmp_path / "made")
    inputs.rootfs.path.write_bytes(b"the base disk node a made from the image")
    persistence = SnapshotPersistence(snapstore)
    try:
        TemplateDistribution(persistence, tmp_path / "a", saved_a).share_soon(inputs, captured)
        await TemplateDistribution(persistence, tmp_path / "a", saved_a).shared(
            "web", inputs.key())
        # Another host made its base disk from the same image, at the same path: other bytes.
        inputs.rootfs.path.write_bytes(b"the same image, made into a disk again")

        node_b = tmp_path / "b"
        distribution = TemplateDistribution(persistence, node_b,
                                            SavedTemplates(node_b / "built", inputs))
        pulled = await distribution.fetch("web")
        assert pulled is not None and pulled.rootfs.path == inputs.rootfs.path
        # The template is known, its capture is not taken: b captures its own on first use.
        assert load_snapshot(snapshot_dir(node_b, pulled)) is None
        assert not await distribution.fetch_snapshot(pulled)
        assert not list(node_b.glob(".pull-*"))
    finally:
        await persistence.close()


async def test_a_push_a_stop_cut_short_is_resumed_at_the_next_start(
    tmp_path: Path, snapstore: str,
) -> None:
    inputs, saved, _ = _built_at(tmp_path / "a", tmp_path / "made")
    other, _, _ = _built_at(tmp_path / "a", tmp_path / "made-other", "other-clusters")
    persistence = SnapshotPersistence(snapstore)
    try:
        distribution = TemplateDistribution(persistence, tmp_path / "a", saved)

        async def known() -> set[str]:
            return {"web"}  # "other-clusters" has no record here: never pushed from here

        assert await distribution.resume([inputs, other], known) == ["web"]
        await distribution.shared("web", inputs.key())
        tools = disk_manifest((await disk_digests(inputs))["tools_disk"])
        assert await persistence.manifests() == {
            "template-web", f"template-web-{inputs.key()}", tools}
        assert await distribution.resume([inputs, other], known) == []  # in the store now
    finally:
        await persistence.close()


async def test_a_builtin_capture_travels_with_the_disks_it_was_made_on(
    tmp_path: Path, snapstore: str,
) -> None:
    inputs, _, captured = _built_at(tmp_path / "a", tmp_path / "made", BASE_TEMPLATE)
    inputs.rootfs.path.write_bytes(b"the rootfs node a built")
    # Node c built its disks from the same inputs: other bytes (mkfs UUIDs, timestamps).
    (tmp_path / "c-rootfs.qcow2").write_bytes(b"the rootfs built again, other timestamps")
    (tmp_path / "c-tools.img").write_bytes(b"the tools disk built again")
    other_disks = with_disks(inputs, tmp_path / "c-rootfs.qcow2", tmp_path / "c-tools.img")
    persistence = SnapshotPersistence(snapstore)
    try:
        def node(name: str) -> TemplateDistribution:
            return TemplateDistribution(persistence, tmp_path / name,
                                        SavedTemplates(tmp_path / name / "built", inputs))

        a = node("a")
        a.share_builtin_soon(inputs, captured)
        a.share_builtin_soon(inputs, captured)  # checked once a run
        await a.builtins_shared()
        digests = await disk_digests(inputs)
        manifest = snapshot_manifest(BASE_TEMPLATE, inputs.key())
        disks = {disk_manifest(digests["rootfs"]), disk_manifest(digests["tools_disk"])}
        assert await persistence.manifests() == {manifest, *disks}
        assert (await persistence.labels(manifest)).items() >= digests.items()

        # Node b's disks are a's bytes: the capture alone, on b's own disks.
        b = node("b")
        assert await b.fetch_builtin(inputs) == inputs
        pulled = load_snapshot(snapshot_dir(tmp_path / "b", inputs))
        assert pulled is not None and pulled.boot_seconds == 1.5  # a's capture
        assert _backing_of(pulled.disk) == str(inputs.rootfs.path)
        assert not (pulled.directory / DISKS_FILE).exists()
        assert not (pulled.directory / BACKING_FILE).exists()
        assert not (tmp_path / "b" / PULLED_DISKS_DIR).exists()
        b.share_builtin_soon(inputs, pulled)  # snapstore has it: nothing pushed again
        await b.builtins_shared()
        assert await persistence.manifests() == {manifest, *disks}

        # Node c: a's capture with a's disks, which it restores on (also after a restart).
        c = node("c")
        on = await c.fetch_builtin(other_disks)
        assert on is not None and on.key() == inputs.key()
        assert on.rootfs.path.parent == on.artifacts.tools_disk.parent == (
            tmp_path / "c" / PULLED_DISKS_DIR)
        assert on.rootfs.path.read_bytes() == inputs.rootfs.path.read_bytes()
        assert on.artifacts.tools_disk.read_bytes() == inputs.artifacts.tools_disk.read_bytes()
        directory = snapshot_dir(tmp_path / "c", on)
        assert _backing_of(directory / DISK_FILE) == str(on.rootfs.path)
        assert backed_inputs(other_disks, directory) == on
        assert await disk_digests(on) == digests
        assert not list((tmp_path / "c").glob(".pull-*"))

        # Node d lacks a's disks and snapstore holds other bytes under one's name: refused.
        await _replace(persistence, snapstore, disk_manifest(digests["tools_disk"]),
                       tmp_path / "forged", b"not the tools disk")
        d = node("d")
        assert await d.fetch_builtin(other_disks) is None
        assert load_snapshot(snapshot_dir(tmp_path / "d", other_disks)) is None
        placed = {path.name for path in (tmp_path / "d" / PULLED_DISKS_DIR).iterdir()}
        rootfs_name = digests["rootfs"].replace(":", "-")
        assert placed == {rootfs_name, rootfs_name + ".sha256"}  # the good one is kept
        # ... and lacks one: refused (d captures its own); a's next run pushes it again.
        await _delete(snapstore, disk_manifest(digests["tools_disk"]))
        assert await d.fetch_builtin(other_disks) is None
        again = node("a")
        again.share_builtin_soon(inputs, captured)
        await again.builtins_shared()
        await persistence.persisted(disk_manifest(digests["tools_disk"]))
        assert await persistence.manifests() == {manifest, *disks}
        assert await d.fetch_builtin(other_disks) is not None

        # Templates built by users travel with their inputs (share_soon), not this way.
        web, _, web_captured = _built_at(tmp_path / "a", tmp_path / "made-web")
        a.share_builtin_soon(web, web_captured)
        await a.builtins_shared()
        assert await persistence.manifests() == {manifest, *disks}
    finally:
        await persistence.close()


async def _delete(snapstore: str, manifest: str) -> None:
    async with grpc.aio.insecure_channel(snapstore) as channel:
        await snapstore_stub(channel).DeleteManifest(
            pb.DeleteManifestRequest(snapshot_id=manifest))


async def _replace(persistence: SnapshotPersistence, snapstore: str, manifest: str, tmp: Path,
                   content: bytes) -> None:
    """`manifest` in snapstore holding a file of `content` instead."""
    tmp.mkdir()
    (tmp / "disk").write_bytes(content)

    async def files() -> dict[str, Path]:
        return {"disk": tmp / "disk"}

    async def done() -> None:
        pass

    await _delete(snapstore, manifest)
    persistence.push_soon(manifest, files, done, {})
    await persistence.persisted(manifest)
