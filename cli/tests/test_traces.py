"""`aenv trace` on a synthetic span file shaped like the services' JSON-lines exports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aenv_cli_testkit import span_line as span
from aenv_cli_testkit import standin_env
from rich.console import Console

from aenv_cli.traces import find_traces, render_trace, spans_of_trace
from aenv_common.errors import NotFound
from aenv_common.telemetry import read_trace_files

CREATE = "0af7651916cd43dd8448eb211c80319c"
EXEC = "1bf7651916cd43dd8448eb211c80319d"
OTHER = "2cf7651916cd43dd8448eb211c80319e"


SPANS = {
    "gateway": [
        span(CREATE, "a1", None, "gateway", "POST /v2/sandboxes", 0, 42.0),
        span(EXEC, "e1", None, "gateway", "POST /process.Process/Start", 5000, 3.0,
             **{"sandbox.id": "sbx1"}),
        span(OTHER, "o1", None, "gateway", "GET /health", 10, 0.2),
    ],
    "scheduler": [
        span(CREATE, "b1", "a1", "scheduler", "place", 1.0, 2.5, **{"sandbox.id": "sbx1"}),
    ],
    "nodeagent": [
        span(CREATE, "c1", "a1", "nodeagent", "CreateSandbox", 4.0, 37.0,
             **{"sandbox.id": "sbx1"}),
        span(CREATE, "c3", "c1", "nodeagent", "restore", 9.0, 20.0),
        span(CREATE, "c2", "c1", "nodeagent", "pool", 4.5, 4.0),
        span(CREATE, "c4", "c1", "nodeagent", "envd ready", 29.5, 11.0),
    ],
}


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "traces"
    directory.mkdir()
    for service, spans in SPANS.items():
        lines = "".join(json.dumps(s) + "\n" for s in spans)
        (directory / f"{service}.jsonl").write_text(lines)
    return directory


def render(spans: list[dict[str, Any]]) -> str:
    console = Console(width=140, record=True, color_system=None)
    console.print(render_trace(spans))
    return console.export_text()


def test_sandbox_id_selects_its_create_trace_first(trace_dir: Path) -> None:
    spans = read_trace_files(trace_dir)
    assert find_traces(spans, "sbx1") == [CREATE, EXEC]
    assert find_traces(spans, OTHER) == [OTHER]
    with pytest.raises(NotFound):
        find_traces(spans, "nosuchsandbox")


def test_tree_shows_every_span_nested_with_offsets_and_durations(trace_dir: Path) -> None:
    text = render(spans_of_trace(read_trace_files(trace_dir), CREATE))
    lines = text.splitlines()
    assert CREATE in lines[0] and "42.0 ms total" in lines[0]
    names = ["POST /v2/sandboxes", "place", "CreateSandbox", "pool", "restore", "envd ready"]
    positions = [next(i for i, line in enumerate(lines) if name in line) for name in names]
    assert positions == sorted(positions)  # parents before children, children by start
    restore = lines[positions[4]]
    assert "+9.0 ms" in restore and "20.0 ms" in restore and "nodeagent" in restore
    indent = {name: lines[pos].index(name) for name, pos in zip(names, positions, strict=True)}
    assert indent["place"] > indent["POST /v2/sandboxes"]
    assert indent["restore"] > indent["CreateSandbox"]
    assert "GET /health" not in text and "Process/Start" not in text


def test_cli_trace_command(trace_dir: Path) -> None:
    home = trace_dir.parent
    run = subprocess.run(
        [sys.executable, "-m", "aenv_cli", "trace", "sbx1", "--home", str(home), "--all"],
        env={**standin_env(), "COLUMNS": "160"}, capture_output=True, text=True, timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "envd ready" in run.stdout and "Process/Start" in run.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "aenv_cli", "trace", "nope", "--home", str(home)],
        env=standin_env(), capture_output=True, text=True, timeout=60,
    )
    assert missing.returncode == 1 and "no trace or sandbox 'nope'" in missing.stderr
