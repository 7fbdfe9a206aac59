"""`aenv auth key create|ls|revoke` against a stand-in of the gateway's /admin/keys."""

from __future__ import annotations

import hashlib
import json

import httpx
from aenv_cli_fake_server import API_KEY, URL, invoke

from aenv_cli.api import SandboxApi
from aenv_cli.commands.context import Clients
from aenv_cli.server import Server


class FakeKeys:
    """/admin/keys as the gateway answers it (admin key only; digests kept, not keys)."""

    def __init__(self) -> None:
        self.digests: dict[str, tuple[str, str]] = {}

    def handle(self, request: httpx.Request) -> httpx.Response:
        if request.headers.get("x-api-key") != API_KEY:
            return httpx.Response(403, json={"code": 403, "message": "only the admin key"})
        if request.method == "POST":
            key_id, key = f"{len(self.digests):016x}", "e2b_" + "ab" * 20
            name = json.loads(request.content)["name"]
            self.digests[key_id] = (name, hashlib.sha256(key.encode()).hexdigest())
            return httpx.Response(201, json={"keyID": key_id, "name": name, "key": key,
                                             "admin": False, "createdAt": "2026-01-02T03:04:05Z"})
        if request.method == "GET":
            return httpx.Response(200, json=[
                {"keyID": k, "name": n, "admin": False, "createdAt": "2026-01-02T03:04:05Z"}
                for k, (n, _) in self.digests.items()])
        key_id = request.url.path.rsplit("/", 1)[1]
        if self.digests.pop(key_id, None) is None:
            missing = f"api key '{key_id}' not found"
            return httpx.Response(404, json={"code": 404, "message": missing})
        return httpx.Response(204)


def _clients(keys: FakeKeys, api_key: str = API_KEY) -> Clients:
    transport = httpx.MockTransport(keys.handle)
    return Clients(lambda: Server(URL, api_key, "test"),
                   make_api=lambda s: SandboxApi(s, transport=transport))


def test_keys_are_created_listed_and_revoked() -> None:
    keys = FakeKeys()
    created = invoke(_clients(keys), "auth", "key", "create", "--name", "ci")
    assert created.exit_code == 0, created.output
    assert "key id: 0000000000000000" in created.stdout and "e2b_abab" in created.stdout
    listed = invoke(_clients(keys), "auth", "key", "ls", "-o", "json")
    assert [k["name"] for k in json.loads(listed.stdout)] == ["ci"]
    revoked = invoke(_clients(keys), "auth", "key", "revoke", "0000000000000000")
    assert revoked.exit_code == 0 and "revoked 0000000000000000" in revoked.stdout
    again = invoke(_clients(keys), "auth", "key", "revoke", "0000000000000000")
    assert again.exit_code == 1 and "not found" in again.stderr


def test_a_key_that_is_not_the_admin_key_is_refused() -> None:
    result = invoke(_clients(FakeKeys(), api_key="e2b_other"), "auth", "key", "ls")
    assert result.exit_code == 1 and "only the admin key" in result.stderr
