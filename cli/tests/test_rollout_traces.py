"""`aenv trace --rollout` on synthetic span files shaped like the services' JSON-lines exports: a
rollout's sandboxes by group and step, each with its operations (tagged spans and the spans
under them, across traces) on one time line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aenv_cli_testkit import span_line as span
from aenv_cli_testkit import standin_env
from rich.console import Console

from aenv_cli.rollout_traces import render_rollout, rollout_sandboxes
from aenv_common.errors import NotFound
from aenv_common.telemetry import read_trace_files

TRAINER = "0af7651916cd43dd8448eb211c80319c"
LATER = "1bf7651916cd43dd8448eb211c80319d"
ELSEWHERE = "2cf7651916cd43dd8448eb211c80319e"


def about(sandbox: str, step: str, group: str = "g1", rollout: str = "r1") -> dict[str, str]:
    return {"aenv.sandbox_id": sandbox, "aenv.rollout_id": rollout, "aenv.group_id": group,
            "aenv.step": step}


SPANS = {
    "gateway": [
        span(TRAINER, "g1", "trainer", "gateway", "sandbox.create", 0, 400, **about("sbxA", "0")),
        span(TRAINER, "g2", "trainer", "gateway", "sandbox.create", 10, 380, **about("sbxB", "1")),
        span(ELSEWHERE, "g3", None, "gateway", "sandbox.create", 20, 300,
             **about("sbxC", "0", group="g2")),
        span(ELSEWHERE, "g4", None, "gateway", "sandbox.create", 30, 30,
             **about("sbxX", "0", rollout="r2")),
    ],
    "nodeagent": [
        # The gRPC hop carries no tags: it is sbxA's as the span under its create.
        span(TRAINER, "n1", "g1", "nodeagent", "/aenv.nodeagent.v1/CreateSandbox", 20, 370),
        span(TRAINER, "n2", "n1", "nodeagent", "sandbox.create", 25, 360, **about("sbxA", "0")),
        span(TRAINER, "n3", "n2", "nodeagent", "sandbox.restore", 30, 200, **about("sbxA", "0")),
        span(TRAINER, "n4", "g2", "nodeagent", "sandbox.create", 30, 350, **about("sbxB", "1")),
        # Its timeout, a minute later, under the trainer's span.
        span(TRAINER, "n5", "trainer", "nodeagent", "sandbox.expire", 60_000, 90,
             **about("sbxA", "0")),
        span(TRAINER, "n6", "n5", "nodeagent", "sandbox.kill", 60_005, 80, **about("sbxA", "0")),
        # A later call in a trace of its own.
        span(LATER, "n7", None, "nodeagent", "sandbox.pause", 5_000, 900, **about("sbxB", "1")),
    ],
    "envd": [
        span(TRAINER, "e1", "n3", "envd", "envd POST /init", 200, 10, **about("sbxA", "0")),
    ],
}


@pytest.fixture
def trace_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "traces"
    directory.mkdir()
    for service, spans in SPANS.items():
        (directory / f"{service}.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    return directory


def render(rollout_id: str, group: str | None = None, *, directory: Path) -> str:
    console = Console(width=160, record=True, color_system=None)
    sandboxes = rollout_sandboxes(read_trace_files(directory), rollout_id, group)
    console.print(render_rollout(rollout_id, sandboxes))
    return console.export_text()


def test_a_rollouts_sandboxes_with_their_operations(trace_dir: Path) -> None:
    sandboxes = rollout_sandboxes(read_trace_files(trace_dir), "r1")
    assert [(s.sandbox_id, s.group_id, s.step) for s in sandboxes] == [
        ("sbxA", "g1", "0"), ("sbxB", "g1", "1"), ("sbxC", "g2", "0")]
    operations = {s.sandbox_id: sorted(span["span_id"] for span in s.spans) for s in sandboxes}
    assert operations == {"sbxA": ["e1", "g1", "n1", "n2", "n3", "n5", "n6"],
                          "sbxB": ["g2", "n4", "n7"], "sbxC": ["g3"]}
    with pytest.raises(NotFound):
        rollout_sandboxes(read_trace_files(trace_dir), "nosuchrollout")
    with pytest.raises(NotFound):
        rollout_sandboxes(read_trace_files(trace_dir), "r1", "nosuchgroup")


def test_the_tree_groups_by_group_and_step_on_one_time_line(trace_dir: Path) -> None:
    lines = render("r1", directory=trace_dir).splitlines()
    assert "rollout r1  3 sandboxes  60090.0 ms total" in lines[0]
    order = ["group g1", "step 0", "sandbox sbxA", "gateway sandbox.create", "nodeagent /aenv",
             "nodeagent sandbox.create", "nodeagent sandbox.restore", "envd envd POST /init",
             "nodeagent sandbox.expire", "sandbox.kill", "step 1", "sandbox sbxB",
             "sandbox.pause", "group g2", "sandbox sbxC"]
    positions = [next(i for i, line in enumerate(lines) if name in line) for name in order]
    assert positions == sorted(positions), lines
    indent = {name: lines[pos].index(name) for name, pos in zip(order, positions, strict=True)}
    assert indent["step 0"] > indent["group g1"] and indent["sandbox sbxA"] > indent["step 0"]
    assert (indent["envd envd POST /init"] > indent["nodeagent sandbox.restore"]
            > indent["nodeagent /aenv"])
    assert indent["sandbox.kill"] > indent["nodeagent sandbox.expire"]
    expire = lines[positions[order.index("nodeagent sandbox.expire")]]
    assert "+60000.0 ms" in expire and "90.0 ms" in expire
    assert "sbxX" not in "\n".join(lines)


def test_cli_rollout_and_group(trace_dir: Path) -> None:
    home = trace_dir.parent

    def aenv(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "aenv_cli", "trace", *args, "--home", str(home)],
            env={**standin_env(), "COLUMNS": "160"}, capture_output=True, text=True, timeout=60)

    whole = aenv("--rollout", "r1")
    assert whole.returncode == 0, whole.stderr
    assert "sbxA" in whole.stdout and "sbxC" in whole.stdout
    group = aenv("--rollout", "r1", "--group", "g2")
    assert group.returncode == 0, group.stderr
    assert "sbxC" in group.stdout and "sbxA" not in group.stdout
    missing = aenv("--rollout", "r9")
    assert missing.returncode == 1 and "no sandbox of rollout 'r9'" in missing.stderr
    both = aenv("sbxA", "--rollout", "r1")
    assert both.returncode == 1 and "--rollout" in both.stderr
    lone_group = aenv("--group", "g1")
    assert lone_group.returncode == 1
