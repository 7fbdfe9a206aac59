"""An in-memory aenv server behind an `httpx.MockTransport`: the REST routes the people-facing
commands call, with E2B's JSON shapes and error bodies, and a record of the requests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, unquote

import httpx
from typer.testing import CliRunner, Result

from aenv_cli.api import SandboxApi
from aenv_cli.commands.context import Clients, GuestOpener
from aenv_cli.commands.terminal import Terminal
from aenv_cli.main import app
from aenv_cli.server import Server

API_KEY = "e2b_" + "ab" * 18
URL = "http://aenv.test:3000"


def sandbox(sandbox_id: str, template: str = "base", state: str = "running",
            **metadata: str) -> dict[str, Any]:
    return {
        "sandboxID": sandbox_id, "templateID": template, "clientID": "node1",
        "state": state, "startedAt": "2026-12-04T18:00:00Z", "endAt": "2026-12-04T18:05:00Z",
        "cpuCount": 2, "memoryMB": 512, "metadata": metadata, "envdVersion": "0.2.0",
        "envdAccessToken": "secret-token",
    }


@dataclass
class FakeServer:
    sandboxes: dict[str, dict[str, Any]] = field(default_factory=dict)
    snapshots: dict[str, dict[str, Any]] = field(default_factory=dict)
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)
    page_size: int = 100
    leases: list[dict[str, Any]] = field(default_factory=list)
    reachable: bool = True

    def add(self, *shown: dict[str, Any]) -> None:
        for one in shown:
            self.sandboxes[one["sandboxID"]] = one

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if not self.reachable:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content) if request.content else None
        params = dict(parse_qsl(request.url.query.decode()))
        path = unquote(request.url.path)
        self.requests.append((request.method, path, params, body))
        if request.headers.get("x-api-key") != API_KEY:
            return _error(401, "Invalid API key")
        return self._route(request.method, path.strip("/").split("/"), params, body)

    def _route(self, method: str, parts: list[str], params: dict[str, str],
               body: Any) -> httpx.Response:
        match method, parts:
            case "GET", ["v2", "sandboxes"]:
                return self._list(params)
            case "GET", ["sandboxes", "metrics"]:
                ids = params["sandbox_ids"].split(",")
                return _json({"sandboxes": {i: self.metrics[i] for i in ids if i in self.metrics}})
            case "POST", ["sandboxes"]:
                made = sandbox(f"sbx{len(self.sandboxes) + 1}", body["templateID"],
                               **body.get("metadata", {}))
                self.add(made)
                return _json(made, 201)
            case "GET", ["leases"]:
                return _json(self.leases)
            case "GET", ["snapshots"]:
                return _json([s for s in self.snapshots.values()
                              if params.get("sandboxID") in (None, s["sandboxID"])])
            case "GET", ["templates", "aliases", alias]:
                found = [t for t in self.templates.values() if alias in t["names"]]
                return _json({"templateID": found[0]["templateID"]}) if found else _error(
                    404, f"template '{alias}' not found")
            case "GET", ["templates", template_id]:
                known = self.templates.get(template_id)
                return _json(known) if known else _error(404, f"template '{template_id}' "
                                                          "not found")
            case "DELETE", ["templates", snapshot_id]:
                if self.snapshots.pop(snapshot_id, None) is None:
                    return _error(404, f"template '{snapshot_id}' not found")
                return httpx.Response(204)
            case "GET", ["v2", "sandboxes", sid, "logs"]:
                return self._known(sid) or _json({"logs": self._logs(sid, params)})
            case _, ["sandboxes", sid, *rest]:
                return self._known(sid) or self._sandbox_call(method, sid, rest, body)
        return _error(404, f"no route {method} /{'/'.join(parts)}")

    def _list(self, params: dict[str, str]) -> httpx.Response:
        states = params.get("state", "running,paused").split(",")
        wanted = dict(parse_qsl(params.get("metadata", "")))
        listed = [s for s in self.sandboxes.values() if s["state"] in states
                  and params.get("template") in (None, s["templateID"])
                  and all(s["metadata"].get(k) == v for k, v in wanted.items())]
        start = int(params.get("nextToken", "0"))
        page = listed[start:start + self.page_size]
        more = start + self.page_size < len(listed)
        headers = {"X-Next-Token": str(start + self.page_size)} if more else {}
        return httpx.Response(200, json=page, headers=headers)

    def _logs(self, sid: str, params: dict[str, str]) -> list[dict[str, Any]]:
        """E2B's v2 logs: with `direction=forward`, the entries from the `cursor` ms on."""
        entries = self.logs.get(sid, [])
        if params.get("direction") != "forward":
            return entries
        since = int(params["cursor"])
        return [e for e in entries
                if datetime.fromisoformat(e["timestamp"]).timestamp() * 1000 >= since]

    def _known(self, sid: str) -> httpx.Response | None:
        return None if sid in self.sandboxes else _error(404, f"sandbox \"{sid}\" not found")

    def _sandbox_call(self, method: str, sid: str, rest: list[str],
                      body: Any) -> httpx.Response:
        shown = self.sandboxes[sid]
        match method, rest:
            case "GET", []:
                return _json(shown)
            case "DELETE", []:
                del self.sandboxes[sid]
                return httpx.Response(204)
            case "POST", ["pause"]:
                if shown["state"] != "running":
                    return _error(409, f"sandbox \"{sid}\" is not running")
                shown["state"] = "paused"
                return httpx.Response(204)
            case "POST", ["resume"]:
                if shown["state"] != "paused":
                    return _error(409, f"sandbox \"{sid}\" is not paused")
                shown["state"] = "running"
                return _json(shown, 201)
            case "POST", ["timeout"]:
                shown["timeout"] = body["timeout"]
                return httpx.Response(204)
            case "POST", ["snapshots"]:
                snapshot_id = f"snap{len(self.snapshots) + 1}"
                snap = {"snapshotID": snapshot_id,
                        "names": [body["name"]] if body.get("name") else [], "sandboxID": sid}
                self.snapshots[snapshot_id] = snap
                return _json({k: v for k, v in snap.items() if k != "sandboxID"}, 201)
            case "POST", ["fork"]:
                return self._fork(sid, body["count"])
            case "POST", ["reset"]:
                if body["snapshotID"] not in self.snapshots:
                    return _error(404, f"snapshot \"{body['snapshotID']}\" not found")
                return _json(shown)
        return _error(404, f"no route {method} {sid}/{'/'.join(rest)}")

    def _fork(self, sid: str, count: int) -> httpx.Response:
        results: list[dict[str, Any]] = []
        for n in range(count):
            if n == 2:  # the third child fails, as one node out of room would
                results.append({"error": {"code": 503, "message": "no room"}})
                continue
            child = sandbox(f"{sid}-c{n}")
            self.add(child)
            results.append({"sandbox": child})
        return _json(results, 201)


def _json(body: Any, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


def _error(status: int, message: str) -> httpx.Response:
    return httpx.Response(status, json={"code": status, "message": message})


def fake_clients(server: FakeServer, *, open_guest: GuestOpener | None = None,
                 terminal: Terminal | None = None, api_key: str = API_KEY) -> Clients:
    transport = server.transport()
    return Clients(lambda: Server(URL, api_key, "test"),
                   make_api=lambda s: SandboxApi(s, transport=transport),
                   open_guest=open_guest, terminal=terminal)


def invoke(clients: Clients, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), obj=clients, input=input)
