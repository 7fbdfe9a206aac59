"""The unprivileged uids jailed VMs run as, one per VM from the node's configured range.

A uid is handed out again only once nothing runs as it: its VM ended and so did every process
that VM left (frozen copies outlive their QEMU, and a process of the same uid could trace or
signal them). The next uid after the last one handed out comes first, so a freed uid rests as
long as the range allows. Files need no such care: a jail binds only its own VM's files, and
writable only those no other VM reads (jailroot.py).

The range must be the VMs' alone: a uid (or gid: a VM runs with the gid of its uid's number) that
an account or group of the host has, or that a subordinate id range (/etc/subuid, /etc/subgid)
maps into some user's namespaces, would give that user's processes or files power over a VM, and
the VM over them. `check_unclaimed` refuses such a range at the node's start.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from aenv_common.errors import InvalidArgument, ResourceExhausted

ETC = Path("/etc")
# The id databases a range must stay out of: name -> (field of the first id, field of a count).
_ID_FILES = {"passwd": (2, None), "group": (2, None), "subuid": (1, 2), "subgid": (1, 2)}
_SHOWN = 3  # claims named in the error; the rest are counted


class UidRangeTaken(InvalidArgument):
    """The configured VM uid range holds ids the host already gives to accounts or to users'
    subordinate ranges."""


@dataclass(frozen=True)
class UidRange:
    first: int
    count: int

    def __post_init__(self) -> None:
        if self.first < 1 or self.count < 1:
            raise ValueError(f"a VM uid range must hold positive uids, got {self}")

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid < self.first + self.count


def claims(uids: UidRange, name: str, text: str) -> list[str]:
    """Entries of one id database (`name` as in /etc) whose ids fall in `uids`, described."""
    first_field, count_field = _ID_FILES[name]
    found = []
    for line in text.splitlines():
        fields = line.split(":")
        if line.startswith("#") or len(fields) <= max(first_field, count_field or 0):
            continue
        try:
            first = int(fields[first_field])
            count = int(fields[count_field]) if count_field is not None else 1
        except ValueError:
            continue
        if first < uids.first + uids.count and uids.first < first + count:
            ids = str(first) if count == 1 else f"{first}-{first + count - 1}"
            found.append(f"{ids} of {fields[0]} in /etc/{name}")
    return found


def check_unclaimed(uids: UidRange, etc: Path = ETC) -> None:
    """:raise UidRangeTaken: an account, group or subordinate range of the host uses an id of
    `uids` (a database the host does not have claims nothing)."""
    found = []
    for name in _ID_FILES:
        try:
            found += claims(uids, name, (etc / name).read_text(errors="replace"))
        except FileNotFoundError:
            continue
    if found:
        more = f" and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""
        raise UidRangeTaken(
            f"the VM uid range {uids.first}-{uids.first + uids.count - 1} (vmm_uid_first, "
            f"vmm_uid_count) is in use on this host: {'; '.join(found[:_SHOWN])}{more}; "
            "give the VMs ids nothing else has")


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
