"""The bounds on what builds leave (image blobs, base disks, step layers) and on pulled rootfs
files: least recently used first, never what a registered or captured template stands on (read
from real qcow2 chains), never what was used just now."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from aenv_nodeagent.artifacts import RootfsImage
from aenv_nodeagent.templates.bounds import (
    Bounded,
    BuildCacheSizes,
    Entry,
    build_cache_bounds,
    chain_of,
)
from aenv_nodeagent.templates.model import META_FILE, snapshot_dir
from aenv_nodeagent.templates.store import TemplateStore

from ..fakes.templates import FakeTemplates

OLD = time.time() - 7200


def _qcow2(path: Path, backing: Path | None = None, *, old: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    args = ["-b", str(backing), "-F", "qcow2"] if backing is not None else []
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", *args, str(path), "64M"],
                   check=True)
    if old:
        os.utime(path, (OLD, OLD))
    return path


def _captured_at(directory: Path, backing: Path) -> None:
    """A captured template's folder, its disk standing on `backing`."""
    _qcow2(directory / "disk.qcow2", backing)
    (directory / META_FILE).write_text(json.dumps({
        "template_id": directory.parent.name, "directory": str(directory), "vcpus": 1,
        "memory_mib": 128, "disk_mib": 64, "accelerator": "tcg", "kernel_version": "k",
        "artifacts_digest": "d", "envd_version": "0.9.0", "boot_seconds": 1.0}))


def test_a_disk_chain_is_read_from_the_qcow2_headers(tmp_path: Path) -> None:
    base = _qcow2(tmp_path / "base.qcow2")
    middle = _qcow2(tmp_path / "layers" / "middle.qcow2", base)
    top = _qcow2(tmp_path / "top.qcow2", middle)
    assert chain_of(top) == [top, middle, base]
    (tmp_path / "raw").write_bytes(b"not qcow2")
    assert chain_of(tmp_path / "raw") == [tmp_path / "raw"]


def test_the_least_recently_used_go_first_and_what_is_kept_stays(tmp_path: Path) -> None:
    entries = [Entry(tmp_path / name, 100, used) for name, used in
               (("newest", time.time()), ("old", OLD), ("older", OLD - 10), ("kept", OLD - 20))]
    removed: list[Path] = []
    bound = Bounded("test", 150, lambda: entries, lambda: {tmp_path / "kept"}, removed.append,
                    min_idle_s=600)
    assert bound.trim() == [tmp_path / "older", tmp_path / "old"]
    assert removed == [tmp_path / "older", tmp_path / "old"]


def test_the_node_bounds_keep_what_templates_stand_on(tmp_path: Path) -> None:
    images, layers = tmp_path / "images", tmp_path / "templates" / "layers"
    blobs = images / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for name, used in (("a" * 64, OLD), ("b" * 64, time.time())):
        (blobs / name).write_bytes(os.urandom(8192))
        os.utime(blobs / name, (used, used))
    registered = _qcow2(images / "bases" / "registered" / "rootfs.qcow2")
    under_capture = _qcow2(images / "bases" / "captured" / "rootfs.qcow2")
    unused = _qcow2(images / "bases" / "unused" / "rootfs.qcow2")
    fresh = _qcow2(images / "bases" / "fresh" / "rootfs.qcow2", old=False)
    used_layer = _qcow2(layers / "k1-0001.qcow2", under_capture)
    stale_layer = _qcow2(layers / "k2-0002.qcow2", unused)
    (layers / "k2.json").write_text(json.dumps({"disk": stale_layer.name}))

    none: Any = None
    store = TemplateStore(tmp_path / "templates", none, none, none, none,
                          boot_timeout_s=1, boot_attempts=1)
    fake = FakeTemplates(tmp_path / "fake")
    fake.add("model")
    store.register(dataclasses.replace(fake.inputs("model"), template_id="built",
                                       rootfs=RootfsImage(registered, "d", ())))
    # A captured template this node has not registered (another node of the host made it).
    captured = dataclasses.replace(fake.inputs("model"), template_id="other",
                                   rootfs=RootfsImage(under_capture, "d2", ()))
    _captured_at(snapshot_dir(store.root, captured), used_layer)

    stale_top = _qcow2(layers / "k3-0003.qcow2", stale_layer)

    # Rootfs files pulled from snapstore: a registered template's, one a capture stands on.
    pulled = tmp_path / "templates" / "rootfs"
    pulled_registered = _qcow2(pulled / "sha256-registered")
    pulled_under_capture = _qcow2(pulled / "sha256-captured")
    pulled_unused = _qcow2(pulled / "sha256-unused")
    pulled_fresh = _qcow2(pulled / "sha256-fresh", old=False)
    (pulled / "sha256-unused.sha256").write_text("65536 1 sha256:00")  # its digest, kept by it
    store.register(dataclasses.replace(fake.inputs("model"), template_id="pulled",
                                       rootfs=RootfsImage(pulled_registered, "d3", ())))
    on_pulled = dataclasses.replace(captured, template_id="other-pulled",
                                    rootfs=RootfsImage(pulled_under_capture, "d4", ()))
    _captured_at(snapshot_dir(store.root, on_pulled), pulled_under_capture)

    bounds = build_cache_bounds(store, images, tmp_path / "templates",
                                BuildCacheSizes(0, 0, 0, 0))
    # Only what nothing stands on goes: the stale chain's top first, its base disk last.
    assert [b.trim() for b in bounds] == [[blobs / ("a" * 64)], [], [stale_top], [pulled_unused]]
    assert [b.trim() for b in bounds] == [[], [], [stale_layer], []]
    assert not (layers / "k2.json").exists()
    assert [b.trim() for b in bounds] == [[], [unused.parent], [], []]
    for kept in (blobs / ("b" * 64), registered, under_capture, fresh, used_layer,
                 pulled_registered, pulled_under_capture, pulled_fresh):
        assert kept.exists()
    assert sorted(p.name for p in pulled.iterdir()) == [
        "sha256-captured", "sha256-fresh", "sha256-registered"]
