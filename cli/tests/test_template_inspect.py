"""`aenv template inspect` over the fake server (`pull` is in test_template_commands.py)."""

from __future__ import annotations

import json

import yaml
from aenv_cli_fake_server import FakeServer, fake_clients, invoke

TEMPLATE = {"templateID": "tpl1", "names": ["py312"], "cpuCount": 2, "memoryMB": 512,
            "builds": [{"buildID": "b1", "status": "ready"}]}


def test_inspect_by_id_and_by_name() -> None:
    server = FakeServer(templates={"tpl1": TEMPLATE})
    by_id = invoke(fake_clients(server), "template", "inspect", "tpl1")
    assert by_id.exit_code == 0 and json.loads(by_id.stdout) == TEMPLATE
    by_name = invoke(fake_clients(server), "template", "inspect", "py312", "-o", "yaml")
    assert yaml.safe_load(by_name.stdout) == TEMPLATE


def test_an_unknown_template_is_one_line() -> None:
    result = invoke(fake_clients(FakeServer()), "template", "inspect", "nope")
    assert result.exit_code == 1 and result.stderr == "error: template 'nope' not found\n"
