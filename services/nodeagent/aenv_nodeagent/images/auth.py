"""Registry authentication: challenges, credentials and bearer tokens.

A registry says how it wants to be spoken to in the `WWW-Authenticate` header of a 401:

    Basic realm="Registry"
    Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull"

For `Basic` the client resends the request with the user's credentials. For `Bearer` (the Docker
token protocol, used by most public registries) it first asks the *realm* for a token
(`GET realm?service=...&scope=...`, with the credentials as HTTP basic if it has any, anonymous
otherwise), then resends with `Authorization: Bearer <token>`. Tokens are kept per endpoint host
and scope until they expire, so the many blob requests of one pull fetch one token.

Credentials come from a file in Docker's `config.json` shape (`{"auths": {"host": {"auth":
base64("user:password")}}}`, or `username`/`password`), never from the environment, so they do
not show up in settings dumps; nothing here logs them or puts them into an error message.
"""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from aenv_common.errors import InvalidArgument

from .errors import RegistryAuthFailed, RegistryUnavailable
from .reference import DOCKER_HUB

# Docker writes Hub credentials under its v1 index URL.
_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "registry-1.docker.io")
_TOKEN_DEFAULT_TTL_S = 60.0  # the token spec's default when `expires_in` is absent
_TOKEN_MAX_BYTES = 1 << 20

_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


@dataclass(frozen=True)
class Challenge:
    scheme: str  # lowercase: "basic" or "bearer"
    params: Mapping[str, str]


def parse_www_authenticate(header: str) -> list[Challenge]:
    """The challenges of a `WWW-Authenticate` value (RFC 7235: `scheme k=v, k="v", scheme2 ...`).

    Unparseable tails are dropped rather than raised: a registry's odd header must not hide the
    challenge we can use."""
    challenges: list[Challenge] = []
    pos = 0
    while True:
        pos = _skip(header, pos, " \t,")
        scheme = _TOKEN_RE.match(header, pos)
        if scheme is None:
            return challenges
        pos = scheme.end()
        params: dict[str, str] = {}
        while True:
            start = _skip(header, pos, " \t,")
            key = _TOKEN_RE.match(header, start)
            if key is None:
                break
            after = _skip(header, key.end(), " \t")
            if header[after:after + 1] != "=":
                break  # that token was the next challenge's scheme
            value, pos = _param_value(header, _skip(header, after + 1, " \t"))
            params[key.group().lower()] = value
        challenges.append(Challenge(scheme.group().lower(), params))


