"""`$AENV_HOME/platform.json`: the ports a running platform listens on, so `aenv status`,
`aenv sandbox` and the tests find it without being told. Holds no secret."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from aenv_cli.ports import PlatformPorts

STATE_FILE = "platform.json"


def save_ports(home: Path, ports: PlatformPorts) -> None:
    path = home / STATE_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"ports": asdict(ports)}, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def load_ports(home: Path) -> PlatformPorts:
    """The ports of the last platform started on `home`; the defaults when there was none."""
    try:
        data = json.loads((home / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return PlatformPorts()
    return PlatformPorts(**data["ports"])
