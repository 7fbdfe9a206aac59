"""What the platform resolver told one sandbox: which addresses each name resolved to, until when.

Filtering by name rests on this record. A guest may only reach an allowed name at an address
the platform's own resolver returned for that name (an SNI of ``api.example.com`` towards any
other address is refused), and non-TCP traffic to an allowed name is let through by the same
addresses. A guest with its own resolver, DoH or /etc/hosts entries therefore gains nothing:
its addresses are not in here.

One ``ResolvedNames`` per slot netns, so one sandbox's answers never vouch for another's. Each
(name, address) pair lives for the answer's TTL clamped to [5 s, 1 h]: at least long enough for
the guest to connect after its lookup, at most an hour so a stale answer cannot keep a path
open forever (the resolver never hands the guest a longer TTL than it records). Memory is
bounded: past ``max_entries`` pairs the oldest recorded go first. A CNAME chain is recorded
under the name the guest asked for, since that is the name its connection will carry.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from ipaddress import IPv4Address, IPv6Address

IPAddress = IPv4Address | IPv6Address

MIN_TTL_S = 5.0
MAX_TTL_S = 3600.0
DEFAULT_MAX_ENTRIES = 2048  # ~1.1 MiB when full


def clamp_ttl(ttl_s: float) -> float:
    return min(max(float(ttl_s), MIN_TTL_S), MAX_TTL_S)


def normalize_name(name: str) -> str:
    """DNS names compare case-insensitively and without the root's trailing dot."""
    return name.rstrip(".").lower()


def _allow_every_name(_name: str) -> bool:
    return True


class ResolvedNames:
    """The live (name, address) pairs of one netns. Not thread-safe: the egress process uses
    it from its event loop only."""

    def __init__(
        self,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        allowed: Callable[[str], bool] = _allow_every_name,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_entries = max_entries
        self._allowed = allowed
        self._clock = clock
        # Insertion order is record order, so the front is the oldest to evict.
        self._expiry: OrderedDict[tuple[str, IPAddress], float] = OrderedDict()
        self._names_of: dict[IPAddress, set[str]] = {}

    def __len__(self) -> int:
        return len(self._expiry)

    def set_allowed(self, allowed: Callable[[str], bool]) -> None:
        """Which names count for ``is_resolved_any_allowed`` (the policy's allow-listed names);
        replaced with the policy, so a name dropped from the allow list stops vouching at once."""
        self._allowed = allowed

    def record(self, name: str, addresses: Iterable[IPAddress], ttl_s: float) -> float:
        """Remember ``addresses`` as answers for ``name``; returns the clamped TTL used."""
        ttl = clamp_ttl(ttl_s)
        expires = self._clock() + ttl
        key_name = normalize_name(name)
        for address in addresses:
            key = (key_name, address)
            self._expiry.pop(key, None)
            self._expiry[key] = expires
            self._names_of.setdefault(address, set()).add(key_name)
        self._evict_overflow()
        return ttl

    def is_resolved_for(self, name: str, address: IPAddress) -> bool:
        return self._live((normalize_name(name), address))

    def names_for(self, address: IPAddress) -> list[str]:
        """The names the resolver gave ``address`` for, within their TTL."""
        return [n for n in list(self._names_of.get(address, ())) if self._live((n, address))]

    def is_resolved_any_allowed(self, address: IPAddress) -> bool:
        """Whether the resolver returned ``address`` for some name the policy allows by name."""
        names = self._names_of.get(address)
        if not names:
            return False
        return any(self._live((n, address)) and self._allowed(n) for n in list(names))

    def clear(self) -> None:
        """Forget everything (the sandbox detached)."""
        self._expiry.clear()
        self._names_of.clear()

    def _live(self, key: tuple[str, IPAddress]) -> bool:
        expires = self._expiry.get(key)
        if expires is None:
            return False
        if expires > self._clock():
            return True
        self._forget(key)
        return False

    def _evict_overflow(self) -> None:
        while len(self._expiry) > self._max_entries:
            key, _ = self._expiry.popitem(last=False)
            self._unindex(key)

    def _forget(self, key: tuple[str, IPAddress]) -> None:
        del self._expiry[key]
        self._unindex(key)

    def _unindex(self, key: tuple[str, IPAddress]) -> None:
        name, address = key
        names = self._names_of.get(address)
        if names is not None:
            names.discard(name)
            if not names:
                del self._names_of[address]
