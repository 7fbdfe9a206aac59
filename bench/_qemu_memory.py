"""Host memory of QEMU processes: PSS, and how much of it is guest RAM a fork child dirtied."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable
from pathlib import Path

from aenv_nodeagent.vmm.delta import private_runs
from aenv_nodeagent.vmm.ram_file import mapped_memory


def pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _mapping_pss_mib(pid: int, wanted: Callable[[list[str]], bool]) -> float:
    """The PSS of the process's mappings whose /proc/<pid>/smaps header line `wanted` picks."""
    total_kib, counting = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if re.match(r"[0-9a-f]+-[0-9a-f]+$", fields[0]):
            counting = wanted(fields)
        elif counting and fields[0] == "Pss:":
            total_kib += int(fields[1])
    return total_kib / 1024


def _of_inode(inode: str) -> Callable[[list[str]], bool]:
    return lambda fields: fields[4] == inode


def child_memory(pids: list[int]) -> dict[str, float | None]:
    """Medians over the children of their PSS, split into: the guest RAM each dirtied (private
    pages of the RAM file), its share of the guest RAM the children share (the RAM file's pages
    in the host page cache, split among those mapping them), TCG's translation cache (anonymous
    and rwx; a KVM host's QEMU has none) and the rest, QEMU's own. The target
    (docs/architecture.md, Targets): memory per child = its dirtied pages + < 10 MiB."""
    parts: dict[str, list[float]] = {
        key: [] for key in ("pss", "dirtied", "shared_ram_share", "tcg_cache", "qemu_own")
    }
    for pid in pids:
        memory = mapped_memory(pid)
        inode = str(memory.stat().st_ino)
        pss, ram = pss_mib(pid), _mapping_pss_mib(pid, _of_inode(inode))
        dirtied = sum(run.length for run in private_runs(pid, memory)) / 2**20
        tcg = _mapping_pss_mib(pid, lambda f: f[1] == "rwxp" and len(f) == 5)
        for key, value in (
            ("pss", pss),
            ("dirtied", dirtied),
            ("shared_ram_share", ram - dirtied),
            ("tcg_cache", tcg),
            ("qemu_own", pss - ram - tcg),
        ):
            parts[key].append(value)
    return {
        f"{key}_per_child_mib_median": round(statistics.median(values), 1) if values else None
        for key, values in parts.items()
    }
