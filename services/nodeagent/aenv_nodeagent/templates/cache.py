"""Bounding the template snapshots a node keeps on disk: past the configured size, the least
recently used ones go first (use times survive restarts: each snapshot's `template.json` mtime).

Never evicted: the built-in `base`, a template a live sandbox, a paused sandbox or a snapshot
of this node stands on (their disk chains and memory map it), and one used in the last
`min_idle_s` (a create may have it in hand). An evicted template stays registered: its next
use pulls its snapshot from snapstore, or captures it again from its inputs. Its warm VMs and
pre-made overlays go with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aenv_nodeagent.templates.bounds import disk_bytes, run_every
from aenv_nodeagent.templates.model import BASE_TEMPLATE, META_FILE, TemplateSnapshot
from aenv_nodeagent.templates.store import TemplateStore

log = logging.getLogger(__name__)

InUse = Callable[[], set[str]]
Forget = Callable[[str, Path], Awaitable[None]]


@dataclass(frozen=True)
class CachedTemplate:
    snapshot: TemplateSnapshot
    bytes: int
    last_used: float


class TemplateCache:
    def __init__(
        self,
        store: TemplateStore,
        max_bytes: int,
        in_use: InUse,
        forget: Forget,
        *,
        min_idle_s: float = 300.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._max_bytes = max_bytes
        self._in_use = in_use
        self._forget = forget  # the warm pool's VMs and overlays of a template
        self._min_idle_s = min_idle_s
        self._clock = clock

    def contents(self) -> list[CachedTemplate]:
        """Every snapshot on disk, least recently used first."""
        found = []
        for snap in self._store.on_disk():
            try:
                used = (snap.directory / META_FILE).stat().st_mtime
            except OSError:
                continue
            found.append(CachedTemplate(snap, disk_bytes(snap.directory), used))
        return sorted(found, key=lambda c: c.last_used)

    async def trim(self) -> list[str]:
        """Evicts until the snapshots fit the bound; returns the evicted templates' ids."""
        contents = self.contents()
        total = sum(c.bytes for c in contents)
        if total <= self._max_bytes:
            return []
        kept = self._in_use() | {BASE_TEMPLATE}
        recent = self._clock() - self._min_idle_s
        evicted = []
        for cached in contents:
            if total <= self._max_bytes:
                break
            snap = cached.snapshot
            if snap.template_id in kept or cached.last_used > recent:
                continue
            await self._forget(snap.template_id, snap.disk)
            self._store.drop_captured(snap)
            total -= cached.bytes
            evicted.append(snap.template_id)
            log.info("template evicted from the cache", extra={
                "template": snap.template_id, "freed_mib": cached.bytes >> 20,
                "cache_mib": total >> 20})
        if total > self._max_bytes:
            log.warning("template cache over its bound: the rest is in use", extra={
                "cache_mib": total >> 20, "max_mib": self._max_bytes >> 20})
        return evicted

    async def run(self, interval_s: float = 60.0) -> None:
        await run_every(interval_s, "template cache trim", self.trim)
