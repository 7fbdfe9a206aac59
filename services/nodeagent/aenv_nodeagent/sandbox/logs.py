"""A sandbox's logs, kept the way E2B keeps them: what its guest writes to the console (envd's
log, one line per event), collected line by line and stamped with the host's clock when read.

QEMU appends the guest's serial console to `console.log` in the sandbox's directory. A pass over
every sandbox's file every half second (and one on each query) reads what was appended since the
last one; a file read past `max_file_bytes` is cut to nothing, so a guest flooding its console
costs the host no more disk than that. A file that starts over (cut, or made by a QEMU of an
older node agent) is seen by its shrinking or by its first bytes changing. Each sandbox keeps a
bounded ring of entries, also while paused, until it is killed. Lines found in a file never read
before (a node agent restart) are stamped with the file's modification time: they were written
by then.

envd logs as `<date> <time>,<ms> <LEVEL> <logger> <message>`; a line in another form continues
the entry before it (a traceback), `aenv-init: …` is the guest's PID 1.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import InvalidArgument

log = logging.getLogger(__name__)

CONSOLE_LOG = "console.log"  # in the sandbox's directory (sandbox/vms.py launches QEMU so)
DEBUG, INFO, WARN, ERROR = (nodeagent_pb2.LOG_LEVEL_DEBUG, nodeagent_pb2.LOG_LEVEL_INFO,
                            nodeagent_pb2.LOG_LEVEL_WARN, nodeagent_pb2.LOG_LEVEL_ERROR)
# What one sandbox keeps: the newest entries within this many bytes (a line's length plus a
# fixed cost per entry, so that a flood of short lines is bounded too).
DEFAULT_MAX_BYTES = 2 << 20
# How large one console file may grow on the host before it is cut, once read.
DEFAULT_MAX_FILE_BYTES = 8 << 20
ENTRY_COST = 128
MAX_LINE = 16 << 10  # longer lines are cut
_HEAD = 64  # bytes of a file's start remembered to tell a file started over

_ENVD_LINE = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) (\S+) ?(.*)")
_PYTHON_LEVELS = {"DEBUG": DEBUG, "INFO": INFO, "WARNING": WARN, "ERROR": ERROR,
                  "CRITICAL": ERROR}
_INIT_PREFIX = "aenv-init: "


@dataclass(frozen=True, slots=True)
class LogEntry:
    ts: float  # unix seconds, host clock
    level: nodeagent_pb2.LogLevel
    logger: str
    message: str
    line: str

    def to_proto(self) -> nodeagent_pb2.SandboxLogEntry:
        entry = nodeagent_pb2.SandboxLogEntry(
            level=self.level, message=self.message, fields={"logger": self.logger}, line=self.line)
        entry.timestamp.FromMicroseconds(round(self.ts * 1e6))
        return entry


@dataclass(frozen=True)
class LogQuery:
    """Which entries, in unix milliseconds (start inclusive, end exclusive, None: open)."""

    start_ms: int | None = None
    end_ms: int | None = None
    limit: int = 1000
    backward: bool = False
    min_level: int = 0
    search: str = ""

    def __post_init__(self) -> None:
        if self.limit < 0:
            raise InvalidArgument("limit must not be negative")

    @classmethod
    def of(cls, request: nodeagent_pb2.GetSandboxLogsRequest) -> LogQuery:
        return cls(
            start_ms=request.start_ms if request.HasField("start_ms") else None,
            end_ms=request.end_ms if request.HasField("end_ms") else None,
            limit=request.limit, backward=request.backward, min_level=request.min_level,
            search=request.search,
        )

    def matches(self, entry: LogEntry) -> bool:
        ms = entry.ts * 1000
        return ((self.start_ms is None or ms >= self.start_ms)
                and (self.end_ms is None or ms < self.end_ms)
                and entry.level >= self.min_level and self.search in entry.message)


def parse_line(line: str, previous: LogEntry | None, ts: float) -> LogEntry:
    """One console line as an entry (`previous`: the entry before it, which a line in no known
    form continues)."""
    if match := _ENVD_LINE.fullmatch(line):
        level, logger, message = match.groups()
        return LogEntry(ts, _PYTHON_LEVELS[level], logger, message, line)
    if line.startswith(_INIT_PREFIX):
        return LogEntry(ts, INFO, "aenv-init", line[len(_INIT_PREFIX):], line)
    if previous is not None:
        return LogEntry(ts, previous.level, previous.logger, line, line)
    return LogEntry(ts, INFO, "console", line, line)


@dataclass
class _Tail:
    """One sandbox's console file as read so far, and the entries it gave."""

    offset: int = 0
    head: bytes = b""
    partial: bytes = b""  # the last line, not ended yet
    read_before: bool = False
    entries: deque[LogEntry] = field(default_factory=deque)
    cost: int = 0

    @property
    def last(self) -> LogEntry | None:
        return self.entries[-1] if self.entries else None


