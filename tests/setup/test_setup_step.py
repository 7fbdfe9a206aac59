"""The set-up's step runner (scripts/setup-step.sh): a step that passes prints one line, its
tools' output goes to the set-up log; one that fails prints its end of the log and the log's
path, and exits with the step's status. And the set-up scripts' one-line summaries, run under it
with their tools faked."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEP = ROOT / "scripts" / "setup-step.sh"
TIMEOUT_S = 60


def run_step(log: Path, *argv: str, env: dict[str, str] | None = None,
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(STEP), *argv], capture_output=True, text=True, timeout=TIMEOUT_S,
        env={**os.environ, **(env or {}), "SETUP_LOG": str(log)},
    )


def test_a_passing_step_prints_one_line_and_logs_its_output(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "setup.log"
    done = run_step(log, "greet", "bash", "-c", "echo chatter; echo more chatter >&2")
    assert done.returncode == 0
    assert re.fullmatch(r"greet: ok \(\d+\.\d s\)\n", done.stdout)
    assert done.stderr == ""
    text = log.read_text()
    assert "greet: bash -c" in text  # the step's header
    assert "chatter\nmore chatter\n" in text


def test_a_step_says_its_summary(tmp_path: Path) -> None:
    done = run_step(tmp_path / "setup.log", "install", "bash", "-c",
                    'echo noise; echo "installed 3 packages" > "$AENV_STEP_SUMMARY"')
    assert done.returncode == 0
    assert re.fullmatch(r"install: installed 3 packages \(\d+\.\d s\)\n", done.stdout)


def test_a_failing_step_prints_its_tail_and_the_log_and_keeps_its_status(
        tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    assert run_step(log, "earlier", "bash", "-c", "echo from an earlier step").returncode == 0
    done = run_step(log, "broken", "bash", "-c",
                    "for i in $(seq 1 50); do echo line $i; done; echo 'E: no such package' >&2;"
                    " exit 7", env={"SETUP_TAIL_LINES": "5"})
    assert done.returncode == 7
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert re.fullmatch(r"broken: FAILED \(exit 7 after \d+\.\d s\); the end of its output:",
                        lines[0])
    assert lines[1:-1] == ["  | line 47", "  | line 48", "  | line 49", "  | line 50",
                           "  | E: no such package"]
    assert lines[-1] == f"broken: its full output is in {log}"
    assert "from an earlier step" in log.read_text()  # appended, not replaced


def test_the_tail_is_the_failing_steps_own(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    run_step(log, "earlier", "bash", "-c", "echo from an earlier step")
    done = run_step(log, "broken", "false")
    assert done.returncode == 1
    assert "earlier step" not in done.stderr
    assert len(done.stderr.splitlines()) == 2  # the verdict and the log's path: no output


def test_a_missing_command_fails(tmp_path: Path) -> None:
    done = run_step(tmp_path / "setup.log", "absent", "/nonexistent/tool")
    assert done.returncode == 127
    assert "/nonexistent/tool" in done.stderr


def test_a_big_log_is_rotated(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    log.write_bytes(b"x" * (9 * 1024 * 1024))
    assert run_step(log, "small", "true").returncode == 0
    assert (tmp_path / "setup.log.1").stat().st_size == 9 * 1024 * 1024
    assert log.stat().st_size < 1024


def fake_tools(tmp_path: Path, installed: bool, apt_status: int = 0) -> dict[str, str]:
    """dpkg-query saying every package is (or none is) installed; apt-get recording its args
    and exiting with `apt_status`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    status = "install ok installed" if installed else "unknown ok not-installed"
    (bin_dir / "dpkg-query").write_text(f"#!/bin/sh\nprintf '{status}'\n")
    (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/apt-calls\n'
                                       f"exit {apt_status}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_setup_host_with_everything_present(tmp_path: Path) -> None:
    done = run_step(tmp_path / "setup.log", "setup-host", "bash",
                    str(ROOT / "scripts" / "setup-host.sh"), env=fake_tools(tmp_path, True))
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"setup-host: all \d+ packages present \(\d+\.\d s\)\n", done.stdout)
    assert not (tmp_path / "apt-calls").exists()


def test_setup_host_installs_what_is_missing(tmp_path: Path) -> None:
    done = run_step(tmp_path / "setup.log", "setup-host", "bash",
                    str(ROOT / "scripts" / "setup-host.sh"), env=fake_tools(tmp_path, False))
    assert done.returncode == 0, done.stderr
    found = re.fullmatch(r"setup-host: installed (\d+) packages: (.*) \(\d+\.\d s\)\n",
                         done.stdout)
    assert found is not None, done.stdout
    assert "qemu-system-x86" in found.group(2).split()
    calls = (tmp_path / "apt-calls").read_text().splitlines()
    assert calls[0] == "update -qq"
    assert calls[1].startswith("install -y -qq --no-install-recommends qemu-system-x86 ")
    assert len(calls[1].split()) - 4 == int(found.group(1))


def test_setup_host_fails_when_apt_does(tmp_path: Path) -> None:
    done = run_step(tmp_path / "setup.log", "setup-host", "bash",
                    str(ROOT / "scripts" / "setup-host.sh"),
                    env=fake_tools(tmp_path, False, apt_status=100))
    assert done.returncode == 100
    assert done.stderr.startswith("setup-host: FAILED (exit 100 after ")
    assert "setup-host: installing qemu-system-x86 " in done.stderr  # the script's own words
