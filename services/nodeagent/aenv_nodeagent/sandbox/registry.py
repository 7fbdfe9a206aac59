"""Which sandboxes this node holds, running or paused, what each one's disk stands on, and which
are busy: the bookkeeping every operation shares, with no I/O of its own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Conflict, NotFound
from aenv_nodeagent.sandbox.model import Chain, Paused, Sandbox


class SandboxRegistry:
    """The sandboxes of one node, by id. A sandbox is running (it has a VM) or paused, never
    both; at most one operation holds it at a time (`exclusive`)."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self._running: dict[str, Sandbox] = {}
        self._paused: dict[str, Paused] = {}
        self._chains: dict[str, Chain] = {}  # of running sandboxes
        self._restoring: dict[str, Chain] = {}  # of sandboxes being restored
        self._busy: set[str] = set()
        # Being killed: still tracked, no longer sent traffic.
        self._leaving: set[str] = set()

    # --- running -------------------------------------------------------------------------------

    def get(self, sandbox_id: str) -> Sandbox:
        """:raise NotFound: no running sandbox has this id."""
        try:
            return self._running[sandbox_id]
        except KeyError:
            raise NotFound(f"sandbox \"{sandbox_id}\" not found") from None

    def find(self, sandbox_id: str) -> Sandbox | None:
        return self._running.get(sandbox_id)

    def serving(self, sandbox_id: str) -> Sandbox | None:
        """The sandbox, if its VM takes traffic (running and not being killed)."""
        return None if sandbox_id in self._leaving else self._running.get(sandbox_id)

    def all(self) -> list[Sandbox]:
        """The running sandboxes."""
        return list(self._running.values())

    def is_running(self, sandbox_id: str) -> bool:
        return sandbox_id in self._running

    def sampling_targets(self) -> list[str]:
        # Busy ones are being paused, captured or reset: a request into the guest now would
        # compete with the operation (or be captured half-done into a snapshot).
        return [sid for sid in self._running if sid not in self._busy]

    def allocated(self) -> cluster_pb2.Resources:
        total = cluster_pb2.Resources()
        for sbx in self._running.values():
            total.vcpus += sbx.record.resources.vcpus
            total.memory_mib += sbx.record.resources.memory_mib
            total.disk_mib += sbx.record.resources.disk_mib
        return total

    def chain(self, sandbox_id: str) -> Chain:
        """What a running sandbox's disk stands on (its template alone, unless known better)."""
        chain = self._chains.get(sandbox_id)
        if chain is None:
            chain = self._chains[sandbox_id] = Chain(self.get(sandbox_id).record.template_id, [])
        return chain

    def restoring(self, sandbox_id: str, chain: Chain) -> None:
        """A restore onto `chain` began: its layers are in use from now on."""
        self._restoring[sandbox_id] = chain

    def restore_ended(self, sandbox_id: str) -> None:
        self._restoring.pop(sandbox_id, None)

    def add_running(self, sandbox: Sandbox, chain: Chain) -> None:
        self._running[sandbox.sandbox_id] = sandbox
        self._chains[sandbox.sandbox_id] = chain
        self._restoring.pop(sandbox.sandbox_id, None)

    def remove_running(self, sandbox_id: str) -> Sandbox | None:
        self._leaving.discard(sandbox_id)
        self._chains.pop(sandbox_id, None)
        return self._running.pop(sandbox_id, None)

    def leaving(self, sandbox_id: str) -> None:
        """The sandbox is being killed: traffic to it is refused from now on."""
        self._leaving.add(sandbox_id)

    # --- paused --------------------------------------------------------------------------------

    def paused(self, sandbox_id: str) -> Paused | None:
        return self._paused.get(sandbox_id)

    def all_paused(self) -> list[Paused]:
        return list(self._paused.values())

    def paused_ids(self) -> list[str]:
        return list(self._paused)

    def add_paused(self, paused: Paused) -> None:
        self._paused[paused.record.sandbox_id] = paused

    def remove_paused(self, sandbox_id: str) -> Paused | None:
        return self._paused.pop(sandbox_id, None)

    # --- either --------------------------------------------------------------------------------

    def has(self, sandbox_id: str) -> bool:
        return sandbox_id in self._running or sandbox_id in self._paused

    def record(self, sandbox_id: str) -> cluster_pb2.SandboxRecord:
        """:raise NotFound: the node has no sandbox with this id."""
        if paused := self._paused.get(sandbox_id):
            return paused.record
        return self.get(sandbox_id).record

    def records(self) -> list[cluster_pb2.SandboxRecord]:
        running = [sbx.record for sid, sbx in self._running.items() if sid not in self._paused]
        return running + [p.record for p in self._paused.values()]

    def layers_in_use(self) -> set[str]:
        """The frozen disk layers a running, paused or restoring sandbox stands on."""
        return {layer for chain in self._all_chains() for layer in chain.layers}

    def templates_in_use(self) -> set[str]:
        """The templates a running, paused or restoring sandbox stands on."""
        running = {sbx.record.template_id for sbx in self._running.values()}
        return running | {chain.template_id for chain in self._all_chains()}

    def _all_chains(self) -> list[Chain]:
        return [*self._chains.values(), *self._restoring.values(),
                *(p.chain for p in self._paused.values())]

    # --- one operation at a time ---------------------------------------------------------------

    def is_busy(self, sandbox_id: str) -> bool:
        return sandbox_id in self._busy

    @contextlib.contextmanager
    def exclusive(self, sandbox_id: str) -> Iterator[None]:
        """Hold the sandbox for one operation: a second one is refused, never queued.

        :raise Conflict: another operation holds it.
        """
        if sandbox_id in self._busy:
            raise Conflict(f"sandbox \"{sandbox_id}\" is busy")
        self._busy.add(sandbox_id)
        try:
            yield
        finally:
            self._busy.discard(sandbox_id)

    @contextlib.contextmanager
    def creating(self, sandbox_id: str) -> Iterator[None]:
        """Hold a new sandbox's id while it is made.

        :raise Conflict: the id is taken, or being made already.
        """
        if self.has(sandbox_id) or sandbox_id in self._busy:
            raise Conflict(f"sandbox \"{sandbox_id}\" already exists")
        with self.exclusive(sandbox_id):
            yield
