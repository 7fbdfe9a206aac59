"""Step layers' keys and index: builds that begin alike share their first keys; the newest
layer kept over the same rootfs is found; a key built again gets a new file, never the old one
replaced (templates stand on it)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from aenv_nodeagent.templates.layers import StepLayers, layer_keys
from aenv_nodeagent.templates.recipe import Recipe
from aenv_nodeagent.templates.steps import GuestDefaults

from ..fakes.templates import FakeTemplates


def test_builds_that_begin_alike_share_their_first_keys(tmp_path: Path) -> None:
    base = FakeTemplates(tmp_path)
    base.add("t")
    inputs = base.inputs("t")

    def keys(*commands: str) -> list[str]:
        recipe = Recipe.from_e2b({"steps": [{"type": "RUN", "args": [c]} for c in commands]})
        return layer_keys(dataclasses.replace(inputs, recipe=recipe))

    one, two = keys("a", "b", "c"), keys("a", "b", "z")
    assert len(one) == 4 and one[:3] == two[:3] and one[3] != two[3]
    assert keys("b", "a")[1] != one[1]  # order matters
    other_rootfs = dataclasses.replace(inputs, rootfs=dataclasses.replace(
        inputs.rootfs, digest="another"))
    assert layer_keys(other_rootfs)[0] != one[0]


def test_the_newest_layer_over_the_same_rootfs_is_found(tmp_path: Path) -> None:
    layers = StepLayers(tmp_path / "layers")
    rootfs = tmp_path / "rootfs.img"
    keys = ["k0", "k1", "k2"]
    assert layers.newest_cached(keys, rootfs) is None
    for key in keys[:2]:
        disk = layers.new_disk(key)
        disk.write_bytes(b"layer")
        layers.index(key, disk, GuestDefaults(workdir=f"/{key}"), rootfs)
    found = layers.newest_cached(keys, rootfs)
    assert found is not None and found[0] == 1 and found[1].defaults.workdir == "/k1"
    assert layers.newest_cached(keys, tmp_path / "elsewhere.img") is None

    again = layers.new_disk("k1")
    again.write_bytes(b"rebuilt")
    first = found[1].disk
    layers.index("k1", again, GuestDefaults(), rootfs)
    newest = layers.newest_cached(keys, rootfs)
    assert newest is not None and newest[1].disk == again and first.read_bytes() == b"layer"
