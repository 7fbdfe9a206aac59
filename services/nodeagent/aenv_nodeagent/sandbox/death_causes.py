"""Why a sandbox's VM ended on its own, from what the node can still read once it has (pure: the
exit watch in sandbox/watch.py gathers the facts, this names the cause).

The facts, in the order they decide:
- the VM's cgroup counted an OOM kill since it was watched: the host's OOM killer took QEMU
  (VMM_CRASH; memory.events / memory.oom_control `oom_kill`, confinement/);
- QEMU died of SIGBUS while the filesystem under its memory and state (the sandbox's directory)
  had no room left: a page of its file-backed memory could not be written (DISK_FULL);
- QEMU died of a signal, or exited non-zero: the VMM crashed or something killed it (VMM_CRASH);
- QEMU exited with status 0: the guest ended itself. Guests run with `panic=-1` and QEMU with
  `-no-reboot`, so a panic resets the guest at once and the reset ends QEMU cleanly; only the
  guest's console says what happened. Its tail is read for the kernel's own words: a panic
  ("Kernel panic - not syncing: …") that is about memory, or follows the OOM killer's report,
  is GUEST_OOM; any other panic GUEST_CRASH; a power-off ("reboot: Power down") or a restart
  GUEST_CRASH too (a sandbox's VM never restarts), each saying which.

Guests log errors and worse to their console (`quiet loglevel=4`) unless built verbose: the panic
line (KERN_EMERG) and the OOM killer's one line "Out of memory: Killed process …" (KERN_ERR) are
there, its longer report (KERN_WARNING) only in verbose guests. So a guest whose OOM killer took
envd (its init then exits: "Attempted to kill init") reads as OOM, as does one whose kernel
panics on memory itself ("System is deadlocked on memory", `vm.panic_on_oom`).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from aenv.cluster.v1 import cluster_pb2 as c

PANIC = "Kernel panic - not syncing:"
_END_MARKER = "---[ end "
# The kernel's words when memory ran out: in a panic's reason or the OOM killer's report.
_OOM_WORDS = ("out of memory", "oom-kill", "oom_kill", "deadlocked on memory", "oom-killer")
# How far before a panic an OOM report still explains it (verbose guests dump ~100 lines).
OOM_WINDOW_LINES = 200
_POWER_OFF = ("reboot: Power down", "reboot: System halted")
_RESTART = "reboot: Restarting system"
_DETAIL_MAX = 200
DISK_FULL_SIGBUS = ("qemu killed by SIGBUS: the host filesystem under its memory file has no "
                    "room left")


@dataclass(frozen=True)
class Death:
    cause: c.DeathCause
    detail: str


@dataclass(frozen=True)
class VmExit:
    """What the node knows of a VM that exited: QEMU's status (None: unknown, a QEMU an earlier
    agent started is nobody's child here), whether its cgroup's OOM kill count rose, the last
    lines of the guest's console, oldest first, and whether the filesystem holding its memory
    and state files was full when the exit was seen."""

    status: int | None
    host_oom_kills: int = 0
    console: Sequence[str] = ()
    state_disk_full: bool = False


def classify_exit(exit: VmExit) -> Death:
    """The cause of a VM's exit no operation of the node asked for."""
    if exit.host_oom_kills > 0:
        return Death(c.DEATH_CAUSE_VMM_CRASH,
                     "qemu killed by the host's OOM killer (its cgroup's oom_kill count rose)")
    if exit.status == -signal.SIGBUS and exit.state_disk_full:
        return Death(c.DEATH_CAUSE_DISK_FULL, DISK_FULL_SIGBUS)
    if exit.status is not None and exit.status < 0:
        return Death(c.DEATH_CAUSE_VMM_CRASH, f"qemu killed by signal {-exit.status}")
    if exit.status is not None and exit.status > 0:
        return Death(c.DEATH_CAUSE_VMM_CRASH, f"qemu exited with status {exit.status}")
    guest = classify_console(exit.console)
    if guest is not None:
        return guest
    if exit.status is None:
        return Death(c.DEATH_CAUSE_VMM_CRASH,
                     "qemu exited with a status this agent cannot know (it adopted the VM)")
    return Death(c.DEATH_CAUSE_GUEST_CRASH,
                 "the guest reset or powered off (qemu exited with status 0), its console "
                 "does not say why")


def classify_console(lines: Sequence[str]) -> Death | None:
    """The guest's end by its console's tail, None when it names none."""
    panic_at = _last_index(lines, PANIC)
    if panic_at is not None:
        line = lines[panic_at]
        reason = line[line.index(PANIC) + len(PANIC):].strip() or "no reason given"
        before = lines[max(0, panic_at - OOM_WINDOW_LINES):panic_at + 1]
        if _about_memory(reason) or any(_about_memory(x) for x in before):
            return Death(c.DEATH_CAUSE_GUEST_OOM,
                         _short(f"the guest kernel ran out of memory and panicked: {reason}"))
        return Death(c.DEATH_CAUSE_GUEST_CRASH, _short(f"the guest kernel panicked: {reason}"))
    if any(_last_index(lines, words) is not None for words in _POWER_OFF):
        return Death(c.DEATH_CAUSE_GUEST_CRASH, "the guest powered off")
    if _last_index(lines, _RESTART) is not None:
        return Death(c.DEATH_CAUSE_GUEST_CRASH,
                     "the guest rebooted (a sandbox's VM does not restart)")
    return None


def parse_oom_kills(text: str) -> int:
    """The `oom_kill` count of a cgroup's memory.events (v2) or memory.oom_control (v1)."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == "oom_kill" and value.strip().isdigit():
            return int(value)
    return 0


def _about_memory(line: str) -> bool:
    lowered = line.lower()
    return any(words in lowered for words in _OOM_WORDS)


def _last_index(lines: Sequence[str], words: str) -> int | None:
    """The last line saying `words`, not counting the kernel's closing marker of a panic
    ("---[ end Kernel panic - not syncing: … ]---") that repeats its first line."""
    for index in range(len(lines) - 1, -1, -1):
        if words in lines[index] and _END_MARKER not in lines[index]:
            return index
    return None


def _short(detail: str) -> str:
    return detail if len(detail) <= _DETAIL_MAX else detail[:_DETAIL_MAX - 1] + "…"
