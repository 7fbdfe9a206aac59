"""How a slot's policy change involves the node's egress process (egress/supervisor.py).

A policy that ``needs_proxy`` has nft redirect the guest's TCP and DNS to listeners the egress
process serves; one that does not keeps the egress process off the path. ``plan`` says, for a
switch from the policy last applied (None: unknown, e.g. a slot an earlier agent run made) to a
new one, what happens around the single nft transaction: the slot is attached *before* nft
redirects to it, detached *after* nft stopped, told of a new policy after nft changed, and
whether the transaction rewrites the redirect chains and sets or only the egress chain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aenv.cluster.v1 import cluster_pb2

from .firewall import EgressPorts
from .policy import EgressPolicy


class SlotEgress(Protocol):
    """The egress process as the network manager drives it (EgressSupervisor)."""

    @property
    def ports(self) -> EgressPorts: ...

    async def attach(self, netns: str, owner_key_id: str,
                     policy: cluster_pb2.NetworkPolicy) -> None: ...

    async def update(self, netns: str, policy: cluster_pb2.NetworkPolicy) -> None: ...

    async def detach(self, netns: str) -> None: ...


class ResolvedMemory(Protocol):
    """What remembers the slot's resolved-set elements (network/resolved_sets.py)."""

    def forget(self, netns: str) -> None: ...


@dataclass(frozen=True)
class Switch:
    attach: bool = False  # before nft: the listeners exist when the redirect starts
    update: bool = False  # after nft
    detach: bool = False  # after nft: no redirect points at the slot's listeners any more
    rewrite: bool = False  # redirect, input chains and resolved sets change too
    flush_resolved: bool = False  # the allowed names changed: old answers vouch no more


def plan(old: EgressPolicy | None, new: EgressPolicy) -> Switch:
    if old is None:  # unknown rules: rewrite all, (re)attach when needed
        return Switch(attach=new.needs_proxy, detach=not new.needs_proxy, rewrite=True,
                      flush_resolved=new.needs_proxy)
    if not new.needs_proxy:
        return Switch(detach=old.needs_proxy, rewrite=old.needs_proxy)
    if not old.needs_proxy:
        return Switch(attach=True, rewrite=True)
    flush = old.rules.allow_names != new.rules.allow_names
    if old.owner_key_id != new.owner_key_id:  # the secrets it may fill are another key's
        return Switch(attach=True, rewrite=flush, flush_resolved=flush)
    return Switch(update=True, rewrite=flush, flush_resolved=flush)
