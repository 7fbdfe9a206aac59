"""The gateway's rooms and the direction of their imports: the REST edge (rest/), the gRPC
edge (grpc/) and the dashboard (dashboard/) side by side, never importing each other; all over
the operations (core/), over API keys (keys/) and the clients to the rest of the cluster
(cluster/). Only the composition root (server.py, started by __main__.py) sees every room."""

from __future__ import annotations

import ast
from pathlib import Path

import aenv_gateway

PACKAGE = Path(aenv_gateway.__file__).parent
EDGES = {"rest", "grpc", "dashboard"}
# Each room and the rooms it must not import.
FORBIDDEN = {
    "rest": EDGES - {"rest"},
    "grpc": EDGES - {"grpc"},
    "dashboard": EDGES - {"dashboard"},
    "core": EDGES,
    "keys": EDGES | {"core", "cluster"},
    "cluster": EDGES | {"core", "keys"},
}


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "aenv_gateway" and len(parts) > 1 else None


def _imports(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def _violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        room = path.relative_to(PACKAGE).parts[0]
        for module in _imports(path):
            if _room(module) in FORBIDDEN.get(room, set()):
                found.append(f"{path.relative_to(PACKAGE)} imports {module}")
    return found


def test_imports_only_point_down() -> None:
    assert _violations() == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text("from aenv_gateway.rest.app import GatewayApp\nimport aenv_gateway.grpc\n")
    assert _imports(module) == {"aenv_gateway.rest.app", "aenv_gateway.grpc"}
    assert _room("aenv_gateway.rest.app") == "rest" and _room("grpc") is None


def test_every_module_lives_in_a_room_or_is_the_root() -> None:
    root = {"__init__.py", "__main__.py", "server.py", "config.py", "metrics.py"}
    loose = {p.name for p in PACKAGE.glob("*.py")} - root
    assert loose == set()
    assert {p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "rest", "grpc", "dashboard", "core", "keys", "cluster"}
