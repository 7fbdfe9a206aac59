"""`aenv top` over the fake server: the newest sample of each running sandbox."""

from __future__ import annotations

import json
import time

import pytest
from aenv_cli_fake_server import FakeServer, fake_clients, invoke, sandbox

SAMPLE = {"timestamp": "2026-12-04T18:00:05Z", "cpuCount": 2, "cpuUsedPct": 12.5,
          "memUsed": 100 * 1024 * 1024, "memTotal": 512 * 1024 * 1024,
          "diskUsed": 1024 * 1024 * 1024, "diskTotal": 2048 * 1024 * 1024}


@pytest.fixture
def server() -> FakeServer:
    made = FakeServer()
    made.add(sandbox("sb1"), sandbox("sb2"), sandbox("sb3", state="paused"))
    made.metrics["sb1"] = SAMPLE
    return made


def test_once_as_json_merges_the_newest_sample(server: FakeServer) -> None:
    result = invoke(fake_clients(server), "top", "--once", "-o", "json")
    assert result.exit_code == 0, result.output
    rows = {r["sandboxID"]: r for r in json.loads(result.stdout)}
    assert sorted(rows) == ["sb1", "sb2"]  # running only
    assert rows["sb1"]["cpuUsedPct"] == 12.5 and "memUsed" not in rows["sb2"]


def test_once_as_a_table(server: FakeServer) -> None:
    table = invoke(fake_clients(server), "top", "--once", "-o", "table").stdout
    assert "12.5" in table and "100/512 MiB" in table and "1024/2048 MiB" in table
    assert "no sample yet" in table


def test_live_refreshes_until_ctrl_c(server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", sleep)  # the refresh loop's wait
    result = invoke(fake_clients(server), "top", "-n", "1")
    assert result.exit_code == 130 and naps == [1.0, 1.0, 1.0]
    metric_calls = [r for r in server.requests if r[1] == "/sandboxes/metrics"]
    assert len(metric_calls) == 3
