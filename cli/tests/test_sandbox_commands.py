"""`aenv ls|inspect|pause|resume|rm|timeout|fork|reset|logs|snapshot` over the fake server."""

from __future__ import annotations

import json

import pytest
import yaml
from aenv_cli_fake_server import FakeServer, fake_clients, invoke, sandbox

from aenv_cli.commands import sandboxes
from aenv_cli.commands.sandboxes import parse_duration
from aenv_common.errors import InvalidArgument


@pytest.fixture
def server() -> FakeServer:
    made = FakeServer()
    made.add(sandbox("sb1", team="rl"), sandbox("sb2", "py", "paused"), sandbox("sb3"))
    return made


def test_ls_prints_json_when_piped_and_follows_every_page(server: FakeServer) -> None:
    server.page_size = 2
    result = invoke(fake_clients(server), "ls")
    assert result.exit_code == 0, result.output
    assert [s["sandboxID"] for s in json.loads(result.stdout)] == ["sb1", "sb2", "sb3"]


def test_ls_filters_reach_the_server(server: FakeServer) -> None:
    result = invoke(fake_clients(server), "ls", "--state", "running", "-m", "team=rl",
                    "--template", "base", "-o", "json")
    assert [s["sandboxID"] for s in json.loads(result.stdout)] == ["sb1"]
    _, _, params, _ = server.requests[-1]
    assert params["state"] == "running" and params["template"] == "base"


def test_ls_table_yaml_wide_and_quiet(server: FakeServer) -> None:
    table = invoke(fake_clients(server), "ls", "-o", "table").stdout
    assert "SANDBOX ID" in table and "sb2" in table and "paused" in table
    assert "METADATA" not in table
    assert "team=rl" in invoke(fake_clients(server), "ls", "-o", "wide").stdout
    shown = yaml.safe_load(invoke(fake_clients(server), "ls", "-o", "yaml").stdout)
    assert shown[0]["sandboxID"] == "sb1"
    assert invoke(fake_clients(server), "ls", "-q").stdout.split() == ["sb1", "sb2", "sb3"]


def test_bad_metadata_filter_is_one_line_and_exit_2(server: FakeServer) -> None:
    result = invoke(fake_clients(server), "ls", "-m", "novalue")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --metadata takes KEY=VALUE, not 'novalue'"


def test_inspect_shows_json_without_secrets_and_fails_on_unknown_ids(
        server: FakeServer) -> None:
    result = invoke(fake_clients(server), "inspect", "sb1", "nope")
    assert result.exit_code == 1
    shown = json.loads(result.stdout)
    assert shown[0]["sandboxID"] == "sb1" and "envdAccessToken" not in shown[0]
    assert result.stderr.strip() == 'error: nope: sandbox "nope" not found'


def test_pause_resume_rm_go_on_past_a_failure(server: FakeServer) -> None:
    paused = invoke(fake_clients(server), "pause", "sb1", "sb2", "sb3")
    assert paused.exit_code == 1 and paused.stdout.split() == ["sb1", "sb3"]
    assert "sb2: sandbox \"sb2\" is not running" in paused.stderr
    assert server.sandboxes["sb1"]["state"] == "paused"
    resumed = invoke(fake_clients(server), "resume", "sb1", "--timeout", "10m")
    assert resumed.exit_code == 0 and server.sandboxes["sb1"]["state"] == "running"
    assert server.requests[-1][3] == {"timeout": 600}
    removed = invoke(fake_clients(server), "rm", "sb1", "sb3")
    assert removed.exit_code == 0 and list(server.sandboxes) == ["sb2"]


def test_timeout_takes_durations(server: FakeServer) -> None:
    assert invoke(fake_clients(server), "timeout", "sb1", "1h30m").exit_code == 0
    assert server.sandboxes["sb1"]["timeout"] == 5400
    bad = invoke(fake_clients(server), "timeout", "sb1", "soon")
    assert bad.exit_code == 2 and "not a duration: 'soon'" in bad.stderr


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800),
                                                ("2h", 7200), ("1d", 86400), ("1h30m", 5400)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "5x", "1h 30m", "-5"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(InvalidArgument):
        parse_duration(text)


