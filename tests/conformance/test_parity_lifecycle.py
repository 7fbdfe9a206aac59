"""E2B parity of a sandbox's lifetime and logs, through the official Python SDK (sync) and its
own generated API client: `set_timeout(0)` runs the timeout action at once (a kill, or the pause
the lifecycle asks for), `POST /sandboxes/{id}/refreshes` only extends, and the sandbox's logs
(envd's, from the guest's console) page through `GET /v2/sandboxes/{id}/logs` and the v1 route."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
from e2b import Sandbox, SandboxState
from e2b.api import ApiClient
from e2b.api.client.api.sandboxes import (
    get_sandboxes_sandbox_id_logs,
    get_v_2_sandboxes_sandbox_id_logs,
    post_sandboxes_sandbox_id_refreshes,
)
from e2b.api.client.models import LogLevel, LogsDirection, SandboxLogs, SandboxLogsV2Response
from e2b.api.client.models.sandbox_refresh_request import SandboxRefreshRequest
from e2b.api.client_sync import get_api_client
from e2b.connection_config import ConnectionConfig
from e2b.exceptions import SandboxNotFoundException

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]


@pytest.fixture
def api(e2b_vars: dict[str, str]) -> Iterator[ApiClient]:
    """The SDK's own REST client, configured from the environment like the SDK's."""
    client = get_api_client(ConnectionConfig())
    try:
        yield client
    finally:
        client.get_httpx_client().close()


def _eventually(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def _remaining_s(sandbox: Sandbox) -> float:
    return (sandbox.get_info().end_at - datetime.now(UTC)).total_seconds()


# --- set_timeout(0) ------------------------------------------------------------------------------

def test_a_timeout_of_zero_kills_at_once(fresh_sbx: Sandbox) -> None:
    fresh_sbx.set_timeout(0)
    with pytest.raises(SandboxNotFoundException):
        Sandbox.get_info(fresh_sbx.sandbox_id)
    assert not fresh_sbx.is_running()
    assert fresh_sbx.sandbox_id not in {s.sandbox_id for s in Sandbox.list().next_items()}
    assert fresh_sbx.kill() is False


def test_a_timeout_of_zero_pauses_a_sandbox_that_pauses_on_timeout(
    e2b_vars: dict[str, str],
) -> None:
    sandbox = Sandbox.create(timeout=300, lifecycle={"on_timeout": "pause"})
    try:
        sandbox.files.write("/tmp/kept", "still here")
        sandbox.set_timeout(0)
        info = Sandbox.get_info(sandbox.sandbox_id)  # paused when the call returned
        assert info.state == SandboxState.PAUSED
        assert info.lifecycle is not None and info.lifecycle["on_timeout"] == "pause"
        resumed = Sandbox.connect(sandbox.sandbox_id, timeout=120)
        assert resumed.files.read("/tmp/kept") == "still here"  # memory and disk were kept
        assert resumed.get_info().state == SandboxState.RUNNING
    finally:
        sandbox.kill()


# --- refreshes ----------------------------------------------------------------------------------

def test_a_refresh_extends_and_never_shortens(fresh_sbx: Sandbox, api: ApiClient) -> None:
    def refresh(duration: int | None) -> int:
        body = SandboxRefreshRequest() if duration is None else SandboxRefreshRequest(duration)
        return post_sandboxes_sandbox_id_refreshes.sync_detailed(
            fresh_sbx.sandbox_id, client=api, body=body).status_code

    fresh_sbx.set_timeout(5)
    assert refresh(None) == 204  # E2B's default: at least 15 s
    assert 10 < _remaining_s(fresh_sbx) <= 16
    assert refresh(200) == 204
    assert 190 < _remaining_s(fresh_sbx) <= 201
    assert refresh(30) == 204  # shorter than what is left: kept
    assert 180 < _remaining_s(fresh_sbx) <= 201
    assert refresh(3601) == 400
    missing = post_sandboxes_sandbox_id_refreshes.sync_detailed(
        "nosuchsandbox0000000", client=api, body=SandboxRefreshRequest(60))
    assert missing.status_code == 404


# --- logs ---------------------------------------------------------------------------------------

def _v2(api: ApiClient, sandbox_id: str, **query: object) -> SandboxLogsV2Response:
    answer = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(
        sandbox_id, client=api, **query)  # type: ignore[arg-type]
    assert answer.status_code == 200, answer.content
    assert isinstance(answer.parsed, SandboxLogsV2Response)
    return answer.parsed


def test_the_logs_are_envds_and_page_as_e2bs(fresh_sbx: Sandbox, api: ApiClient) -> None:
    started = datetime.now(UTC)
    fresh_sbx.commands.run("echo hello")
    sandbox_id = fresh_sbx.sandbox_id

    def process_entries() -> list[str]:
        return [e.message for e in _v2(api, sandbox_id, direction=LogsDirection.FORWARD).logs
                if e.message.startswith("process ")]

    _eventually(lambda: {"process started", "process ended"} <= set(process_entries()), 30,
                "envd's process log lines")
    newest_first = _v2(api, sandbox_id).logs  # E2B's default direction: backward
    assert len(newest_first) >= 2
    stamps = [entry.timestamp for entry in newest_first]
    assert stamps == sorted(stamps, reverse=True)
    started_entry = next(e for e in newest_first if e.message == "process started")
    assert started_entry.level == LogLevel.INFO
    assert started_entry.fields.additional_properties["logger"] == "aenv_envd.processes"
    assert (started_entry.timestamp - started).total_seconds() > -5
    assert abs((started_entry.timestamp - datetime.now(UTC)).total_seconds()) < 120

    # Forward from a cursor: what was logged from it on, oldest first, `limit` at most. (Lines
    # read in one pass are a microsecond apart: others may share the cursor's millisecond.)
    cursor = int(started_entry.timestamp.timestamp() * 1000)
    forward = _v2(api, sandbox_id, cursor=cursor, direction=LogsDirection.FORWARD)
    assert all(e.timestamp.timestamp() * 1000 >= cursor for e in forward.logs)
    messages = [e.message for e in forward.logs]
    assert messages.index("process started") < messages.index("process ended")
    assert len(_v2(api, sandbox_id, cursor=cursor, direction=LogsDirection.FORWARD,
                   limit=1).logs) == 1
    # Backward from that cursor: only what came before it, newest first.
    before = _v2(api, sandbox_id, cursor=cursor)
    assert all(e.timestamp.timestamp() * 1000 < cursor for e in before.logs)
    assert "process started" not in {e.message for e in before.logs}
    assert _v2(api, sandbox_id, level=LogLevel.ERROR, search="process started").logs == []
    assert [e.message for e in _v2(api, sandbox_id, search="process started").logs] == [
        "process started"]

    v1 = get_sandboxes_sandbox_id_logs.sync_detailed(sandbox_id, client=api, start=cursor)
    assert v1.status_code == 200 and isinstance(v1.parsed, SandboxLogs)
    assert len(v1.parsed.logs) == len(v1.parsed.log_entries) >= 2
    index = [e.message for e in v1.parsed.log_entries].index("process started")
    assert v1.parsed.logs[index].line.endswith("INFO aenv_envd.processes process started")

    assert fresh_sbx.kill() is True
    gone = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(sandbox_id, client=api)
    assert gone.status_code == 404
