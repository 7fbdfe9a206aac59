"""What the resolver tells the agent, and how long the guest may cache what it was told.

UDP and ICMP to an allowed name pass nft only while the answer's addresses sit in the slot's
``resolved`` sets, so the guest must never cache an address longer than the set holds it. Each
report (the egress process's ``resolved`` message: a round trip to the agent and an nft
transaction) sets the elements' timeout to the answer's TTL. A stub that does not cache (glibc)
asks again before every connection, so a report per answer would put that round trip in front
of every request: an address reported recently enough (at least half its new TTL left) is not
reported again, and the guest is told the TTL the set still holds instead.

A policy update may empty the sets, so it forgets what was reported (``reset``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from aenv_common.egress import is_blocked

from .resolved import IPAddress

log = logging.getLogger(__name__)

# (netns, public addresses, ttl_s): the egress process's `resolved` message to the agent.
ReportResolved = Callable[[str, list[IPAddress], float], Awaitable[None]]

REPORT_TIMEOUT_S = 2.0
REFRESH_FRACTION = 0.5
MAX_REPORTED = 4096


class Reporter:
    def __init__(
        self, netns: str, report: ReportResolved, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._netns = netns
        self._report = report
        self._clock = clock
        self._until: dict[IPAddress, float] = {}  # what the agent's sets hold, until when

    def reset(self) -> None:
        self._until.clear()

    async def vouch(self, addresses: Sequence[IPAddress], ttl: float) -> float:
        """Have the sets hold the public ``addresses`` of an allowed name; returns the TTL the
        guest may cache them for (``ttl``, or less when an earlier report still covers them)."""
        public = [address for address in addresses if not is_blocked(address)]
        if not public:
            return ttl
        now = self._clock()
        held = min(self._until.get(address, now) for address in public) - now
        if held >= ttl * REFRESH_FRACTION:
            return min(ttl, held)
        try:
            await asyncio.wait_for(self._report(self._netns, public, ttl), REPORT_TIMEOUT_S)
        except Exception as exc:  # TCP still works from ResolvedNames alone
            log.warning("reporting resolved addresses failed",
                        extra={"netns": self._netns, "error": repr(exc)})
            return ttl
        self._remember(public, now + ttl)
        return ttl

    def _remember(self, addresses: list[IPAddress], until: float) -> None:
        if len(self._until) + len(addresses) > MAX_REPORTED:
            now = self._clock()
            self._until = {a: t for a, t in self._until.items() if t > now}
            if len(self._until) + len(addresses) > MAX_REPORTED:
                self._until.clear()  # only costs reports sent again
        for address in addresses:
            self._until[address] = max(until, self._until.get(address, 0.0))
