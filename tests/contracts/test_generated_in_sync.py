"""The generated code under gen/python/src is exactly what `make gen` makes from protos/, and the
protos pass `buf lint`: nobody edited generated code by hand or forgot to regenerate."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "gen" / "python" / "src"


def _differences(left: Path, right: Path) -> list[str]:
    cmp = filecmp.dircmp(left, right, ignore=["__pycache__", "aenv_protos.egg-info"])
    out = [f"only in {left}: {n}" for n in cmp.left_only]
    out += [f"only in {right}: {n}" for n in cmp.right_only]
    out += [f"differs: {left / n}" for n in cmp.diff_files]
    for sub in cmp.common_dirs:
        out += _differences(left / sub, right / sub)
    return out


def test_generated_code_matches_protos(tmp_path: Path) -> None:
    out = tmp_path / "src"
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gen-protos.sh"), str(out)],
        check=True, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    assert _differences(GENERATED, out) == []


def test_buf_lint_passes() -> None:
    buf = ROOT / "node_modules" / ".bin" / "buf"
    done = subprocess.run([str(buf), "lint"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
