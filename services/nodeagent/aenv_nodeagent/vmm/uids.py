"""The unprivileged uids jailed VMs run as, one per VM from the node's configured range.

A uid is handed out again only once nothing runs as it: its VM ended and so did every process
that VM left (frozen copies outlive their QEMU, and a process of the same uid could trace or
signal them). The next uid after the last one handed out comes first, so a freed uid rests as
long as the range allows. Files need no such care: a jail binds only its own VM's files, and
writable only those no other VM reads (jailroot.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from aenv_common.errors import ResourceExhausted


@dataclass(frozen=True)
class UidRange:
    first: int
    count: int

    def __post_init__(self) -> None:
        if self.first < 1 or self.count < 1:
            raise ValueError(f"a VM uid range must hold positive uids, got {self}")

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid < self.first + self.count


def running_uids() -> set[int]:
    """The uids that own a process now (a /proc/<pid> directory is owned by its process's
    effective uid; QEMU stays dumpable, so this holds for jailed VMs)."""
    uids = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                uids.add(os.stat(f"/proc/{name}").st_uid)
            except OSError:
                pass  # it exited meanwhile
    return uids


class VmUids:
    """Which uids of `range` this node's VMs hold."""

    def __init__(self, uids: UidRange) -> None:
        self.range = uids
        self._held: set[int] = set()
        self._next = uids.first

    def acquire(self) -> int:
        """A uid no VM holds and no process runs as. :raise ResourceExhausted: none is left."""
        busy = self._held | running_uids()
        for step in range(self.range.count):
            uid = self.range.first + (self._next - self.range.first + step) % self.range.count
            if uid not in busy:
                self._held.add(uid)
                self._next = uid + 1
                return uid
        raise ResourceExhausted(f"every VM uid of {self.range} is in use")

    def hold(self, uid: int) -> None:
        """An adopted VM's uid (an earlier run of the agent handed it out)."""
        self._held.add(uid)

    def release(self, uid: int) -> None:
        self._held.discard(uid)
