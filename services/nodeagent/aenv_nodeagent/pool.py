"""Warm pool: network slots and disk overlays built ahead, so a restore does not wait for them.

Slots are built with the default egress policy; a sandbox asking for another one gets the pooled
slot's rules replaced (an nftables update, cheaper than a new netns). Overlays are qcow2 files over
a template's disk, pre-created under `pool/` (on the sandboxes' filesystem) and renamed into the
sandbox's directory; a backing file is pooled once something was created on it. A background task
refills both up to their bounds. `close` (and any refill failure) drains everything: pooled slots
are destroyed and overlay files removed, so the pool never outlives the node agent.

Not pooled (yet): pre-started QEMUs. A QEMU has its disk and memory file paths on its command
line and reopens the disk by path after an incoming migration, so it can only be pre-started for
paths fixed in advance (see the report of Step 3 for the options).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shutil
from pathlib import Path

from aenv_nodeagent.disks import create_overlay
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkManager

log = logging.getLogger(__name__)


class WarmPool:
    def __init__(
        self, network: NetworkManager, root: Path, *, slots: int, overlays_per_backing: int
    ) -> None:
        self._network = network
        self._root = root
        self._slot_target = slots
        self._overlay_target = overlays_per_backing
        self._slots: list[NetSlot] = []
        self._overlays: dict[Path, list[Path]] = {}
        self._wake = asyncio.Event()
        self._refiller: asyncio.Task[None] | None = None
        self._closed = False
        shutil.rmtree(root, ignore_errors=True)  # an earlier run's leftovers
        root.mkdir(parents=True, exist_ok=True)

    @property
    def enabled(self) -> bool:
        return self._slot_target > 0 or self._overlay_target > 0

    def start(self) -> None:
        if self.enabled and self._refiller is None:
            self._refiller = asyncio.ensure_future(self._refill_forever())

    def sizes(self) -> dict[str, int]:
        return {"slots": len(self._slots),
                "overlays": sum(len(files) for files in self._overlays.values())}

    async def take_slot(self, policy: EgressPolicy) -> NetSlot:
        """A network slot enforcing `policy`: a pooled one when available."""
        if not self._slots:
            self._wake.set()
            return await self._network.create_slot(policy)
        slot = self._slots.pop()
        self._wake.set()
        if policy != EgressPolicy():
            try:
                await self._network.update_policy(slot, policy)
            except BaseException:
                await self._network.destroy_slot(slot)
                raise
        return slot

    async def take_overlay(self, backing: Path, destination: Path) -> None:
        """Put a fresh qcow2 overlay over `backing` at `destination`."""
        pooled = self._overlays.setdefault(backing, [])
        self._wake.set()
        if pooled:
            pooled.pop().rename(destination)
        else:
            await create_overlay(backing, destination)

    def forget_backing(self, backing: Path) -> None:
        """`backing` is going away: drop the overlays made over it."""
        for overlay in self._overlays.pop(backing, []):
            overlay.unlink(missing_ok=True)

    async def close(self) -> None:
        self._closed = True
        if self._refiller is not None:
            self._refiller.cancel()
            await asyncio.gather(self._refiller, return_exceptions=True)
            self._refiller = None
        await self._drain()

    async def _drain(self) -> None:
        slots, self._slots = self._slots, []
        await asyncio.gather(*(self._network.destroy_slot(s) for s in slots),
                             return_exceptions=True)
        for backing in list(self._overlays):
            self.forget_backing(backing)

    async def _refill_forever(self) -> None:
        while not self._closed:
            try:
                await self._refill()
            except asyncio.CancelledError:
                raise
            except Exception:
                # Never keep half-built resources around a failure: drain, retry on next use.
                log.exception("warm pool refill failed; drained")
                await self._drain()
            self._wake.clear()
            await self._wake.wait()

    async def _refill(self) -> None:
        """One item at a time: the pool runs beside the work it speeds up."""
        while len(self._slots) < self._slot_target:
            self._slots.append(await self._network.create_slot(EgressPolicy()))
        for backing, pooled in list(self._overlays.items()):
            while len(pooled) < self._overlay_target and backing.is_file():
                overlay = self._root / f"{secrets.token_hex(8)}.qcow2"
                try:
                    await create_overlay(backing, overlay)
                except BaseException:
                    overlay.unlink(missing_ok=True)
                    raise
                if backing not in self._overlays:  # forgotten meanwhile
                    overlay.unlink(missing_ok=True)
                    break
                pooled.append(overlay)
