"""E2B parity of a sandbox's lifetime and logs on its node: a timeout of 0 runs the timeout
action at once (a kill, or the pause its lifecycle asks for), a refresh never shortens, and the
guest's console lines are kept, stamped and queried as E2B's logs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import cast

import grpc
import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import InvalidArgument, NotFound, Unavailable
from aenv_common.limits import DEFAULT_TIMEOUT_S
from aenv_nodeagent.sandbox.logs import (
    CONSOLE_LOG,
    DEBUG,
    ERROR,
    INFO,
    WARN,
    ConsoleLogs,
    LogEntry,
    LogQuery,
    parse_line,
)
from aenv_nodeagent.servicer import NodeAgentServicer
from aenv_nodeagent.templates.builds import TemplateBuilds

from .conftest import FILESYSTEM, PAUSED, RUNNING, Wing

# These tests never build templates.
NO_BUILDS = cast(TemplateBuilds, None)

FULL = cluster_pb2.PAUSE_MODE_UNSPECIFIED
KILLING = cluster_pb2.SANDBOX_STATE_KILLING


def end_of(record: cluster_pb2.SandboxRecord) -> float:
    return float(record.end_at.ToNanoseconds() / 1e9)


# --- set_timeout(0) ------------------------------------------------------------------------------

async def test_a_timeout_of_zero_kills_at_once(wing: Wing) -> None:
    sandbox = await wing.create()
    before = time.time()
    record = await wing.service.changes.set_timeout(sandbox.sandbox_id, 0)
    assert record.state == KILLING and before <= end_of(record) <= time.time()
    assert not wing.service.registry.has(sandbox.sandbox_id)
    assert sandbox.sandbox_id not in wing.records.records
    assert not sandbox.directory.exists()
    assert wing.vm(sandbox).stopping
    with pytest.raises(NotFound):
        await wing.service.changes.set_timeout(sandbox.sandbox_id, 0)


@pytest.mark.parametrize("mode", [FULL, FILESYSTEM], ids=["full", "filesystem"])
async def test_a_timeout_of_zero_pauses_who_asked_for_it(
    wing: Wing, mode: cluster_pb2.PauseMode
) -> None:
    sandbox = await wing.create(
        lifecycle=cluster_pb2.Lifecycle(auto_pause=True, auto_pause_mode=mode))
    record = await wing.service.changes.set_timeout(sandbox.sandbox_id, 0)
    assert (record.state, record.pause_mode) == (PAUSED, mode)
    assert wing.service.registry.paused_ids() == [sandbox.sandbox_id]
    assert wing.records.records[sandbox.sandbox_id].state == PAUSED
    if mode == FILESYSTEM:  # (the fake VMs cannot load a full pause's memory stream)
        resumed = await wing.service.pauses.resume(sandbox.sandbox_id, 60)
        assert end_of(resumed.record) > time.time() + 50


async def test_a_timeout_of_zero_on_a_busy_sandbox_is_left_to_the_expiry_pass(
    wing: Wing,
) -> None:
    sandbox = await wing.create()
    with wing.service.registry.exclusive(sandbox.sandbox_id):
        record = await wing.service.changes.set_timeout(sandbox.sandbox_id, 0)
        assert record.state == RUNNING and end_of(record) <= time.time()
        assert wing.records.records[sandbox.sandbox_id].end_at == record.end_at
        assert await wing.service.kills.expire_due() == []  # busy: skipped
    assert await wing.service.kills.expire_due() == [sandbox.sandbox_id]
    assert not wing.service.registry.has(sandbox.sandbox_id)


async def test_a_timeout_of_zero_whose_pause_fails_runs_on_until_the_next_pass(
    wing: Wing,
) -> None:
    sandbox = await wing.create(
        lifecycle=cluster_pb2.Lifecycle(auto_pause=True, auto_pause_mode=FILESYSTEM))
    wing.envd.fail_on["sync"] = Unavailable("the guest agent did not answer")
    record = await wing.service.changes.set_timeout(sandbox.sandbox_id, 0)
    assert record.state == RUNNING and end_of(record) <= time.time()
    assert wing.records.records[sandbox.sandbox_id].end_at == record.end_at
    del wing.envd.fail_on["sync"]
    assert await wing.service.kills.expire_due() == [sandbox.sandbox_id]
    assert wing.service.registry.paused_ids() == [sandbox.sandbox_id]


async def test_extend_only_never_shortens(wing: Wing) -> None:
    sandbox = await wing.create(timeout_seconds=600)
    end = end_of(sandbox.record)
    puts = len(wing.records.puts)
    kept = await wing.service.changes.set_timeout(sandbox.sandbox_id, 30, extend_only=True)
    assert end_of(kept) == end and len(wing.records.puts) == puts  # nothing to publish
    kept = await wing.service.changes.set_timeout(sandbox.sandbox_id, 0, extend_only=True)
    assert kept.state == RUNNING and wing.service.guest_metrics.is_running(sandbox.sandbox_id)
    longer = await wing.service.changes.set_timeout(sandbox.sandbox_id, 1200, extend_only=True)
    assert end_of(longer) > end + 500
    assert wing.records.records[sandbox.sandbox_id].end_at == longer.end_at
    shorter = await wing.service.changes.set_timeout(sandbox.sandbox_id, 30)
    assert end_of(shorter) < end
    with pytest.raises(InvalidArgument):
        await wing.service.changes.set_timeout(sandbox.sandbox_id, DEFAULT_TIMEOUT_S * 10**6)


async def test_set_timeout_over_grpc(wing: Wing) -> None:
    servicer = NodeAgentServicer(wing.service, cluster_pb2.NodeRecord, NO_BUILDS)
    context = _no_context()
    sandbox = await wing.create(timeout_seconds=600)
    kept = await servicer.SetSandboxTimeout(nodeagent_pb2.SetSandboxTimeoutRequest(
        sandbox_id=sandbox.sandbox_id, timeout_seconds=20, extend_only=True), context)
    assert kept.sandbox.end_at == sandbox.record.end_at
    killed = await servicer.SetSandboxTimeout(nodeagent_pb2.SetSandboxTimeoutRequest(
        sandbox_id=sandbox.sandbox_id, timeout_seconds=0), context)
    assert killed.sandbox.state == KILLING


def _no_context() -> grpc.aio.ServicerContext:
    return None  # the servicer's methods never use it


# --- logs: parsing ------------------------------------------------------------------------------

def test_envd_lines_give_level_logger_and_message() -> None:
    entry = parse_line("2026-12-01 22:44:12,688 WARNING aenv_envd.control_http init could "
                       "not set clock", None, 1.0)
    assert (entry.level, entry.logger, entry.message) == (
        WARN, "aenv_envd.control_http", "init could not set clock")
    levels = {name: parse_line(f"2026-12-01 22:44:12,688 {name} x y", None, 1.0).level
              for name in ("DEBUG", "INFO", "ERROR", "CRITICAL")}
    assert levels == {"DEBUG": DEBUG, "INFO": INFO, "ERROR": ERROR, "CRITICAL": ERROR}
    init = parse_line("aenv-init: starting envd", None, 1.0)
    assert (init.level, init.logger, init.message) == (INFO, "aenv-init", "starting envd")
    alone = parse_line("something else", None, 1.0)
    assert (alone.level, alone.logger, alone.message) == (INFO, "console", "something else")
    traceback = parse_line("  File \"x.py\", line 1", entry, 2.0)
    assert (traceback.level, traceback.logger) == (WARN, "aenv_envd.control_http")
    assert traceback.line == traceback.message == "  File \"x.py\", line 1"


# --- logs: collection ---------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def envd(message: str, level: str = "INFO") -> str:
    return f"2026-12-01 22:44:12,688 {level} aenv_envd.processes {message}\r\n"


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)


def messages(entries: list[LogEntry]) -> list[str]:
    return [entry.message for entry in entries]


def test_lines_are_stamped_when_read_and_strictly_ordered(tmp_path: Path) -> None:
    clock, console = Clock(), tmp_path / CONSOLE_LOG
    logs = ConsoleLogs(clock=clock)
    console.touch()
    logs.collect("s", console)  # first read: nothing yet
    append(console, envd("process started") + envd("process ended") + "half a li")
    clock.now += 5
    logs.collect("s", console)
    append(console, "ne\r\n\r\n")
    clock.now += 1
    logs.collect("s", console)
    entries = logs.query("s", LogQuery())
    assert messages(entries) == ["process started", "process ended", "half a line"]
    assert [e.ts for e in entries] == [clock.now - 1, clock.now - 1 + 1e-6, clock.now]
    assert entries[2].logger == "aenv_envd.processes"  # continues the entry before


def test_a_file_read_for_the_first_time_is_stamped_with_its_mtime(tmp_path: Path) -> None:
    clock, console = Clock(), tmp_path / CONSOLE_LOG
    console.write_text(envd("old"))
    os.utime(console, (clock.now - 100, clock.now - 100))
    logs = ConsoleLogs(clock=clock)
    logs.collect("s", console)
    assert logs.query("s", LogQuery())[0].ts == clock.now - 100


def test_a_console_started_over_is_read_from_its_start(tmp_path: Path) -> None:
    clock, console = Clock(), tmp_path / CONSOLE_LOG
    logs = ConsoleLogs(clock=clock)
    console.write_text(envd("before the pause, a long line " + "x" * 200))
    logs.collect("s", console)
    # A new QEMU truncates the file; the guest writes more than was read before.
    console.write_text(envd("after the resume " + "y" * 300) + envd("and more"))
    logs.collect("s", console)
    assert [m[:16] for m in messages(logs.query("s", LogQuery()))] == [
        "before the pause", "after the resume", "and more"]
    console.write_text(envd("short"))  # smaller than what was read
    logs.collect("s", console)
    assert messages(logs.query("s", LogQuery()))[-1] == "short"


def test_a_flood_keeps_only_the_newest_within_the_budget(tmp_path: Path) -> None:
    console = tmp_path / CONSOLE_LOG
    logs = ConsoleLogs(max_bytes=4096, clock=Clock())
    console.write_text("".join(envd(f"line {i}") for i in range(1000)))
    logs.collect("s", console)
    kept = messages(logs.query("s", LogQuery(limit=10_000)))
    assert kept and len(kept) < 40 and kept[-1] == "line 999"
    assert all(m.startswith("line ") for m in kept)  # every kept entry is a whole line

    endless = ConsoleLogs(clock=Clock())
    console.write_text(envd("first") + "z" * 20_000)  # a line without end is cut, not held
    endless.collect("s", console)
    assert [len(e.line) for e in endless.query("s", LogQuery())][1:] == [16 << 10]


def test_a_console_read_past_its_bound_is_cut_and_read_on(tmp_path: Path) -> None:
    """The host keeps at most max_file_bytes of a console: once read, a file past it is cut,
    and what the guest appends afterwards (QEMU appends) is read from the new start."""
    console = tmp_path / CONSOLE_LOG
    logs = ConsoleLogs(clock=Clock(), max_file_bytes=4096)
    console.write_text("".join(envd(f"line {i}") for i in range(100)))
    logs.collect("s", console)
    assert console.stat().st_size == 0
    with console.open("a") as fh:  # as QEMU's append=on writes
        fh.write(envd("after the cut") + "partial ")
    logs.collect("s", console)
    with console.open("a") as fh:
        fh.write("line\n")
    logs.collect("s", console)
    assert messages(logs.query("s", LogQuery(limit=1000)))[-3:] == [
        "line 99", "after the cut", "partial line"]
    assert console.stat().st_size < 4096  # under the bound: kept


def test_queries_window_order_level_and_search(tmp_path: Path) -> None:
    clock, console = Clock(), tmp_path / CONSOLE_LOG
    logs = ConsoleLogs(clock=clock)
    console.touch()
    logs.collect("s", console)
    for i, (message, level) in enumerate([("a0", "INFO"), ("b1", "WARNING"), ("c2", "ERROR"),
                                          ("d3", "DEBUG")]):
        clock.now = 1000.0 + i
        append(console, envd(message, level))
        logs.collect("s", console)

    def query(**fields: object) -> list[str]:
        return messages(logs.query("s", LogQuery(**fields)))  # type: ignore[arg-type]

    assert query() == ["a0", "b1", "c2", "d3"]
    assert query(backward=True, limit=2) == ["d3", "c2"]
    assert query(start_ms=1_001_000) == ["b1", "c2", "d3"]  # start inclusive
    assert query(end_ms=1_002_000, backward=True) == ["b1", "a0"]  # end exclusive
    assert query(min_level=WARN) == ["b1", "c2"]
    assert query(search="2") == ["c2"]
    assert query(limit=0) == []
    with pytest.raises(InvalidArgument):
        LogQuery(limit=-1)


# --- logs: through the wing ---------------------------------------------------------------------

async def test_a_sandbox_keeps_its_logs_while_paused_and_loses_them_when_killed(
    wing: Wing,
) -> None:
    sandbox = await wing.create()
    sandbox_id, console = sandbox.sandbox_id, sandbox.directory / CONSOLE_LOG
    append(console, envd("process started"))
    assert messages(wing.service.logs.read(sandbox_id, LogQuery())) == ["process started"]
    append(console, envd("written before the pause"))
    await wing.service.pauses.pause(sandbox_id, FILESYSTEM)
    await wing.settled()
    assert messages(wing.service.logs.read(sandbox_id, LogQuery())) == [
        "process started", "written before the pause"]
    await wing.service.pauses.resume(sandbox_id)
    console.write_text(envd("after the resume"))  # the new QEMU's console file
    assert messages(wing.service.logs.read(sandbox_id, LogQuery(backward=True, limit=2))) == [
        "after the resume", "written before the pause"]
    await wing.service.kills.kill(sandbox_id)
    with pytest.raises(NotFound):
        wing.service.logs.read(sandbox_id, LogQuery())


async def test_the_collection_pass_reads_every_sandbox_and_forgets_the_killed(
    wing: Wing,
) -> None:
    kept, killed = await wing.create(), await wing.create()
    for sandbox in (kept, killed):
        append(sandbox.directory / CONSOLE_LOG, envd(f"hello from {sandbox.sandbox_id}"))
    service = wing.service
    service.logs.console.collect_all(service.logs._consoles(), service.logs._keeps_logs)
    assert len(service.logs.console.query(killed.sandbox_id, LogQuery())) == 1
    await service.kills.kill(killed.sandbox_id)
    service.logs.console.collect_all(service.logs._consoles(), service.logs._keeps_logs)
    assert service.logs.console.query(killed.sandbox_id, LogQuery()) == []
    assert messages(service.logs.console.query(kept.sandbox_id, LogQuery())) == [
        f"hello from {kept.sandbox_id}"]


async def test_logs_over_grpc(wing: Wing) -> None:
    servicer = NodeAgentServicer(wing.service, cluster_pb2.NodeRecord, NO_BUILDS)
    sandbox = await wing.create()
    append(sandbox.directory / CONSOLE_LOG, envd("one") + envd("two", "ERROR"))
    answer = await servicer.GetSandboxLogs(nodeagent_pb2.GetSandboxLogsRequest(
        sandbox_id=sandbox.sandbox_id, limit=10, backward=True,
        min_level=nodeagent_pb2.LOG_LEVEL_WARN), _no_context())
    [entry] = answer.entries
    assert (entry.message, entry.level, dict(entry.fields)) == (
        "two", nodeagent_pb2.LOG_LEVEL_ERROR, {"logger": "aenv_envd.processes"})
    assert entry.line.endswith("ERROR aenv_envd.processes two")
    assert abs(entry.timestamp.ToNanoseconds() / 1e9 - time.time()) < 60
    with pytest.raises(NotFound):
        await servicer.GetSandboxLogs(
            nodeagent_pb2.GetSandboxLogsRequest(sandbox_id="nosuch", limit=1), _no_context())
