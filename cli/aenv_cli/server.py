"""Which aenv server the people-facing commands talk to, and with which key: one typed place.

In order: `AENV_URL`/`AENV_API_KEY` from the environment, then the login `aenv auth login`
stored in `<aenv home>/config.json` (mode 0600), then the local platform `aenv up` started in
the aenv home (its `platform.json` port and `api-key`). The aenv home is `AENV_HOME`, else
`~/.aenv`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from aenv_cli.files import read_api_key, write_private_file
from aenv_cli.ports import address
from aenv_cli.state import load_ports
from aenv_common.errors import InvalidArgument, Unauthenticated

CONFIG_FILE = "config.json"
URL_ENV = "AENV_URL"
KEY_ENV = "AENV_API_KEY"
HOME_ENV = "AENV_HOME"


@dataclass(frozen=True)
class Server:
    """The gateway's E2B API URL (also the SDK's sandbox URL: envd traffic goes through it) and
    the API key; `source` says where they came from, for `aenv auth status`."""

    url: str
    api_key: str
    source: str


def aenv_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get(HOME_ENV) or Path.home() / ".aenv").expanduser()


def config_path(home: Path) -> Path:
    return home / CONFIG_FILE


def normalize_url(url: str) -> str:
    """`host:port` or `http(s)://host:port[/]` → `http(s)://host:port`.

    :raise InvalidArgument: not an http(s) URL with a host.
    """
    text = url.strip()
    if "://" not in text:
        text = f"http://{text}"
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidArgument(f"not a server URL: {url!r} (e.g. http://127.0.0.1:3000)")
    return text.rstrip("/")


def save_login(home: Path, url: str, api_key: str) -> Path:
    """Stores the login, readable by its owner only (0600 from the first byte)."""
    home.mkdir(parents=True, exist_ok=True)
    path = config_path(home)
    write_private_file(path, json.dumps({"url": url, "api_key": api_key}, indent=2) + "\n")
    return path


def remove_login(home: Path) -> bool:
    try:
        config_path(home).unlink()
    except FileNotFoundError:
        return False
    return True


def resolve_server(env: Mapping[str, str] | None = None) -> Server:
    """The server and key to use (see the module's order).

    :raise Unauthenticated: none of them gives a URL and a key.
    """
    env = os.environ if env is None else env
    home = aenv_home(env)
    stored = _stored_login(home)
    url = env.get(URL_ENV) or stored.get("url") or _local_url(home)
    key = env.get(KEY_ENV) or stored.get("api_key") or _local_key(home)
    if not url or not key:
        raise Unauthenticated("not logged in: run `aenv auth login` (or set AENV_URL and "
                              "AENV_API_KEY, or start a platform with `aenv up`)")
    return Server(normalize_url(url), key, _source(env, stored, home))


def _source(env: Mapping[str, str], stored: Mapping[str, str], home: Path) -> str:
    if env.get(URL_ENV) or env.get(KEY_ENV):
        return "environment (AENV_URL/AENV_API_KEY)"
    if stored:
        return str(config_path(home))
    return f"the local platform in {home}"


def _stored_login(home: Path) -> dict[str, str]:
    try:
        data = json.loads(config_path(home).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise InvalidArgument(f"unreadable login {config_path(home)}: {err}") from None
    if not isinstance(data, dict):
        raise InvalidArgument(f"unreadable login {config_path(home)}: not an object")
    return {k: v for k, v in data.items() if isinstance(v, str) and k in ("url", "api_key")}


def _local_url(home: Path) -> str | None:
    if not (home / "platform.json").exists():
        return None
    return f"http://{address(load_ports(home).gateway_http)}"


def _local_key(home: Path) -> str | None:
    try:
        return read_api_key(home)
    except (FileNotFoundError, PermissionError):
        return None