class ConsoleLogs:
    """The logs of this node's sandboxes, by id."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES,
                 clock: Callable[[], float] = time.time,
                 max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        if max_bytes < ENTRY_COST:
            raise InvalidArgument(f"max_bytes must be at least {ENTRY_COST}")
        self._max_bytes = max_bytes
        self._max_file_bytes = max_file_bytes
        self._clock = clock
        self._tails: dict[str, _Tail] = {}

    def collect(self, sandbox_id: str, console: Path) -> None:
        """Reads what the guest appended to `console` since the last collect."""
        tail = self._tails.setdefault(sandbox_id, _Tail())
        try:
            data, mtime = self._read_new(tail, console)
        except FileNotFoundError:
            return
        except OSError as err:
            log.warning("console log unreadable",
                        extra={"sandbox_id": sandbox_id, "error": repr(err)})
            return
        now = self._clock()
        ts = now if tail.read_before else min(mtime, now)
        tail.read_before = True
        lines = (tail.partial + data).split(b"\n")
        tail.partial = lines.pop()
        if len(tail.partial) >= MAX_LINE:  # a line without end: keep its start as an entry
            lines.append(tail.partial)
            tail.partial = b""
        for raw in lines:
            self._add(tail, raw, ts)
        if tail.offset >= self._max_file_bytes:
            self._cut(tail, console)

    def collect_all(self, targets: Iterable[tuple[str, Path]],
                    keep: Callable[[str], bool]) -> None:
        """One pass over every sandbox's console file; the logs of sandboxes `keep` no longer
        knows (killed, handed over, failed) go."""
        for sandbox_id, console in targets:
            self.collect(sandbox_id, console)
        for sandbox_id in [sid for sid in self._tails if not keep(sid)]:
            del self._tails[sandbox_id]

    def query(self, sandbox_id: str, query: LogQuery) -> list[LogEntry]:
        entries = self._tails.get(sandbox_id, _Tail()).entries
        ordered = reversed(entries) if query.backward else iter(entries)
        return list(itertools.islice(filter(query.matches, ordered), query.limit))

    async def run(self, targets: Callable[[], list[tuple[str, Path]]],
                  keep: Callable[[str], bool], interval_s: float = 0.5) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.collect_all(targets(), keep)
            except Exception:
                log.exception("console log pass failed")

    @staticmethod
    def _cut(tail: _Tail, console: Path) -> None:
        """Empties a console file read to its end; QEMU appends on from its new start. Bytes
        the guest wrote between the read and the cut are lost, as a flood's are anyway."""
        try:
            os.truncate(console, 0)
        except OSError as err:
            log.warning("console log not cut", extra={"path": str(console), "error": repr(err)})
            return
        tail.offset, tail.head = 0, b""

    def _read_new(self, tail: _Tail, console: Path) -> tuple[bytes, float]:
        """The bytes appended since `tail.offset` (at most the ring's worth: older ones would
        drop out at once), starting over when the file did."""
        with console.open("rb") as fh:
            stat = os.fstat(fh.fileno())
            size = stat.st_size
            if tail.head and (size < tail.offset or fh.read(len(tail.head)) != tail.head):
                tail.offset, tail.head, tail.partial = 0, b"", b""  # a new QEMU's file
            if len(tail.head) < _HEAD and size > len(tail.head):
                fh.seek(0)
                tail.head = fh.read(_HEAD)
            start = max(tail.offset, size - self._max_bytes)
            fh.seek(start)
            data = fh.read(size - start)
        skipped = start > tail.offset
        tail.offset = start + len(data)
        if skipped:  # a flood: what is kept starts at a whole line
            tail.partial = b""
            data = data.partition(b"\n")[2]
        return data, stat.st_mtime

    def _add(self, tail: _Tail, raw: bytes, ts: float) -> None:
        line = raw[:MAX_LINE].decode("utf-8", errors="replace").rstrip("\r")
        if not line.strip():
            return
        previous = tail.last
        if previous is not None and ts <= previous.ts:
            ts = previous.ts + 1e-6  # strictly increasing: the order survives any window
        entry = parse_line(line, previous, ts)
        tail.entries.append(entry)
        tail.cost += len(entry.line) + ENTRY_COST
        while tail.cost > self._max_bytes and tail.entries:
            dropped = tail.entries.popleft()
            tail.cost -= len(dropped.line) + ENTRY_COST
