"""Recursive watches lose nothing created inside a new directory before its watch existed."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aenv_envd.inotify import DirectoryWatcher


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
    watcher = DirectoryWatcher(str(tmp_path), recursive=True)
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
