"""A node's template files (template.json, backing.json, disks.json, its saved inputs and the
step-layer index): each format-1 file read as today's agents wrote it, a newer format refused
by name, a round trip keeps every field."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from aenv_common.state_files import NewerStateFormat, UnknownStateFields
from aenv_nodeagent.templates.disk_files import (
    BACKING_FILE,
    DISKS_FILE,
    read_backing,
    read_digests,
    write_backing,
    write_digests,
)
from aenv_nodeagent.templates.layers import StepLayers
from aenv_nodeagent.templates.model import (
    META_FILE,
    TemplateInputs,
    TemplateSnapshot,
    backed_inputs,
    load_snapshot,
    save_snapshot,
)
from aenv_nodeagent.templates.recipe import Recipe
from aenv_nodeagent.templates.saved import SavedTemplates
from aenv_nodeagent.templates.steps import GuestDefaults
from tests.state_files.fixtures import newer, old_file

from ..fakes.templates import FakeTemplates


def _inputs(root: Path) -> TemplateInputs:
    templates = FakeTemplates(root)
    templates.add("base")
    return templates.inputs("base")


REFUSAL = "is format 2; this node agent reads formats up to 1: upgrade the node agent"


def _refused(path: Path) -> str:
    return re.escape(f"{path} {REFUSAL}")


def test_template_json_of_an_older_agent_is_read_and_a_round_trip_keeps_it(
        tmp_path: Path) -> None:
    old_file(META_FILE, tmp_path)
    snapshot = load_snapshot(tmp_path)
    assert snapshot == TemplateSnapshot("base", tmp_path, 2, 512, 1024, "tcg", "6.1.0", "digest1",
                                        "0.1.0", 3.25, "root", "/root", {"A": "1"})
    moved = tmp_path / "moved"
    moved.mkdir()
    save_snapshot(dataclasses.replace(snapshot, directory=moved), moved)
    assert json.loads((moved / META_FILE).read_text())["format"] == 1
    assert load_snapshot(moved) == dataclasses.replace(snapshot, directory=moved)


def test_template_json_of_a_newer_format_or_unknown_field_is_refused(tmp_path: Path) -> None:
    meta = newer(old_file(META_FILE, tmp_path), fmt=2)
    with pytest.raises(NewerStateFormat, match=_refused(meta)):
        load_snapshot(tmp_path)
    newer(meta, fmt=1, default_shell="zsh")
    with pytest.raises(UnknownStateFields, match="default_shell"):
        load_snapshot(tmp_path)


def test_backing_json_of_an_older_agent_moves_the_template_onto_its_disks(
        tmp_path: Path) -> None:
    inputs = _inputs(tmp_path / "made")
    old_file(BACKING_FILE, tmp_path)
    on = backed_inputs(inputs, tmp_path)
    assert on.rootfs.path == Path("/var/lib/aenv/templates/disks/r1")
    assert on.artifacts.tools_disk == Path("/var/lib/aenv/templates/disks/t1")
    assert backed_inputs(inputs, tmp_path / "none") is inputs  # no file: its own disks


def test_backing_and_disks_round_trip_and_refuse_a_newer_format(tmp_path: Path) -> None:
    paths = {"rootfs": tmp_path / "r", "tools_disk": tmp_path / "t"}
    write_backing(tmp_path, paths)
    assert read_backing(tmp_path) == paths
    write_digests(tmp_path / DISKS_FILE, {"tools_disk": "sha256:2", "rootfs": "sha256:1"})
    assert read_digests(tmp_path / DISKS_FILE) == {"rootfs": "sha256:1", "tools_disk": "sha256:2"}
    for path in (newer(tmp_path / BACKING_FILE, fmt=2), newer(tmp_path / DISKS_FILE, fmt=2)):
        with pytest.raises(NewerStateFormat, match=_refused(path)):
            read_backing(tmp_path) if path.name == BACKING_FILE else read_digests(path)


def test_disks_json_of_an_older_agent_is_read_and_a_disk_it_does_not_know_refused(
        tmp_path: Path) -> None:
    path = old_file(DISKS_FILE, tmp_path)
    assert read_digests(path) == {"rootfs": "sha256:aaa", "tools_disk": "sha256:bbb"}
    newer(path, fmt=1, data_disk="sha256:ccc")
    with pytest.raises(UnknownStateFields, match="data_disk"):
        read_digests(path)


def test_saved_inputs_of_an_older_agent_are_read_and_a_round_trip_keeps_them(
        tmp_path: Path) -> None:
    defaults = _inputs(tmp_path / "made")
    saved = SavedTemplates(tmp_path / "built", defaults)
    (tmp_path / "built").mkdir()
    old_file("inputs.json", tmp_path / "built", as_name="tpl-old1.json")
    [inputs] = saved.load_all()
    assert (inputs.template_id, inputs.rootfs.digest, inputs.vcpus, inputs.memory_mib,
            inputs.disk_mib) == ("tpl-old1", "abc", 2, 1024, 4096)
    assert inputs.rootfs.path == Path("/var/lib/aenv/templates/rootfs/abc.ext4")
    assert (inputs.recipe.start_cmd, [s.args for s in inputs.recipe.steps]) == (
        "sleep 1", [("echo hi",)])
    saved.save(dataclasses.replace(inputs, template_id="tpl-2", vcpus=4,
                                   recipe=Recipe.from_e2b({"startCmd": "run"})))
    assert json.loads(saved.path("tpl-2").read_text())["format"] == 1
    again = {i.template_id: i for i in saved.load_all()}["tpl-2"]
    assert again == dataclasses.replace(inputs, template_id="tpl-2", vcpus=4,
                                        recipe=Recipe.from_e2b({"startCmd": "run"}))
    newer(saved.path("tpl-2"), fmt=2)
    with pytest.raises(NewerStateFormat, match=_refused(saved.path("tpl-2"))):
        saved.load_all()


def test_the_step_layer_index_of_an_older_agent_is_read_and_a_newer_hint_ignored(
        tmp_path: Path) -> None:
    (tmp_path / "k1-0a0b0c0d.qcow2").write_bytes(b"layer")
    index = old_file("step-layer.json", tmp_path, as_name="k1.json")
    layers = StepLayers(tmp_path)
    rootfs = Path("/var/lib/aenv/rootfs.ext4")
    found = layers.newest_cached(["k1"], rootfs)
    assert found is not None
    assert (found[1].disk.name, found[1].defaults) == (
        "k1-0a0b0c0d.qcow2", GuestDefaults("root", "/app", {"X": "y"}))
    newer(index, fmt=1, compressed=True)  # a newer agent's hint
    assert layers.newest_cached(["k1"], rootfs) == found
    again = layers.index("k2", tmp_path / "k1-0a0b0c0d.qcow2", GuestDefaults("u", "/w"), rootfs)
    assert layers.newest_cached(["k2"], rootfs) == (0, again)
    newer(index, fmt=2)
    with pytest.raises(NewerStateFormat, match=_refused(index)):
        layers.newest_cached(["k1"], rootfs)
