"""The template cache's bound: least recently used first, never `base`, a template in use or
one used just now; the warm pool is told; what is evicted is gone from disk."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from aenv_nodeagent.templates.cache import TemplateCache
from aenv_nodeagent.templates.model import META_FILE
from aenv_nodeagent.templates.store import TemplateStore

MIB = 1 << 20


def _captured(root: Path, template_id: str, used_at: float, mib: int = 1) -> Path:
    directory = root / template_id / "key0"
    directory.mkdir(parents=True)
    (directory / "memory").write_bytes(os.urandom(mib * MIB))
    (directory / META_FILE).write_text(json.dumps({
        "template_id": template_id, "directory": str(directory), "vcpus": 1,
        "memory_mib": 128, "disk_mib": 64, "accelerator": "tcg", "kernel_version": "k",
        "artifacts_digest": "d", "envd_version": "0.9.0", "boot_seconds": 1.0}))
    os.utime(directory / META_FILE, (used_at, used_at))
    return directory


def _store(root: Path) -> TemplateStore:
    none: Any = None  # the cache only reads and removes what is on disk
    return TemplateStore(root, none, none, none, none, boot_timeout_s=1, boot_attempts=1)


async def test_the_least_recently_used_unused_templates_go_first(tmp_path: Path) -> None:
    now = 1_000_000.0
    dirs = {name: _captured(tmp_path, name, now - age)
            for name, age in (("base", 9000), ("old", 8000), ("used", 7000),
                              ("middle", 6000), ("fresh", 10))}
    forgotten: list[tuple[str, Path]] = []

    async def forget(template_id: str, disk: Path) -> None:
        forgotten.append((template_id, disk))

    cache = TemplateCache(_store(tmp_path), int(3.5 * MIB), lambda: {"used"}, forget,
                          min_idle_s=60, clock=lambda: now)
    assert [c.snapshot.template_id for c in cache.contents()] == [
        "base", "old", "used", "middle", "fresh"]
    assert await cache.trim() == ["old", "middle"]
    assert [t for t, _ in forgotten] == ["old", "middle"]
    assert forgotten[0][1] == dirs["old"] / "disk.qcow2"
    assert not dirs["old"].exists() and not dirs["middle"].exists()
    assert all(dirs[name].exists() for name in ("base", "used", "fresh"))
    # Over the bound still, but all of the rest is kept: nothing more goes.
    smaller = TemplateCache(_store(tmp_path), MIB, lambda: {"used"}, forget, min_idle_s=60,
                            clock=lambda: now)
    assert await smaller.trim() == []
    assert await cache.trim() == []  # within the bound now
