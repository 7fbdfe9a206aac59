"""Resources promised to placements that the nodes have not accounted for yet.

Without them a burst would pile every sandbox onto the same node: its record only shows the new
allocation after the node agent created the sandbox. A reservation ends when the node's record is
rewritten after the sandbox's record appeared (the node agent's allocation then includes it),
when the node leaves, or after a TTL (creation failed or never happened).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2
from aenv_scheduler.placement import add

Resources = cluster_pb2.Resources


@dataclass
class Reservation:
    sandbox_id: str
    node_id: str
    resources: Resources
    expires_at: float
    # mod revision of the sandbox's record once the node agent wrote it; 0 before.
    sandbox_revision: int = 0


class Reservations:
    def __init__(
        self,
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        on_release: Callable[[str], None] | None = None,
    ) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        # Told of every reservation that ended (the ledger in etcd forgets it too).
        self._on_release = on_release
        # Insertion order == expiry order (one TTL for all), so expiry pops from the front.
        self._by_sandbox: dict[str, Reservation] = {}
        self._by_node: dict[str, dict[str, Reservation]] = {}
        self._held: dict[str, Resources] = {}

    def __len__(self) -> int:
        return len(self._by_sandbox)

    @property
    def held(self) -> dict[str, Resources]:
        """Reserved resources per node id."""
        return self._held

    @property
    def ttl_seconds(self) -> float:
        return self._ttl

    def get(self, sandbox_id: str) -> Reservation | None:
        return self._by_sandbox.get(sandbox_id)

    def add(
        self,
        node_id: str,
        sandbox_id: str,
        resources: Resources,
        ttl_seconds: float | None = None,
    ) -> None:
        """`ttl_seconds`: what is left of an adopted reservation's TTL (default: a whole TTL).
        Adopted ones may come out of expiry order: they only expire a little later."""
        self._drop(sandbox_id)  # a retried Schedule replaces its earlier placement (same key)
        ttl = self._ttl if ttl_seconds is None else ttl_seconds
        reservation = Reservation(sandbox_id, node_id, resources, self._clock() + ttl)
        self._by_sandbox[sandbox_id] = reservation
        self._by_node.setdefault(node_id, {})[sandbox_id] = reservation
        self._held[node_id] = add(self._held.get(node_id, Resources()), resources)

    def release(self, sandbox_id: str) -> bool:
        if not self._drop(sandbox_id):
            return False
        if self._on_release is not None:
            self._on_release(sandbox_id)
        return True

    def _drop(self, sandbox_id: str) -> bool:
        reservation = self._by_sandbox.pop(sandbox_id, None)
        if reservation is None:
            return False
        node_id = reservation.node_id
        del self._by_node[node_id][sandbox_id]
        if not self._by_node[node_id]:
            del self._by_node[node_id]
            del self._held[node_id]
        else:
            held = self._held[node_id]
            held.vcpus -= reservation.resources.vcpus
            held.memory_mib -= reservation.resources.memory_mib
            held.disk_mib -= reservation.resources.disk_mib
        return True

    def sandbox_recorded(self, sandbox_id: str, mod_revision: int) -> None:
        reservation = self._by_sandbox.get(sandbox_id)
        if reservation is not None and not reservation.sandbox_revision:
            reservation.sandbox_revision = mod_revision

    def node_updated(self, node_id: str, mod_revision: int) -> int:
        """The node rewrote its record at `mod_revision`: its allocation now includes every
        sandbox recorded before. Returns how many reservations ended."""
        settled = [
            r.sandbox_id
            for r in self._by_node.get(node_id, {}).values()
            if 0 < r.sandbox_revision < mod_revision
        ]
        for sandbox_id in settled:
            self.release(sandbox_id)
        return len(settled)

    def node_gone(self, node_id: str) -> int:
        gone = list(self._by_node.get(node_id, {}))
        for sandbox_id in gone:
            self.release(sandbox_id)
        return len(gone)

    def expire(self) -> int:
        now = self._clock()
        expired = 0
        while self._by_sandbox:
            oldest = next(iter(self._by_sandbox.values()))
            if oldest.expires_at > now:
                break
            self.release(oldest.sandbox_id)
            expired += 1
        return expired
