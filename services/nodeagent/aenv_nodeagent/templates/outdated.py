"""Dropping the captures of built-in templates made under inputs this node no longer has.

A built-in template's capture is keyed by its inputs (model.TemplateInputs.key: the guest
artifacts, the rootfs, the accelerator, ...); when they change (an upgrade, a rebuilt artifact)
the node captures or pulls a new one and the old stays behind, with its snapstore manifest
(`template-<id>-<old key>`) and the disks it was pulled with (`disks/`). Each pass removes every
such capture that nothing can still use:

- a disk of this node (a sandbox's, running or paused, a pre-made overlay, a snapshot's layer)
  stands on it: its disk chain names the capture's disk (bounds.chain_of);
- a sandbox or snapshot pinned its RAM (a hard link to the memory file);
- it was used in the last `min_idle_s` (another node agent sharing this folder may be on the old
  inputs still: each use touches its `template.json`).

Its manifest goes from snapstore with it (a node still on the old inputs captures its own), and
so does any pulled disk (guest_disks.py) no remaining capture here stands on; snapstore's
disks go once no capture there names them (GuestDisks.collect: after a drop here, and once every
`min_idle_s` — another node may have dropped the last, or the gateway deleted a template). The
template's warm VMs and overlays of the old capture go first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from aenv_nodeagent.artifacts.digest import SUFFIX as DIGEST_SUFFIX
from aenv_nodeagent.snapshots.persistence import SnapshotPersistence
from aenv_nodeagent.templates.bounds import chain_of, run_every
from aenv_nodeagent.templates.cache import Forget
from aenv_nodeagent.templates.disk_files import read_backing
from aenv_nodeagent.templates.distribution import BUILTIN_TEMPLATES, snapshot_manifest
from aenv_nodeagent.templates.guest_disks import PULLED_DISKS_DIR, GuestDisks
from aenv_nodeagent.templates.model import META_FILE, TemplateSnapshot
from aenv_nodeagent.templates.store import TemplateStore

log = logging.getLogger(__name__)

# The disks of this node that may stand on a capture (sandboxes', overlays', snapshot layers).
Tops = Callable[[], list[Path]]


def node_disks(state_dir: Path) -> Tops:
    """The node agent's: its sandboxes' disks (running and paused) and its snapshots' layers."""
    def listed() -> list[Path]:
        return [*(state_dir / "sandboxes").rglob("*.qcow2"), *(state_dir / "layers").glob("*")]

    return listed


class OutdatedCaptures:
    def __init__(
        self,
        store: TemplateStore,
        tops: Tops,
        forget: Forget,
        persistence: SnapshotPersistence | None = None,
        *,
        min_idle_s: float = 86400.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._tops = tops
        self._forget = forget  # the warm pool's VMs and overlays of a template's capture
        self._persistence = persistence
        self._disks = GuestDisks(persistence, store.root) if persistence is not None else None
        self._min_idle_s = min_idle_s
        self._clock = clock
        self._collected_at = float("-inf")

    def outdated(self) -> list[TemplateSnapshot]:
        """The built-in captures under inputs other than the registered ones, unused."""
        below = {image for top in self._tops() for image in chain_of(top)}
        recent = self._clock() - self._min_idle_s
        found = []
        for snap in self._store.on_disk():
            if snap.template_id not in BUILTIN_TEMPLATES or not self._store.has(snap.template_id):
                continue
            if snap.directory.name == self._store.inputs(snap.template_id).key():
                continue
            try:
                used = (snap.directory / META_FILE).stat().st_mtime
                pinned = snap.memory.stat().st_nlink > 1
            except OSError:
                continue  # removed meanwhile
            if snap.disk not in below and not pinned and used <= recent:
                found.append(snap)
        return found

    async def sweep(self) -> list[Path]:
        """Drops every outdated built-in capture; returns their folders."""
        dropped = []
        for snap in self.outdated():
            await self._forget(snap.template_id, snap.disk)
            self._store.drop_captured(snap)
            if self._persistence is not None:
                self._persistence.forget_soon(
                    snapshot_manifest(snap.template_id, snap.directory.name))
            dropped.append(snap.directory)
            log.info("outdated built-in template capture dropped",
                     extra={"template": snap.template_id, "key": snap.directory.name})
        if dropped:
            self._drop_unused_disks()
        now = self._clock()
        # It reads every capture's labels in snapstore: after a drop here, else once a while.
        if self._disks is not None and (dropped or now - self._collected_at > self._min_idle_s):
            await self._disks.collect(self._min_idle_s, now)
            self._collected_at = now
        return dropped

    def _drop_unused_disks(self) -> None:
        folder = self._store.root / PULLED_DISKS_DIR
        used = set()
        for snap in self._store.on_disk():
            try:
                backing = read_backing(snap.directory)
            except (OSError, ValueError):
                continue
            used |= set((backing or {}).values())
        registered = [self._store.inputs(t) for t in self._store.registered()]
        used |= {inputs.rootfs.path for inputs in registered}
        used |= {inputs.artifacts.tools_disk for inputs in registered}
        for disk in folder.glob("[!.]*"):
            if disk.name.endswith(DIGEST_SUFFIX) or disk in used:
                continue
            disk.unlink(missing_ok=True)
            disk.with_name(disk.name + DIGEST_SUFFIX).unlink(missing_ok=True)
            log.info("pulled built-in template disk dropped", extra={"disk": disk.name})

    async def run(self, interval_s: float) -> None:
        await run_every(interval_s, "outdated built-in captures sweep", self.sweep)
