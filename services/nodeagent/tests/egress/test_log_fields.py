"""No log call of the node agent passes a field LogRecord already has (`name`, `msg`, ...):
`logging` raises KeyError for it, and only when the level is enabled — the egress resolver's
`extra={"name": ...}` answered nothing at all once the platform ran at DEBUG."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import aenv_nodeagent

RESERVED = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}
PACKAGE = Path(aenv_nodeagent.__file__).parent


def clashing_fields(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        for keyword in node.keywords:
            if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                found += [(node.lineno, key.value) for key in keyword.value.keys
                          if isinstance(key, ast.Constant) and key.value in RESERVED]
    return found


def test_the_check_finds_a_clash() -> None:
    assert clashing_fields('log.debug("q", extra={"netns": n, "name": q})') == [(1, "name")]


def test_no_log_call_of_the_node_agent_overwrites_a_record_field() -> None:
    clashes = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (found := clashing_fields(path.read_text()))
    }
    assert clashes == {}
