"""The slot's ``resolved4``/``resolved6`` nft sets: where non-TCP egress by name is enforced.

TCP to a name goes through the egress process, which checks the name itself. Everything else
(UDP, ICMP) is filtered by nft alone, which knows no names: the slot's forward chain accepts
addresses in these sets, which hold what the platform resolver answered for names the policy
allows, each for its answer's TTL (nft's per-element ``timeout``). The egress process reports
them (its ``resolved`` message) and this module, in the privileged agent, writes them.

A DNS answer must never open the host or private space, whatever the upstream said: addresses in
the always-blocked ranges, the slot pool or any of the node's own addresses are dropped here,
independently of the egress process's own filtering.

Reports arrive per query, often in bursts: per slot netns, one writer applies whatever
accumulated meanwhile as one nft transaction (a batch), and every caller returns once its
addresses are in. An element is rewritten only to extend its life: a shorter answer for an
address another name vouches for longer never cuts that short. ``forget`` drops that memory when
the sets are emptied (a policy update, a detach).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import time
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial

from aenv_common.egress import IPAddress, is_blocked
from aenv_common.errors import AenvError, Internal, NotFound

from . import slotops
from .firewall import FAMILY, RESOLVED4, RESOLVED6, TABLE
from .namespaces import run_in_fresh_thread
from .slots import NetSlot, NetworkConfig, index_from_netns, slot_for

log = logging.getLogger(__name__)

def render_additions(
    timeouts: dict[IPAddress, int], present: Collection[IPAddress] = (),
    host_addresses: Iterable[str] = (),
) -> str:
    """One nft transaction setting each address's element with its timeout in seconds; empty
    when nothing remains once node addresses are left out. A new element is a plain add
    (~0.1 ms). An element ``present`` (one being extended) is added, deleted and added again:
    kernels before 6.x keep an existing element's timeout on a plain add, and nothing sees it
    missing in between; but a transaction that deletes waits an RCU grace period (~14 ms here),
    which is why extensions are rare (see egress/dns_report.py)."""
    own = {ipaddress.ip_address(a) for a in host_addresses}
    kept = {a: t for a, t in timeouts.items() if a not in own and not is_blocked(a)}
    lines = []
    for name, version in ((RESOLVED4, 4), (RESOLVED6, 6)):
        family = sorted((a, t) for a, t in kept.items() if a.version == version)
        if not family:
            continue
        where = f"element {FAMILY} {TABLE} {name}"
        extended = ", ".join(str(a) for a, _ in family if a in present)
        if extended:
            lines += [f"add {where} {{ {extended} }}", f"delete {where} {{ {extended} }}"]
        timed = ", ".join(f"{a} timeout {t}s" for a, t in family)
        lines.append(f"add {where} {{ {timed} }}")
    return "\n".join([*lines, ""]) if lines else ""


@dataclass
class _Slot:
    pending: dict[IPAddress, int] = field(default_factory=dict)
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    writer: asyncio.Task[None] | None = None
    expiry: dict[IPAddress, float] = field(default_factory=dict)  # monotonic deadline in nft
    generation: int = 0  # bumped by forget: a write in flight then records nothing


class ResolvedSets:
    """Writes every slot's resolved sets (one per agent, for all its slots)."""

    def __init__(self, config: NetworkConfig) -> None:
        self._config = config
        self._slots: dict[str, _Slot] = {}

    async def add(self, netns: str, addresses: Sequence[str | IPAddress], ttl_s: float) -> None:
        """Let the slot's non-TCP traffic reach ``addresses`` for ``ttl_s`` (the egress process's
        ``resolved`` report). Returns once nft holds them; raises NotFound for an unknown slot."""
        index = index_from_netns(self._config.prefix, netns)
        if index is None:
            raise NotFound(f"no network slot {netns!r}")
        timeout = max(1, math.ceil(ttl_s))
        state = self._slots.setdefault(netns, _Slot())
        deadline = time.monotonic() + timeout
        wanted = {a: timeout for a in self._public(addresses) if state.expiry.get(a, 0) < deadline}
        if not wanted:
            return
        for address, seconds in wanted.items():
            state.pending[address] = max(seconds, state.pending.get(address, 0))
        done = asyncio.get_running_loop().create_future()
        state.waiters.append(done)
        if state.writer is None:
            state.writer = asyncio.get_running_loop().create_task(self._write(netns, index, state))
        await asyncio.shield(done)

    def forget(self, netns: str) -> None:
        """The slot's sets were emptied or are gone: the next answer is written again."""
        state = self._slots.get(netns)
        if state is None:
            return
        state.expiry.clear()
        state.generation += 1
        if state.writer is None:
            del self._slots[netns]

    async def _write(self, netns: str, index: int, state: _Slot) -> None:
        """Apply batches until none is pending; each caller learns its own batch's outcome."""
        slot = slot_for(self._config, index)
        try:
            while state.pending:
                batch, waiters = state.pending, state.waiters
                state.pending, state.waiters = {}, []
                started = time.monotonic()
                present = {a for a in batch if state.expiry.get(a, 0.0) > started}
                generation = state.generation
                error = await self._apply(slot, batch, present)
                if error is None and generation == state.generation:
                    for address, seconds in batch.items():
                        state.expiry[address] = started + seconds
                _settle(waiters, error)
                self._prune(state, started)
        finally:
            state.writer = None
            _settle(state.waiters, Internal(f"resolved sets of {netns} not written"))

    async def _apply(
        self, slot: NetSlot, batch: dict[IPAddress, int], present: set[IPAddress],
    ) -> Exception | None:
        try:
            await run_in_fresh_thread(
                partial(slotops.apply_in_slot, slot, partial(render_additions, batch, present)),
                name=f"netns-resolved-{slot.netns}")
        except AenvError as exc:
            log.warning("adding resolved addresses failed",
                        extra={"netns": slot.netns, "error": str(exc)})
            return exc
        except Exception as exc:
            return Internal(f"adding resolved addresses to {slot.netns} failed: {exc}")
        log.debug("resolved addresses added", extra={"netns": slot.netns, "count": len(batch)})
        return None

    def _public(self, addresses: Sequence[str | IPAddress]) -> list[IPAddress]:
        pool = self._config.pool
        parsed = [ipaddress.ip_address(a) for a in addresses]
        return [a for a in parsed if not is_blocked(a) and a not in pool]

    @staticmethod
    def _prune(state: _Slot, now: float) -> None:
        for address in [a for a, deadline in state.expiry.items() if deadline <= now]:
            del state.expiry[address]


def _settle(waiters: list[asyncio.Future[None]], error: Exception | None) -> None:
    for waiter in waiters:
        if waiter.done():
            continue
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)
    waiters.clear()
