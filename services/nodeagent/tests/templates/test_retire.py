"""Templates the catalog retired leave the node: registration, saved inputs, captured snapshot
and warm VMs go — but not while something stands on the template, never one without the mark
(a missing record is no reason), and nothing when the marks cannot be read."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from aenv_common.errors import Unavailable
from aenv_nodeagent.artifacts import RootfsImage
from aenv_nodeagent.templates.model import META_FILE, TemplateInputs, snapshot_dir
from aenv_nodeagent.templates.retire import Retired, RetiredTemplates
from aenv_nodeagent.templates.saved import SavedTemplates
from aenv_nodeagent.templates.store import TemplateStore

from ..fakes.templates import FakeTemplates


class Node:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.bases = root / "images" / "bases"
        none: Any = None  # the sweep only reads and removes what is on disk
        self.store = TemplateStore(root / "templates", none, none, none, none,
                                   boot_timeout_s=1, boot_attempts=1)
        fake = FakeTemplates(root / "fake")
        fake.add("model")
        self.defaults = fake.inputs("model")
        self.saved = SavedTemplates(root / "templates" / "built", self.defaults)
        self.retired_ids: set[str] = set()
        self.in_use: set[str] = set()
        self.forgotten: list[str] = []

    def template(self, template_id: str, image: str) -> TemplateInputs:
        """Built here from `image`, captured and saved."""
        rootfs = self.bases / image / "rootfs.qcow2"
        rootfs.parent.mkdir(parents=True, exist_ok=True)
        rootfs.touch()
        inputs = dataclasses.replace(self.defaults, template_id=template_id,
                                     rootfs=RootfsImage(rootfs, image, ()))
        directory = snapshot_dir(self.store.root, inputs)
        directory.mkdir(parents=True)
        (directory / META_FILE).write_text(json.dumps({
            "template_id": template_id, "directory": str(directory), "vcpus": 1,
            "memory_mib": 128, "disk_mib": 64, "accelerator": "tcg", "kernel_version": "k",
            "artifacts_digest": "d", "envd_version": "0.9.0", "boot_seconds": 1.0}))
        self.store.register(inputs)
        self.saved.save(inputs)
        return inputs

    def retired(self, marks: Retired | None = None) -> RetiredTemplates:
        async def listed() -> set[str]:
            return set(self.retired_ids)

        async def forget(template_id: str, disk: Path) -> None:
            self.forgotten.append(template_id)

        return RetiredTemplates(self.store, self.saved, marks or listed,
                                lambda: set(self.in_use), forget)

    def has(self, template_id: str) -> bool:
        return self.store.has(template_id) or self.saved.path(template_id).exists() or \
            (self.store.root / template_id).exists()


async def test_retired_templates_go_once_nothing_stands_on_them(tmp_path: Path) -> None:
    node = Node(tmp_path)
    gone = node.template("gone", "image-a")
    node.template("kept", "image-a")
    node.template("busy", "image-b")
    node.template("unmarked", "image-c")  # another cluster's, sharing this folder, say
    node.retired_ids = {"gone", "busy", "never-here"}
    node.in_use = {"busy"}
    retired = node.retired()

    assert await retired.sweep() == ["gone"]
    assert node.forgotten == ["gone"]
    assert not node.has("gone")
    assert gone.rootfs.path.exists()  # kept by digest: "kept" stands on it too
    assert all(node.has(t) for t in ("kept", "busy", "unmarked"))

    node.in_use = set()  # its last sandbox went away
    assert await retired.sweep() == ["busy"]
    assert not node.has("busy") and node.has("kept") and node.has("unmarked")
    assert await retired.sweep() == []


async def test_nothing_goes_when_the_records_cannot_be_read(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.template("any", "image-a")

    async def unreadable() -> set[str]:
        raise Unavailable("etcd unavailable")

    with pytest.raises(Unavailable):
        await node.retired(unreadable).sweep()
    assert node.has("any") and node.forgotten == []
