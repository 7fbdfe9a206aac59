"""Guest-level operations for /init and /metrics: clock, kernel RNG, resource figures."""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import time
from dataclasses import dataclass
from datetime import datetime

log = logging.getLogger(__name__)

RNDADDENTROPY = 0x40085203  # _IOW('R', 0x03, int[2])
RNDRESEEDCRNG = 0x5207  # _IO('R', 0x07); needs CAP_SYS_ADMIN
URANDOM = "/dev/urandom"


def parse_rfc3339(value: str) -> float:
    """RFC 3339 (with `Z`, offsets and up to nanosecond fractions) -> unix seconds."""
    text = value.strip().replace("z", "Z")
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    head, dot, rest = text.partition(".")
    if dot:  # fromisoformat takes at most 6 fraction digits
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = head + "." + (rest[:digits][:6] or "0") + rest[digits:]
    return datetime.fromisoformat(text).timestamp()


def set_clock(unix_seconds: float) -> None:
    """clock_settime(CLOCK_REALTIME): after a restore the guest clock is behind by the pause."""
    time.clock_settime_ns(time.CLOCK_REALTIME, round(unix_seconds * 1e9))


def reseed_rng(seed: bytes, device: str = URANDOM) -> None:
    """Mixes `seed` into the kernel pool, credits it when permitted, then reseeds the CRNG.

    A restored guest (fork child, reset, create from a snapshot) runs on a clone of the image's
    CRNG key and of its reseed schedule (jiffies go on from the capture). Since Linux 5.18 what
    is written here only reaches the input pool: /dev/urandom and getrandom() take it in at the
    next scheduled reseed (up to uptime/2 early on, 60 s later), until which every clone reads
    the same bytes. RNDRESEEDCRNG makes that reseed happen now, and the per-CPU CRNGs follow at
    their next use (the generation changed)."""
    with open(device, "wb", buffering=0) as pool:
        pool.write(seed)
        request = struct.pack("ii", len(seed) * 8, len(seed)) + seed
        try:
            fcntl.ioctl(pool.fileno(), RNDADDENTROPY, request)
        except OSError as exc:
            log.info("entropy mixed without credit", extra={"errno": exc.errno})
        try:
            fcntl.ioctl(pool.fileno(), RNDRESEEDCRNG)
        except OSError as exc:  # EPERM unprivileged, ENODATA before the CRNG is ready
            log.warning("kernel CRNG not reseeded: this guest may read the same random bytes "
                        "as other restores of its image until its next scheduled reseed",
                        extra={"errno": exc.errno})


@dataclass
class CpuSample:
    busy: int
    total: int


def read_cpu_sample(proc_stat: str = "/proc/stat") -> CpuSample:
    with open(proc_stat) as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])
    return CpuSample(busy=total - idle, total=total)


def read_meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    values: dict[str, int] = {}
    with open(path) as f:
        for line in f:
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts:
                values[name] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return values


class MetricsReader:
    """The /metrics document; CPU use is measured since the previous call."""

    def __init__(self) -> None:
        self._last_cpu = read_cpu_sample()

    def cpu_used_pct(self) -> float:
        current = read_cpu_sample()
        busy = current.busy - self._last_cpu.busy
        total = current.total - self._last_cpu.total
        self._last_cpu = current
        return round(100.0 * busy / total, 2) if total > 0 else 0.0

    def snapshot(self) -> dict[str, float | int]:
        mem = read_meminfo()
        total = mem.get("MemTotal", 0)
        cache = mem.get("Cached", 0) + mem.get("SReclaimable", 0)
        used = total - mem.get("MemFree", 0) - mem.get("Buffers", 0) - cache
        disk = os.statvfs("/")
        disk_total = disk.f_blocks * disk.f_frsize
        disk_used = (disk.f_blocks - disk.f_bfree) * disk.f_frsize
        return {
            "ts": int(time.time()),
            "cpu_count": os.cpu_count() or 1,
            "cpu_used_pct": self.cpu_used_pct(),
            "mem_total": total,
            "mem_used": used,
            "mem_cache": cache,
            "mem_total_mib": total // (1024 * 1024),
            "mem_used_mib": used // (1024 * 1024),
            "disk_used": disk_used,
            "disk_total": disk_total,
        }