def test_fork_prints_children_and_reports_a_failed_one(server: FakeServer) -> None:
    result = invoke(fake_clients(server), "fork", "sb1", "-n", "3")
    assert result.stdout.split() == ["sb1-c0", "sb1-c1"]
    assert result.exit_code == 1 and "a child failed: no room" in result.stderr
    assert server.requests[-1][3] == {"count": 3, "timeout": 300}  # a person's default
    as_json = invoke(fake_clients(server), "fork", "sb1", "-n", "2", "-o", "json")
    assert [c["sandboxID"] for c in json.loads(as_json.stdout)] == ["sb1-c0", "sb1-c1"]


def test_snapshot_create_ls_rm_and_reset(server: FakeServer) -> None:
    made = invoke(fake_clients(server), "snapshot", "sb1", "--name", "ready")
    assert made.exit_code == 0 and made.stdout.strip() == "snap1"
    listed = json.loads(invoke(fake_clients(server), "snapshot", "ls", "--sandbox", "sb1").stdout)
    assert listed[0]["snapshotID"] == "snap1" and listed[0]["names"] == ["ready"]
    assert invoke(fake_clients(server), "reset", "sb1", "snap1").stdout.strip() == "sb1"
    unknown = invoke(fake_clients(server), "reset", "sb1", "snap9")
    assert unknown.exit_code == 1 and 'snapshot "snap9" not found' in unknown.stderr
    assert invoke(fake_clients(server), "snapshot", "rm", "snap1").exit_code == 0
    assert invoke(fake_clients(server), "snapshot", "rm", "snap1").exit_code == 1


def test_logs_lines_and_json(server: FakeServer) -> None:
    server.logs["sb1"] = [{"timestamp": "2026-12-04T18:00:01Z", "level": "info",
                           "message": "[envd] started", "fields": {}}]
    lines = invoke(fake_clients(server), "logs", "sb1").stdout
    assert lines.strip() == "2026-12-04 18:00:01 info  [envd] started"
    assert json.loads(invoke(fake_clients(server), "logs", "sb1", "-o", "json").stdout)[0][
        "message"] == "[envd] started"


def test_a_wrong_key_is_one_line(server: FakeServer) -> None:
    result = invoke(fake_clients(server, api_key="e2b_wrong"), "ls")
    assert result.exit_code == 1 and result.stderr == "error: Invalid API key\n"


def test_an_unreachable_server_is_one_line(server: FakeServer) -> None:
    server.reachable = False
    result = invoke(fake_clients(server), "rm", "sb1")
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: sb1: cannot reach the aenv server at "
                                     "http://aenv.test:3000 (ConnectError)")


def _entry(stamp: str, message: str) -> dict[str, object]:
    return {"timestamp": stamp, "level": "info", "message": message, "fields": {}}


def test_logs_follow_prints_new_entries_once_until_the_sandbox_ends(
        server: FakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    server.logs["sb1"] = [_entry("2026-12-04T18:00:01.500000Z", "booted")]
    later = [_entry("2026-12-04T18:00:01.500000Z", "same ms, new"),
             _entry("2026-12-04T18:00:02Z", "ran")]
    polls: list[float] = []

    def poll(seconds: float) -> None:  # what the guest logs between two polls
        polls.append(seconds)
        if len(polls) == 1:
            server.logs["sb1"].extend(later)
        elif len(polls) == 3:
            del server.sandboxes["sb1"]

    monkeypatch.setattr(sandboxes, "wait_between_polls", poll)
    result = invoke(fake_clients(server), "logs", "sb1", "--follow", "-o", "json")
    assert result.exit_code == 0, result.output
    printed = [json.loads(line)["message"] for line in result.stdout.splitlines()]
    assert printed == ["booted", "same ms, new", "ran"]
    assert result.stderr.strip() == "sandbox sb1 ended"
    # From the newest millisecond seen on: its entries come again, and are not printed again.
    forward = [p["cursor"] for _, _, p, _ in server.requests if p.get("direction") == "forward"]
    assert forward == ["1796407201500", "1796407202000", "1796407202000"]