def _skip(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def _param_value(text: str, pos: int) -> tuple[str, int]:
    if text[pos:pos + 1] != '"':
        token = _TOKEN_RE.match(text, pos)
        return (token.group(), token.end()) if token else ("", pos)
    out: list[str] = []
    pos += 1
    while pos < len(text) and text[pos] != '"':
        if text[pos] == "\\" and pos + 1 < len(text):
            pos += 1
        out.append(text[pos])
        pos += 1
    return "".join(out), pos + 1


# ---- credentials -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Login:
    user: str
    password: str = field(repr=False)

    def header(self) -> str:
        """The HTTP basic `Authorization` value."""
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()


@dataclass(frozen=True)
class Credentials:
    """User names and passwords per registry host (`host[:port]`, Docker Hub as docker.io)."""

    by_host: Mapping[str, Login]

    def __repr__(self) -> str:  # never print the passwords
        return f"Credentials(hosts={sorted(self.by_host)})"

    def for_host(self, host: str) -> Login | None:
        return self.by_host.get(host)


NO_CREDENTIALS = Credentials({})


def load_credentials(path: Path | None) -> Credentials:
    """Read a Docker `config.json`-shaped credentials file (None: no credentials)."""
    if path is None:
        return NO_CREDENTIALS
    try:
        data = json.loads(path.read_text())
        auths = data.get("auths", {})
        return Credentials({_host_key(k): _basic(v) for k, v in auths.items()})
    except (OSError, ValueError, AttributeError, TypeError) as err:
        # The error names the file, never its content.
        raise InvalidArgument(f"registry credentials file {path} is unreadable: "
                              f"{type(err).__name__}") from None


def _host_key(key: str) -> str:
    if key in _HUB_KEYS:
        return DOCKER_HUB
    return key.removeprefix("https://").removeprefix("http://").split("/", 1)[0]


def _basic(entry: Mapping[str, Any]) -> Login:
    if "auth" in entry:
        user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
        return Login(user, password)
    return Login(str(entry["username"]), str(entry["password"]))


# ---- the authorizer --------------------------------------------------------------------------


@dataclass
class _Grant:
    header: str  # the Authorization value
    expires: float  # time.monotonic(); inf for basic


class Authorizer:
    """Authorization headers per (endpoint host, scope), learnt from the registries' challenges.

    `credentials_for` maps an endpoint host to what to present there: a mirror's host has its own
    entry, the upstream falls back to the registry's name (so `docker.io` credentials reach
    registry-1.docker.io)."""

    def __init__(self, session: aiohttp.ClientSession, credentials: Credentials) -> None:
        self._session = session
        self._credentials = credentials
        self._grants: dict[tuple[str, str], _Grant] = {}

    def login(self, host: str, registry: str) -> Login | None:
        """What to present at `host`: its own entry, else the registry's it serves."""
        return self._credentials.for_host(host) or self._credentials.for_host(registry)

    def headers(self, host: str, scope: str) -> dict[str, str]:
        grant = self._grants.get((host, scope))
        if grant is None or grant.expires <= time.monotonic():
            return {}
        return {"Authorization": grant.header}

    async def answer(self, host: str, registry: str, header: str, scope: str) -> None:
        """Learn how to authorize at `host` from its 401's WWW-Authenticate; raise if we cannot."""
        creds = self.login(host, registry)
        challenges = {c.scheme: c for c in parse_www_authenticate(header)}
        sent = self._grants.pop((host, scope), None)
        if "bearer" in challenges:
            bearer = challenges["bearer"]
            self._grants[(host, scope)] = await self._token(host, bearer, scope, creds)
        elif "basic" in challenges:
            if creds is None:
                raise RegistryAuthFailed(host, "it needs a user name and password, none is set")
            if sent is not None and sent.header.startswith("Basic "):
                raise RegistryAuthFailed(host, "wrong user name or password")
            self._grants[(host, scope)] = _Grant(creds.header(), float("inf"))
        else:
            raise RegistryAuthFailed(host, f"unsupported authentication {header[:60]!r}")

    async def _token(
        self, host: str, challenge: Challenge, scope: str, creds: Login | None
    ) -> _Grant:
        realm = challenge.params.get("realm", "")
        if not realm.startswith(("https://", "http://")):
            raise RegistryAuthFailed(host, f"bad token realm {realm[:80]!r}")
        query = {k: v for k, v in (("service", challenge.params.get("service", "")),
                                     ("scope", challenge.params.get("scope") or scope)) if v}
        try:
            headers = {"Authorization": creds.header()} if creds else {}
            async with self._session.get(realm, params=query, headers=headers) as resp:
                if resp.status in (401, 403):
                    what = "wrong user name or password" if creds else "anonymous access denied"
                    raise RegistryAuthFailed(host, f"its token server said {resp.status}: {what}")
                if resp.status != 200:
                    raise RegistryUnavailable(host, f"token server answered HTTP {resp.status}")
                body = await resp.content.read(_TOKEN_MAX_BYTES)
        except aiohttp.ClientError as err:
            raise RegistryUnavailable(host, f"token server unreachable ({type(err).__name__})"
                                      ) from None
        try:
            data = json.loads(body)
            token = data.get("token") or data.get("access_token")
            ttl = float(data.get("expires_in") or _TOKEN_DEFAULT_TTL_S)
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise RegistryUnavailable(host, "token server returned no token")
        # Renew a little early: a token that expires mid-request fails that request.
        return _Grant(f"Bearer {token}", time.monotonic() + max(ttl - 5.0, 1.0))
