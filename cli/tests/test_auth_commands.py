"""`aenv auth login|status|logout` and where the commands find their server and key."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from aenv_cli_fake_server import API_KEY, URL, FakeServer, fake_clients, invoke

from aenv_cli.commands.context import Clients
from aenv_cli.ports import PlatformPorts
from aenv_cli.server import normalize_url, resolve_server
from aenv_cli.state import save_ports
from aenv_common.errors import InvalidArgument, Unauthenticated


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AENV_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AENV_URL", raising=False)
    monkeypatch.delenv("AENV_API_KEY", raising=False)
    return tmp_path / "home"


def login_clients(server: FakeServer) -> Clients:
    """Clients whose own server is not resolved: login names one."""
    given = fake_clients(server)
    return Clients(resolve_server, make_api=given.api_for)


def test_login_checks_the_key_and_stores_it_private(home: Path) -> None:
    result = invoke(login_clients(FakeServer()), "auth", "login", "--url", URL + "/",
                    "--api-key", API_KEY)
    assert result.exit_code == 0, result.output
    stored = home / "config.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text()) == {"url": URL, "api_key": API_KEY}
    assert resolve_server().url == URL and resolve_server().api_key == API_KEY


def test_login_with_a_wrong_key_stores_nothing(home: Path) -> None:
    result = invoke(login_clients(FakeServer()), "auth", "login", "--url", URL,
                    "--api-key", "e2b_wrong")
    assert result.exit_code == 1 and result.stderr == "error: Invalid API key\n"
    assert not (home / "config.json").exists()


def test_login_asks_for_the_key(home: Path) -> None:
    result = invoke(login_clients(FakeServer()), "auth", "login", "--url", URL,
                    input=API_KEY + "\n")
    assert result.exit_code == 0, result.output
    assert API_KEY not in result.stdout


def test_status_masks_the_key_and_checks_it(home: Path) -> None:
    invoke(login_clients(FakeServer()), "auth", "login", "--url", URL, "--api-key", API_KEY)
    result = invoke(login_clients(FakeServer()), "auth", "status")
    assert result.exit_code == 0, result.output
    assert URL in result.stdout and API_KEY not in result.stdout
    assert str(home / "config.json") in result.stdout
    assert invoke(login_clients(FakeServer()), "auth", "logout").exit_code == 0
    assert not (home / "config.json").exists()


def test_status_without_any_login_is_one_line(home: Path) -> None:
    result = invoke(login_clients(FakeServer()), "auth", "status")
    assert result.exit_code == 1
    assert result.stderr.startswith("error: not logged in: run `aenv auth login`")


def test_the_environment_overrides_the_login(home: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    invoke(login_clients(FakeServer()), "auth", "login", "--url", URL, "--api-key", API_KEY)
    monkeypatch.setenv("AENV_URL", "other:4000")
    server = resolve_server()
    assert server.url == "http://other:4000" and server.api_key == API_KEY
    assert server.source.startswith("environment")


def test_the_local_platform_is_the_fallback(home: Path) -> None:
    home.mkdir()
    save_ports(home, PlatformPorts(gateway_http=3123))
    (home / "api-key").write_text("e2b_local\n")
    server = resolve_server()
    assert (server.url, server.api_key) == ("http://127.0.0.1:3123", "e2b_local")


def test_no_server_at_all(home: Path) -> None:
    with pytest.raises(Unauthenticated):
        resolve_server()


@pytest.mark.parametrize("url", ["ftp://x", "http://", ""])
def test_bad_urls(url: str) -> None:
    with pytest.raises(InvalidArgument):
        normalize_url(url)
