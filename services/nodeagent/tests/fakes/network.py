"""A fake NetworkManager: hands out `NetSlot`s from a pool and counts the live ones; no netns.

A slot is live from `create_slot` until `destroy_slot` (or the background `release_slot`) has
run, as NetworkManager's index stays taken. Errors queued on `create_failures` fail the next
creations (nothing is left of them, as with the real one).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from aenv_common.errors import ResourceExhausted
from aenv_nodeagent.network import EgressPolicy, NetSlot, NetworkConfig, NetworkManager
from aenv_nodeagent.network.manager import SlotRelays
from aenv_nodeagent.network.slots import slot_for


class FakeNetwork:
    """Implements NetworkManager's public methods in memory."""

    def __init__(self, config: NetworkConfig | None = None) -> None:
        self._config = config or NetworkConfig(prefix="fake", pool_cidr="10.250.0.0/24")
        self._live: dict[int, NetSlot] = {}
        self.policies: dict[str, EgressPolicy] = {}  # by netns, as last applied
        self.created: list[NetSlot] = []
        self.destroyed: list[NetSlot] = []
        self.create_failures: list[BaseException] = []
        self._releases: set[asyncio.Task[None]] = set()
        self.relays: SlotRelays | None = None  # stopped with their slot, as the real one does

    @property
    def config(self) -> NetworkConfig:
        return self._config

    @property
    def live(self) -> list[NetSlot]:
        """The slots created and not destroyed yet, by index."""
        return [self._live[index] for index in sorted(self._live)]

    async def create_slot(self, policy: EgressPolicy) -> NetSlot:
        await asyncio.sleep(0)  # a real build runs in a thread
        if self.create_failures:
            raise self.create_failures.pop(0)
        index = next((i for i in range(self._config.capacity) if i not in self._live), None)
        if index is None:
            raise ResourceExhausted(f"no free network slot with prefix {self._config.prefix!r}")
        slot = slot_for(self._config, index)
        self._live[index] = slot
        self.policies[slot.netns] = policy
        self.created.append(slot)
        return slot

    async def destroy_slot(self, slot: NetSlot) -> None:
        await asyncio.sleep(0)
        if self.relays is not None:
            await self.relays.stop(slot.netns)
        if self._live.pop(slot.index, None) is not None:  # safe to repeat
            self.destroyed.append(slot)
        self.policies.pop(slot.netns, None)

    def release_slot(self, slot: NetSlot) -> None:
        task = asyncio.get_running_loop().create_task(self.destroy_slot(slot))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def settled(self) -> None:
        while self._releases:
            await asyncio.gather(*self._releases)

    async def update_policy(self, slot: NetSlot, policy: EgressPolicy) -> None:
        await asyncio.sleep(0)
        self.policies[slot.netns] = policy

    async def existing_slots(self) -> list[NetSlot]:
        return self.live

    def adopt_slot_of(self, pid: int) -> NetSlot | None:
        return None  # no process runs in a fake slot

    async def destroy_orphans(self, keep: set[str]) -> list[str]:
        await self.settled()
        orphans = [slot for slot in self.live if slot.netns not in keep]
        for slot in orphans:
            await self.destroy_slot(slot)
        return [slot.netns for slot in orphans]


class _Network(Protocol):
    """NetworkManager's public surface, which mypy checks both classes against below."""

    @property
    def config(self) -> NetworkConfig: ...
    async def create_slot(self, policy: EgressPolicy) -> NetSlot: ...
    async def destroy_slot(self, slot: NetSlot) -> None: ...
    def release_slot(self, slot: NetSlot) -> None: ...
    async def settled(self) -> None: ...
    async def update_policy(self, slot: NetSlot, policy: EgressPolicy) -> None: ...
    async def existing_slots(self) -> list[NetSlot]: ...
    def adopt_slot_of(self, pid: int) -> NetSlot | None: ...
    async def destroy_orphans(self, keep: set[str]) -> list[str]: ...


_REAL_NETWORK: type[_Network] = NetworkManager
_FAKE_NETWORK: type[_Network] = FakeNetwork
