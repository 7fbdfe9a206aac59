"""`sandbox.json` (a paused sandbox): the format-1 file read, a newer one refused, a round trip
keeps every field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.state_files import NewerStateFormat, UnknownStateFields
from aenv_nodeagent.sandbox.model import PAUSED_MARKER, Chain, Paused
from tests.state_files.fixtures import newer, old_file


def test_an_older_agents_file_is_read(tmp_path: Path) -> None:
    paused = Paused.read(old_file(PAUSED_MARKER, tmp_path))
    assert (paused.record.sandbox_id, paused.record.node_id) == ("sbx-old1", "node-a")
    assert dict(paused.record.metadata) == {"team": "rl"}
    assert paused.chain == Chain("base", ["layer-aaaa", "layer-bbbb"], "layer-cccc.active.qcow2")
    assert paused.directory == tmp_path


def test_a_round_trip_keeps_every_field_and_writes_the_format(tmp_path: Path) -> None:
    record = cluster_pb2.SandboxRecord(sandbox_id="sbx-1", template_id="t", node_id="n",
                                       metadata={"k": "v"}, paused_image="img-1")
    chain = Chain("t", ["layer-2", "layer-1"], "layer-3.active.qcow2")
    Paused(record, tmp_path, chain).save()
    assert json.loads((tmp_path / PAUSED_MARKER).read_text())["format"] == 1
    again = Paused.read(tmp_path / PAUSED_MARKER)
    assert (again.record, again.chain, again.directory) == (record, chain, tmp_path)
    assert (tmp_path / PAUSED_MARKER).stat().st_mode & 0o777 == 0o600  # the record's token


def test_a_newer_format_is_refused_by_name(tmp_path: Path) -> None:
    marker = newer(old_file(PAUSED_MARKER, tmp_path), fmt=2)
    with pytest.raises(NewerStateFormat, match=re.escape(
            f"{marker} is format 2; this node agent reads formats up to 1: "
            "upgrade the node agent")):
        Paused.read(marker)


def test_a_field_this_agent_does_not_know_is_refused(tmp_path: Path) -> None:
    marker = newer(old_file(PAUSED_MARKER, tmp_path), fmt=1, top_node="ovl3")
    with pytest.raises(UnknownStateFields, match="top_node"):
        Paused.read(marker)
