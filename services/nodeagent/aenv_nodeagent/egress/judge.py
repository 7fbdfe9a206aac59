"""What happens to a guest connection once its name is known — or known to be absent.

One judgement for every moment the name becomes known: in the first bytes, or later (a client
that stayed silent past the wait and names its host afterwards). ``decide`` gives the verdict;
then a denied connection is reset, an allowed one whose host has header rules goes to
``intercept``, any other is spliced. The proxy (proxy.py) only carries that out.

``address_is_names`` comes from the slot's ``ResolvedNames``. A guest that reached an allowed
name's address without asking our resolver (its /etc/hosts, a cached answer) gets the name
resolved afresh: the answer is recorded in the slot's record for its TTL (so the next
connection needs no lookup), concurrent connections naming the same host share one lookup,
and a lookup no server answered is asked once more before the connection is refused, the
reason in the debug log.

How long the proxy waits for a name (``patient``): a client always speaks first on 80 and 443
and towards a host with header rules (rules name hosts, not ports, so any port of an address
a rule covers); there the proxy waits up to ``name_wait_s`` (curl in a TCG guest takes a
quarter of a second between connect and its ClientHello). Elsewhere the short peek, so a
protocol whose server speaks first is not stalled.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aenv_common.egress import EgressRules, NameClass, decide, rules_for
from aenv_common.egress.rules import NetworkRule

from .dns import Resolution
from .dns_upstream import UpstreamFailed
from .resolved import IPAddress, ResolvedNames

log = logging.getLogger(__name__)

CLIENT_FIRST_PORTS = frozenset({80, 443})
LOOKUP_ATTEMPTS = 2

Resolve = Callable[[str, Sequence[str]], Awaitable[Resolution]]


class Action(enum.Enum):
    DENY = "deny"
    INTERCEPT = "intercept"  # allowed, and the host has header rules
    SPLICE = "splice"


@dataclass(frozen=True)
class Dispatch:
    action: Action
    host: str  # the connection's name, or its address as text
    rules: Sequence[NetworkRule]
    reason: str


class Handoff(Exception):
    """A name learnt late is a rule host's: the connection goes to ``intercept`` instead."""

    def __init__(self, dispatch: Dispatch, first: bytes) -> None:
        super().__init__(dispatch.host)
        self.dispatch = dispatch
        self.first = first


class Judge:
    """One slot's judgement; shares the slot's ``ResolvedNames`` with its resolver."""

    def __init__(self, netns: str, resolved: ResolvedNames, resolve: Resolve) -> None:
        self.netns = netns
        self._resolved = resolved
        self._resolve = resolve
        self._lookups: dict[str, asyncio.Task[str | None]] = {}

    def patient(self, rules: EgressRules, address: IPAddress, port: int) -> bool:
        """Whether the client surely speaks first here, so its name is worth waiting for."""
        if port in CLIENT_FIRST_PORTS:
            return True
        if not rules.rules:
            return False
        return any(rules_for(rules, host)
                   for host in [str(address), *self._resolved.names_for(address)])

    async def dispatch(self, rules: EgressRules, dns_servers: Sequence[str],
                       address: IPAddress, port: int, name: str | None,
                       when: str = "") -> Dispatch:
        """The verdict on ``address`` named ``name`` and what follows from it; logged."""
        vouched, note = await self._address_is_names(rules, dns_servers, address, name)
        decision = decide(rules, address, name, vouched)
        reason = when + decision.reason + note
        self.log_decision(address, port, name, reason, decision.allowed)
        host = name or str(address)
        if not decision.allowed:
            return Dispatch(Action.DENY, host, (), reason)
        matching = rules_for(rules, host)
        return Dispatch(Action.INTERCEPT if matching else Action.SPLICE, host, matching, reason)

    async def close(self) -> None:
        for task in self._lookups.values():
            task.cancel()
        await asyncio.gather(*self._lookups.values(), return_exceptions=True)

    async def _address_is_names(self, rules: EgressRules, dns_servers: Sequence[str],
                                address: IPAddress, name: str | None) -> tuple[bool, str]:
        """Whether the resolver vouches for ``address`` under ``name``, and a note for the log
        when a fresh lookup could not say."""
        if name is None:
            return self._resolved.is_resolved_any_allowed(address), ""
        if self._resolved.is_resolved_for(name, address):
            return True, ""
        if rules.classify_name(name) is not NameClass.ALLOWED:
            return False, ""
        task = self._lookups.get(name)
        if task is None:
            task = asyncio.ensure_future(self._lookup(name, dns_servers))
            self._lookups[name] = task
            task.add_done_callback(lambda _: self._lookups.pop(name, None))
        failure = await asyncio.shield(task)
        return self._resolved.is_resolved_for(name, address), failure or ""

    async def _lookup(self, name: str, dns_servers: Sequence[str]) -> str | None:
        """Resolves ``name`` afresh into the slot's record; the failure, if no server
        answered."""
        failure = ""
        for attempt in range(1, LOOKUP_ATTEMPTS + 1):
            try:
                answer = await self._resolve(name, dns_servers)
            except UpstreamFailed as exc:
                failure = f" (lookup failed: {exc})"
                log.debug("egress lookup failed", extra={
                    "netns": self.netns, "host": name, "attempt": attempt, "error": str(exc)})
                continue
            if answer.addresses:
                self._resolved.record(name, answer.addresses, answer.ttl_s)
            return None
        return failure

    def log_decision(self, address: IPAddress, port: int, name: str | None, reason: str,
             allowed: bool) -> None:
        log.debug("egress decision", extra={"netns": self.netns, "address": str(address),
                                            "port": port, "host": name, "allowed": allowed,
                                            "reason": reason})
