"""The gateway's REST API as the people-facing commands use it: E2B's control plane
(`/v2/sandboxes`, `/sandboxes/{id}`, timeout, pause, resume, metrics, logs, templates) and the
native extensions on the same URL (snapshots, fork, reset). One URL and one key serve it all, as
`aenv auth login` stores them; replies are E2B's JSON bodies, shown as they come.

Every failure is a typed `aenv_common.errors` error carrying the gateway's own message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from aenv_cli.server import Server
from aenv_common.errors import (
    AenvError,
    Conflict,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from aenv_common.limits import DEFAULT_TIMEOUT_S

HTTP_TIMEOUT_S = 60.0
# Pause, resume, fork, reset and snapshots wait for the VM: slow under TCG.
SLOW_TIMEOUT_S = 600.0
API_KEY_HEADER = "X-API-Key"
# The most log entries one call asks for (the gateway's bound of /v2 logs).
LOGS_PAGE = 1000

Json = dict[str, Any]

_BY_STATUS: dict[int, type[AenvError]] = {
    400: InvalidArgument, 401: Unauthenticated, 403: Unauthenticated, 404: NotFound,
    409: Conflict, 429: ResourceExhausted, 503: Unavailable,
}


class SandboxApi:
    """A client of one server. `transport` is for tests (an `httpx.MockTransport`)."""

    def __init__(self, server: Server, transport: httpx.BaseTransport | None = None) -> None:
        self.server = server
        # The server is named by the user: no proxy from the environment applies to it.
        self._http = httpx.Client(
            base_url=server.url, timeout=HTTP_TIMEOUT_S, trust_env=False, transport=transport,
            headers={API_KEY_HEADER: server.api_key},
        )

    def close(self) -> None:
        self._http.close()

    def check(self) -> None:
        """:raise Unauthenticated: the key is refused. :raise Unavailable: no answer."""
        self._send("GET", "/v2/sandboxes", params={"limit": "1"})

    # -- sandboxes -------------------------------------------------------------------------

    def create(self, template: str, *, timeout_s: int | None = None,
               metadata: Mapping[str, str] | None = None,
               envs: Mapping[str, str] | None = None) -> Json:
        body: Json = {"templateID": template, "metadata": dict(metadata or {}),
                      "envVars": dict(envs or {}),
                      "timeout": DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s}
        return self._json("POST", "/sandboxes", body, timeout=SLOW_TIMEOUT_S)

    def sandboxes(self, *, states: list[str] | None = None, template: str | None = None,
             metadata: Mapping[str, str] | None = None) -> list[Json]:
        """Every page of `GET /v2/sandboxes` (running and paused unless `states` says)."""
        params: dict[str, str] = {"limit": "100"}
        if states:
            params["state"] = ",".join(states)
        if template:
            params["template"] = template
        if metadata:
            params["metadata"] = urlencode({quote(k): quote(v) for k, v in metadata.items()})
        return self._every_page("/v2/sandboxes", params)

    def get(self, sandbox_id: str) -> Json:
        return self._json("GET", f"/sandboxes/{_id(sandbox_id)}")

    def kill(self, sandbox_id: str) -> None:
        self._send("DELETE", f"/sandboxes/{_id(sandbox_id)}")

    def pause(self, sandbox_id: str) -> None:
        self._send("POST", f"/sandboxes/{_id(sandbox_id)}/pause", json={},
                   timeout=SLOW_TIMEOUT_S)

    def resume(self, sandbox_id: str, timeout_s: int | None = None) -> Json:
        """:raise Conflict: the sandbox is not paused."""
        body = {} if timeout_s is None else {"timeout": timeout_s}
        return self._json("POST", f"/sandboxes/{_id(sandbox_id)}/resume", body,
                          timeout=SLOW_TIMEOUT_S)

    def set_timeout(self, sandbox_id: str, timeout_s: int) -> None:
        self._send("POST", f"/sandboxes/{_id(sandbox_id)}/timeout", json={"timeout": timeout_s})

    def fork(self, sandbox_id: str, count: int, timeout_s: int | None = None) -> list[Json]:
        body: Json = {"count": count}
        if timeout_s is not None:
            body["timeout"] = timeout_s
        response = self._send("POST", f"/sandboxes/{_id(sandbox_id)}/fork", json=body,
                              timeout=SLOW_TIMEOUT_S)
        return _json_list(response)

    def reset(self, sandbox_id: str, snapshot_id: str) -> Json:
        return self._json("POST", f"/sandboxes/{_id(sandbox_id)}/reset",
                          {"snapshotID": snapshot_id}, timeout=SLOW_TIMEOUT_S)

    def logs(self, sandbox_id: str, *, since_ms: int | None = None) -> list[Json]:
        """The newest entries; with `since_ms`, those from that millisecond on, oldest first."""
        params = None if since_ms is None else {
            "cursor": str(since_ms), "direction": "forward", "limit": str(LOGS_PAGE)}
        body = self._json("GET", f"/v2/sandboxes/{_id(sandbox_id)}/logs", params=params)
        logs = body.get("logs")
        return [e for e in logs if isinstance(e, dict)] if isinstance(logs, list) else []

    def latest_metrics(self, sandbox_ids: list[str]) -> dict[str, Json]:
        """The newest sample of each sandbox (none yet: left out)."""
        if not sandbox_ids:
            return {}
        body = self._json("GET", "/sandboxes/metrics",
                          params={"sandbox_ids": ",".join(sandbox_ids)})
        shown = body.get("sandboxes")
        return dict(shown) if isinstance(shown, dict) else {}

    # -- snapshots -------------------------------------------------------------------------

    def snapshot(self, sandbox_id: str, name: str | None = None) -> Json:
        body = {"name": name} if name else {}
        return self._json("POST", f"/sandboxes/{_id(sandbox_id)}/snapshots", body,
                          timeout=SLOW_TIMEOUT_S)

    def snapshots(self, sandbox_id: str | None = None) -> list[Json]:
        params: dict[str, str] = {"limit": "100"}
        if sandbox_id:
            params["sandboxID"] = sandbox_id
        return self._every_page("/snapshots", params)

    def leases(self) -> list[Json]:
        """The key's live experiment leases (`GET /leases`), oldest first."""
        return _json_list(self._send("GET", "/leases"))

    def delete_snapshot(self, snapshot_id: str) -> None:
        """E2B deletes snapshots where it deletes templates."""
        self._send("DELETE", f"/templates/{_id(snapshot_id)}")

    # -- templates -------------------------------------------------------------------------

    def template(self, name_or_id: str) -> Json:
        try:
            return self._json("GET", f"/templates/{_id(name_or_id)}")
        except NotFound:
            alias = self._json("GET", f"/templates/aliases/{_id(name_or_id)}")
            return self._json("GET", f"/templates/{_id(str(alias.get('templateID', '')))}")

    # -- transport -------------------------------------------------------------------------

    # -- API keys (the admin key only) ------------------------------------------------------

    def create_key(self, name: str) -> Json:
        """The new key (`key`: shown once), its `keyID` and `name`."""
        return self._json("POST", "/admin/keys", {"name": name})

    def keys(self) -> list[Json]:
        return _json_list(self._send("GET", "/admin/keys"))

    def revoke_key(self, key_id: str) -> None:
        """:raise NotFound: no such key."""
        self._send("DELETE", f"/admin/keys/{_id(key_id)}")

    def _every_page(self, path: str, params: dict[str, str]) -> list[Json]:
        """Follows E2B's `X-Next-Token` pages to the end."""
        listed: list[Json] = []
        while True:
            response = self._send("GET", path, params=params)
            listed.extend(_json_list(response))
            token = response.headers.get("x-next-token")
            if not token:
                return listed
            params = {**params, "nextToken": token}

    def _json(self, method: str, path: str, body: Json | None = None, *,
              params: Mapping[str, str] | None = None, timeout: float = HTTP_TIMEOUT_S) -> Json:
        reply = self._send(method, path, json=body, params=params, timeout=timeout).json()
        if not isinstance(reply, dict):
            raise Unavailable(f"{self.server.url} answered {method} {path} with no object")
        return reply

    def _send(self, method: str, path: str, *, json: Json | None = None,
              params: Mapping[str, str] | None = None,
              timeout: float = HTTP_TIMEOUT_S) -> httpx.Response:
        try:
            response = self._http.request(method, path, json=json, params=params,
                                          timeout=timeout)
        except httpx.TransportError as err:
            raise Unavailable(f"cannot reach the aenv server at {self.server.url} "
                              f"({type(err).__name__})") from None
        if response.is_success:
            return response
        raise answered_error(response)


def _id(value: str) -> str:
    return quote(value, safe="")


def _json_list(response: httpx.Response) -> list[Json]:
    body = response.json()
    return [item for item in body if isinstance(item, dict)] if isinstance(body, list) else []


def answered_error(response: httpx.Response) -> AenvError:
    """The typed error of a server's error answer, with its message."""
    return _BY_STATUS.get(response.status_code, AenvError)(_message(response))


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return f"the server answered HTTP {response.status_code}"
