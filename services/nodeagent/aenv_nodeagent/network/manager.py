"""NetworkManager: allocates slot indices and builds, re-policies, finds and removes slots.

Slots are independent of any sandbox: ``create_slot`` can run ahead of time (a warm pool) and
``update_policy`` applied when the slot is handed to a sandbox. Each slot's host veth is handed
to the node's ``HostNat`` (host_nat.py), which forwards what its guest sends out. A policy that
needs the node's egress process (names, header rules, an egress proxy) attaches the slot to it
around the nft transaction (slot_egress.py); destroying the slot detaches it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from functools import partial
from typing import Protocol

from pyroute2 import IPRoute

from aenv_common.errors import AenvError, Internal, NotFound, ResourceExhausted, Unavailable

from . import firewall, netlink, slotops
from .host_nat import HostNat
from .namespaces import (
    list_netns,
    netns_exists,
    netns_path,
    pids_in_netns,
    run_in_fresh_thread,
)
from .policy import EgressPolicy
from .slot_egress import ResolvedMemory, SlotEgress, Switch, plan
from .slots import (
    NetSlot,
    NetworkConfig,
    index_from_host_veth,
    index_from_netns,
    netns_name,
    slot_for,
)

log = logging.getLogger(__name__)


class SlotRelays(Protocol):
    """The volume relays (volumes/relays.py): a slot's listener goes before the slot."""

    async def stop(self, netns: str) -> None: ...


