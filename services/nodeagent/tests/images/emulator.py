"""An in-test registry speaking the distribution API with Docker's bearer-token protocol, its
token server, and a blob store that the registry redirects to (as S3-backed registries do).

It serves the blobs of an OCI layout directory and counts what it is asked."""

from __future__ import annotations

import base64
import json
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

USER, PASSWORD = "alice", "correct horse"


@dataclass
class Emulator:
    layout: Path
    tag: str = "latest"
    requests: Counter[str] = field(default_factory=Counter)
    tokens: set[str] = field(default_factory=set)
    storage_auth_headers: list[str] = field(default_factory=list)
    namespaces: set[str] = field(default_factory=set)  # ?ns= of manifest requests (mirrors)
    port: int = 0
    storage_port: int = 0

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _blob(self, digest: str) -> bytes:
        return (self.layout / "blobs" / "sha256" / digest.split(":", 1)[1]).read_bytes()

    def _challenge(self, repo: str) -> web.Response:
        realm = f"http://127.0.0.1:{self.port}/token"
        header = f'Bearer realm="{realm}",service="emulator",scope="repository:{repo}:pull"'
        return web.json_response({"errors": [{"code": "UNAUTHORIZED", "message": "token"}]},
                                 status=401, headers={"WWW-Authenticate": header})

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        return header.startswith("Bearer ") and header[7:] in self.tokens

    async def token(self, request: web.Request) -> web.Response:
        self.requests["token"] += 1
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        if request.headers.get("Authorization") != expected:
            return web.Response(status=401)
        if request.query.get("service") != "emulator" or "pull" not in request.query["scope"]:
            return web.Response(status=400)
        token = secrets.token_hex(16)
        self.tokens.add(token)
        return web.json_response({"token": token, "expires_in": 300})

    async def v2(self, request: web.Request) -> web.Response:
        return web.json_response({}) if self._authorized(request) else self._challenge("")

    async def manifest(self, request: web.Request) -> web.Response:
        repo, ref = request.match_info["repo"], request.match_info["ref"]
        self.requests["manifest"] += 1
        self.namespaces.add(request.query.get("ns", ""))
        if not self._authorized(request):
            return self._challenge(repo)
        index = json.loads((self.layout / "index.json").read_text())
        [top] = index["manifests"]
        digest = top["digest"] if ref == self.tag else ref
        if not digest.startswith("sha256:") or not (
                self.layout / "blobs" / "sha256" / digest[7:]).is_file():
            return web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, status=404)
        body = self._blob(digest)
        media_type = json.loads(body).get("mediaType", top["mediaType"])
        return web.Response(body=body, content_type=media_type)

    async def blob(self, request: web.Request) -> web.Response:
        self.requests["blob"] += 1
        if not self._authorized(request):
            return self._challenge(request.match_info["repo"])
        digest = request.match_info["digest"]
        raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:{self.storage_port}/store/{digest}")

    async def stored(self, request: web.Request) -> web.Response:
        self.storage_auth_headers.append(request.headers.get("Authorization", ""))
        return web.Response(body=self._blob(request.match_info["digest"]))


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    """`app` on a free loopback port: (its runner, to clean up; the port)."""
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, port


@asynccontextmanager
async def running(emulator: Emulator) -> AsyncIterator[Emulator]:
    app = web.Application()
    app.router.add_get("/token", emulator.token)
    app.router.add_get("/v2/", emulator.v2)
    app.router.add_get("/v2/{repo:.+}/manifests/{ref}", emulator.manifest)
    app.router.add_get("/v2/{repo:.+}/blobs/{digest}", emulator.blob)
    storage = web.Application()
    storage.router.add_get("/store/{digest}", emulator.stored)
    runner, emulator.port = await serve(app)
    storage_runner, emulator.storage_port = await serve(storage)
    try:
        yield emulator
    finally:
        await runner.cleanup()
        await storage_runner.cleanup()
