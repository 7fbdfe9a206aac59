"""The hole-punch filter, on real processes: punching a hole becomes a no-op, nothing else
changes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from aenv_nodeagent.vmm import seccomp

MIB = 1 << 20


def _filled(path: Path) -> Path:
    path.write_bytes(b"\xaa" * (4 * MIB))
    return path


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def _fallocate(args: list[str], path: Path, *, filtered: bool) -> None:
    argv = ["fallocate", *args, str(path)]
    subprocess.run(seccomp.wrapped(argv) if filtered else argv, check=True)


def test_a_filtered_process_punches_no_hole(tmp_path: Path) -> None:
    target = _filled(tmp_path / "ram")
    _fallocate(["--punch-hole", "--offset", "0", "--length", str(2 * MIB)], target,
               filtered=True)
    assert _allocated(target) == 4 * MIB
    assert target.read_bytes() == b"\xaa" * (4 * MIB)


def test_other_fallocate_calls_and_unfiltered_processes_still_work(tmp_path: Path) -> None:
    zeroed = _filled(tmp_path / "zeroed")
    _fallocate(["--zero-range", "--offset", "0", "--length", str(MIB)], zeroed, filtered=True)
    assert zeroed.read_bytes()[:MIB] == bytes(MIB)
    grown = tmp_path / "grown"
    _fallocate(["--length", str(MIB)], grown, filtered=True)
    assert _allocated(grown) == MIB

    punched = _filled(tmp_path / "punched")
    _fallocate(["--punch-hole", "--offset", "0", "--length", str(2 * MIB)], punched,
               filtered=False)
    assert _allocated(punched) == 2 * MIB