class NetworkManager:
    def __init__(self, config: NetworkConfig, egress: SlotEgress | None = None,
                 resolved: ResolvedMemory | None = None,
                 host_nat: HostNat | None = None,
                 relays: SlotRelays | None = None) -> None:
        self._config = config
        self._relays = relays  # the volume relays (volumes/): one stops with its slot
        self._egress = egress  # None: this node enforces IP-only policies alone
        self._resolved = resolved
        self._host_nat = host_nat  # None: no slot's own traffic is forwarded off the netns
        self._ports = egress.ports if egress is not None else firewall.EgressPorts()
        self._in_use: set[int] = set()  # indices this process holds or is building
        self._building: set[int] = set()
        self._next_index = 0  # where the search for a free index starts (_reserve_index)
        # Policy last applied per netns: re-applying an equal one is skipped, because an nft
        # transaction that deletes rules waits for an RCU grace period (~10-15 ms here).
        self._applied: dict[str, EgressPolicy] = {}
        self._releases: set[asyncio.Task[None]] = set()

    @property
    def config(self) -> NetworkConfig:
        return self._config

    async def create_slot(self, policy: EgressPolicy) -> NetSlot:
        """Build a slot at the next free index. On failure nothing is left behind and
        Internal (or ResourceExhausted when the pool is full) is raised."""
        slot = slot_for(self._config, self._reserve_index())
        self._building.add(slot.index)
        started = time.perf_counter()
        try:
            await run_in_fresh_thread(
                partial(slotops.build_slot, slot, partial(self._ruleset, slot, policy)),
                name=f"netns-build-{slot.netns}",
            )
            if self._host_nat is not None:
                await self._host_nat.forward_slot(slot.host_veth)
        except Exception as exc:
            await self._discard(slot)
            if isinstance(exc, AenvError):
                raise
            raise Internal(f"creating network slot {slot.netns} failed: {exc}") from exc
        except BaseException:  # cancelled: the build thread has finished, undo its work
            await self._discard(slot)
            raise
        finally:
            self._building.discard(slot.index)
        if policy.needs_proxy:
            try:
                await self._need_egress().attach(slot.netns, policy.owner_key_id,
                                                 policy.network)
            except BaseException:
                await self._discard(slot)
                raise
        self._applied[slot.netns] = policy
        log.info(
            "network slot created",
            extra={"netns": slot.netns, "ns_ip": slot.ns_ip, "ms": _ms_since(started)},
        )
        return slot

    async def destroy_slot(self, slot: NetSlot) -> None:
        """Remove the slot's nft table, tap, veth and netns; safe to repeat."""
        if self._relays is not None:  # its listener would keep the netns alive too
            await self._relays.stop(slot.netns)
        if self._egress is not None:  # its listeners would keep the netns alive
            await self._egress.detach(slot.netns)
        if self._resolved is not None:
            self._resolved.forget(slot.netns)
        try:
            removed = await run_in_fresh_thread(
                partial(slotops.teardown_slot, slot), name=f"netns-teardown-{slot.netns}"
            )
        except Exception as exc:
            raise Internal(f"destroying network slot {slot.netns} failed: {exc}") from exc
        self._in_use.discard(slot.index)
        self._applied.pop(slot.netns, None)
        if removed:
            log.info("network slot destroyed", extra={"netns": slot.netns})

    def release_slot(self, slot: NetSlot) -> None:
        """Destroy the slot in the background, for a caller that need not wait (a pause: its
        guest is gone). Its index stays taken until then; what a crash interrupts, the next
        start's orphan sweep removes."""
        task = asyncio.get_running_loop().create_task(self._discard(slot))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def settled(self) -> None:
        """Wait for the slots being released."""
        while self._releases:
            await asyncio.gather(*self._releases)

    async def update_policy(self, slot: NetSlot, policy: EgressPolicy) -> None:
        """Replace the slot's egress rules in one nft transaction (no-op if unchanged), attaching
        it to, updating or detaching it from the egress process around that transaction; on
        failure the old rules and attachment stay."""
        old = self._applied.get(slot.netns)
        if old == policy:
            return
        switch = plan(old, policy)
        if switch.attach:
            await self._need_egress().attach(slot.netns, policy.owner_key_id, policy.network)
        try:
            await self._apply_policy(slot, policy, switch)
        except BaseException:
            if switch.attach and (old is None or not old.needs_proxy):
                await self._need_egress().detach(slot.netns)
            raise
        self._applied[slot.netns] = policy
        if self._egress is not None and switch.update:
            try:
                await self._egress.update(slot.netns, policy.network)
            except NotFound:  # dropped by an egress restart that could not re-attach it
                await self._egress.attach(slot.netns, policy.owner_key_id, policy.network)
        if self._egress is not None and switch.detach:
            await self._egress.detach(slot.netns)
        if self._resolved is not None and (switch.flush_resolved or switch.detach):
            self._resolved.forget(slot.netns)
        log.info(
            "egress policy updated",
            extra={"netns": slot.netns, "needs_proxy": policy.needs_proxy},
        )

    async def restore_policy(self, slot: NetSlot, policy: EgressPolicy) -> None:
        """Enforce ``policy`` on a slot an earlier run of the agent left (an adopted sandbox's):
        its rules are rewritten whole and, when it needs the egress process, it is attached to
        this run's, whose listeners replace those that died with the last one."""
        self._applied.pop(slot.netns, None)
        await self.update_policy(slot, policy)

    async def _apply_policy(self, slot: NetSlot, policy: EgressPolicy, switch: Switch) -> None:
        try:
            await run_in_fresh_thread(
                partial(slotops.apply_in_slot, slot,
                        partial(self._policy_update, policy, slot if switch.rewrite else None,
                                switch.flush_resolved)),
                name=f"netns-policy-{slot.netns}",
            )
        except AenvError:
            raise
        except Exception as exc:
            raise Internal(f"updating egress policy of {slot.netns} failed: {exc}") from exc

    def _need_egress(self) -> SlotEgress:
        if self._egress is None:
            raise Unavailable("this node runs no egress process: policies naming hosts, with "
                              "header rules or an egress proxy cannot be enforced here")
        return self._egress

    async def existing_slots(self) -> list[NetSlot]:
        """Slots of this prefix present in the kernel (after a restart); they count as in use."""
        slots = [slot_for(self._config, index) for index in self._netns_indices()]
        self._in_use.update(slot.index for slot in slots)
        return slots

    def adopt_slot_of(self, pid: int) -> NetSlot | None:
        """The slot whose netns process `pid` runs in (a VM an earlier node agent started), now
        held here; None when it runs in none of ours. Its rules stay as they are."""
        try:
            wanted = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            return None
        for index in self._netns_indices():
            slot = slot_for(self._config, index)
            try:
                if os.stat(netns_path(slot.netns)).st_ino == wanted:
                    self._in_use.add(index)
                    return slot
            except OSError:
                continue
        return None

    def processes_in_slots(self) -> list[int]:
        """Every process in one of this prefix's slots (VMs of sandboxes, the pool, builds)."""
        prefix = self._config.prefix
        return pids_in_netns([netns_name(prefix, index) for index in self._netns_indices()])

    async def destroy_orphans(self, keep: set[str]) -> list[str]:
        """Remove this prefix's slots whose netns name is not in ``keep`` (including half-built
        ones: a host veth without its netns). Slots being built right now are spared."""
        await self.settled()
        indices = set(self._netns_indices()) | set(self._host_veth_indices())
        orphans = [slot_for(self._config, index) for index in sorted(indices - self._building)]
        orphans = [slot for slot in orphans if slot.netns not in keep]
        await asyncio.gather(*(self.destroy_slot(slot) for slot in orphans))
        removed = [slot.netns for slot in orphans]
        if removed:
            log.warning("removed orphaned network slots", extra={"netns": removed})
        return removed

    def _reserve_index(self) -> int:
        """The first index after the last one given (wrapping) neither held here nor present
        in the kernel. Not the lowest free one: a slot's address then serves a new VM only
        after every other free one did, so a connection kept alive to the VM it served before
        (a client's pool; in a guest restored from that VM's capture, its very connection,
        which then hangs) has long expired. Synchronous, so concurrent create_slot calls on
        one event loop never pick the same index."""
        prefix, capacity = self._config.prefix, self._config.capacity
        for step in range(capacity):
            index = (self._next_index + step) % capacity
            if index in self._in_use:
                continue
            slot = slot_for(self._config, index)
            if netns_exists(slot.netns) or os.path.exists(f"/sys/class/net/{slot.host_veth}"):
                continue
            self._in_use.add(index)
            self._next_index = (index + 1) % capacity
            return index
        raise ResourceExhausted(f"no free network slot with prefix {prefix!r}")

    async def _discard(self, slot: NetSlot) -> None:
        try:
            await self.destroy_slot(slot)
        except Internal:
            log.exception("destroying a network slot failed", extra={"netns": slot.netns})

    def _ruleset(self, slot: NetSlot, policy: EgressPolicy, host_addresses: list[str]) -> str:
        return firewall.render_ruleset(slot, policy, self._blocked_extra(host_addresses),
                                       self._ports)

    def _policy_update(self, policy: EgressPolicy, slot: NetSlot | None, flush: bool,
                       host_addresses: list[str]) -> str:
        return firewall.render_policy_update(policy, self._blocked_extra(host_addresses), slot,
                                             self._ports, flush)

    def _blocked_extra(self, host_addresses: list[str]) -> list[str]:
        return blocked_extra(self._config, host_addresses)

    def _netns_indices(self) -> list[int]:
        prefix = self._config.prefix
        found = (index_from_netns(prefix, name) for name in list_netns())
        return sorted(i for i in found if i is not None and i < self._config.capacity)

    def _host_veth_indices(self) -> list[int]:
        prefix = self._config.prefix
        found = (index_from_host_veth(prefix, name) for name in os.listdir("/sys/class/net"))
        return sorted(
            index
            for index in found
            if index is not None and index < self._config.capacity
            if not netns_exists(netns_name(prefix, index))
        )


def blocked_extra(config: NetworkConfig, host_addresses: list[str]) -> list[str]:
    """What guests may never reach besides the always-blocked ranges: the root netns's own
    addresses and every slot of the pool."""
    return [config.pool_cidr, *host_addresses]


async def host_blocked_extra(config: NetworkConfig) -> list[str]:
    """``blocked_extra`` with this host's addresses now (for the egress process, which dials
    from the root netns)."""
    def read() -> list[str]:
        with IPRoute() as root:
            return blocked_extra(config, netlink.local_addresses(root))
    return await asyncio.to_thread(read)


def _ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)
