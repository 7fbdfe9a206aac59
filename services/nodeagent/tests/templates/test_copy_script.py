"""COPY's unpack script, run for real with the host's busybox on a tarball the official SDK packs
(its own `tar_file_stream`): a glob source with relative, absolute and dangling symlinks, as
E2B's template suite copies `folder/*`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from e2b.template.utils import tar_file_stream

from aenv_nodeagent.templates import steps as steps_module
from aenv_nodeagent.templates.steps import static_source

HOST_BUSYBOX = shutil.which("busybox")


def test_a_globs_static_part_is_the_folder_its_matches_are_in() -> None:
    assert static_source("folder/*") == "folder"
    assert static_source("folder/*.txt") == "folder"
    assert static_source("a/b/**/c") == "a/b"
    assert static_source("*.txt") == "."
    assert static_source("folder/") == "folder"
    assert static_source("app.py") == "app.py"


def _context(root: Path) -> Path:
    folder = root / "context" / "folder"
    folder.mkdir(parents=True)
    (folder / "test.txt").write_text("This is a test file.")
    (folder / "symlink.txt").symlink_to("test.txt")
    (folder / "symlink2.txt").symlink_to(folder / "test.txt")  # a host path: dangles inside
    (folder / "symlink3.txt").symlink_to("12345test.txt")
    return root / "context"


def _copy(tmp_path: Path, context: Path, src: str, target: Path,
          monkeypatch: pytest.MonkeyPatch) -> subprocess.CompletedProcess[str]:
    assert HOST_BUSYBOX is not None
    monkeypatch.setattr(steps_module, "BUSYBOX", HOST_BUSYBOX)
    staged = tmp_path / "staged.tar.gz"
    with tar_file_stream(src, str(context), [], False, True) as archive:
        staged.write_bytes(archive.read())
    owner = os.getuid()
    script = steps_module._copy_script(str(staged), True, src, str(target), str(owner), "")
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)


@pytest.mark.skipif(HOST_BUSYBOX is None, reason="needs busybox on the host")
def test_a_glob_copies_its_matches_and_keeps_symlinks_as_they_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    context = _context(tmp_path)
    target = tmp_path / "guest" / "home" / "user" / "folder"
    done = _copy(tmp_path, context, "folder/*", target, monkeypatch)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in target.iterdir()) == [
        "symlink.txt", "symlink2.txt", "symlink3.txt", "test.txt"]
    assert (target / "symlink.txt").read_text() == "This is a test file."
    assert os.readlink(target / "symlink.txt") == "test.txt"
    assert os.readlink(target / "symlink2.txt") == str(context / "folder" / "test.txt")
    assert os.readlink(target / "symlink3.txt") == "12345test.txt"
    assert not (tmp_path / "staged.tar.gz").exists()  # the staged tarball is cleaned up


@pytest.mark.skipif(HOST_BUSYBOX is None, reason="needs busybox on the host")
def test_a_glob_of_files_at_the_contexts_root_copies_only_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    context = _context(tmp_path)
    (context / "a.txt").write_text("a")
    target = tmp_path / "out"
    done = _copy(tmp_path, context, "*.txt", target, monkeypatch)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in target.iterdir()] == ["a.txt"]
