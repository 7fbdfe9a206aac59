"""Recursive watches lose nothing created inside a new directory before its watch existed, and
follow into new directories only as far as the watching user may look."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from aenv_envd.inotify import DirectoryWatcher
from aenv_envd.users import User, lookup_user

NOBODY = User("nobody", 65534, 65534, "/nonexistent", (65534,))


async def _collect(watcher: DirectoryWatcher, wanted: set[tuple[str, str]]) -> set[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()

    async def read() -> None:
        async for event in watcher.events():
            seen.add((event.relative_name, event.kind))
            if wanted <= seen:
                return

    await asyncio.wait_for(read(), timeout=5)
    return seen


async def test_contents_of_a_new_directory_are_reported(tmp_path: Path) -> None:
    watcher = DirectoryWatcher(str(tmp_path), recursive=True, user=lookup_user("root"))
    try:
        # All of it happens before the watcher reads its first event: the watch on `a` can only
        # be added after the fact, as with a client's `mkdir -p` + write racing the watcher.
        (tmp_path / "a" / "b").mkdir(parents=True)
        (tmp_path / "a" / "b" / "f.txt").write_text("data")
        (tmp_path / "a" / "empty").touch()
        wanted = {
            ("a", "CREATE"),
            ("a/b", "CREATE"),
            ("a/b/f.txt", "CREATE"),
            ("a/b/f.txt", "WRITE"),
            ("a/empty", "CREATE"),
        }
        seen = await _collect(watcher, wanted)
        assert wanted <= seen
        assert ("a/empty", "WRITE") not in seen
        # The new directories are watched from now on.
        (tmp_path / "a" / "b" / "later.txt").write_text("x")
        assert ("a/b/later.txt", "WRITE") in await _collect(watcher, {("a/b/later.txt", "WRITE")})
    finally:
        watcher.close()


async def test_a_users_watch_does_not_follow_into_a_folder_it_cannot_read() -> None:
    """A recursive watch of nobody's folder: root then makes a root-only folder in it (its name
    is nobody's to see, its contents are not) and an open one (followed as before)."""
    if os.geteuid() != 0:
        pytest.skip("envd acts for other users only as root")
    home = Path(tempfile.mkdtemp(prefix="envd-watch-", dir="/tmp"))
    try:
        home.chmod(0o755)
        os.chown(home, NOBODY.uid, NOBODY.gid)
        watcher = DirectoryWatcher(str(home), recursive=True, user=NOBODY)
        try:
            # The contents exist before the watcher sees the folder's CREATE, so it both tries
            # to watch it and walks it for what it missed: neither may happen as root.
            (home / "private").mkdir(mode=0o700)
            (home / "private" / "hidden-name").write_text("x")
            (home / "open").mkdir(mode=0o755)
            (home / "open" / "visible").write_text("y")
            seen = await _collect(watcher, {("private", "CREATE"), ("open/visible", "CREATE")})
            assert {("private", "CREATE"), ("open", "CREATE"), ("open/visible", "CREATE")} <= seen
            assert not [name for name, _ in seen if name.startswith("private/")], seen
            # Later writes inside: still nothing from the private folder, the open one reports.
            (home / "private" / "later-secret").write_text("z")
            (home / "open" / "later").write_text("w")
            seen = await _collect(watcher, {("open/later", "WRITE")})
            assert not [name for name, _ in seen if name.startswith("private/")], seen
        finally:
            watcher.close()
    finally:
        shutil.rmtree(home)
