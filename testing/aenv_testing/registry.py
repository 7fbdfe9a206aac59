"""Real registries for the `registry` tests: Debian's `docker-registry` (distribution 2.8) on a
free loopback port with its config and storage in a temporary directory, anonymous, with an
htpasswd file (bcrypt, made here) or with token auth; images pushed to it with skopeo."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from aenv_testing.ports import free_port

REGISTRY_BIN = Path("/usr/bin/docker-registry")


def bcrypt_hash(password: str) -> str:
    import bcrypt  # a test-only dependency (requirements-dev)

    """A bcrypt hash for htpasswd (the registry takes no other kind); few rounds: a test."""

    hashed: bytes = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5))
    return hashed.decode()


@dataclass
class Registry:
    host: str
    storage: Path
    access_log: Path

    def blob_requests(self) -> int:
        """GETs of blobs the registry has served so far (from its access log)."""
        text = self.access_log.read_text(errors="replace")
        return len(re.findall(r'"GET /v2/[^ ]+/blobs/sha256:[0-9a-f]{64}', text))

    def blob_data(self, digest: str) -> Path:
        hex_ = digest.split(":", 1)[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hex_[:2] / hex_ / "data"

    def corrupt(self, digest: str) -> None:
        """Flips a byte of a stored blob: the registry serves bytes that miss their digest."""
        data = bytearray(self.blob_data(digest).read_bytes())
        data[len(data) // 2] ^= 0xFF
        self.blob_data(digest).write_bytes(bytes(data))

    async def layer_digests(self, name: str, tag: str) -> list[str]:
        """The layers of a single-platform image as the registry's manifest lists them."""
        accept = ", ".join(f"application/vnd.{kind}+json" for kind in (
            "oci.image.manifest.v1", "docker.distribution.manifest.v2"))
        async with aiohttp.ClientSession() as session, session.get(
                f"http://{self.host}/v2/{name}/manifests/{tag}",
                headers={"Accept": accept}) as resp:
            resp.raise_for_status()
            manifest = await resp.json(content_type=None)
        return [layer["digest"] for layer in manifest["layers"]]


def _config(port: int, storage: Path, auth: dict[str, Any] | None) -> str:
    lines = [
        "version: 0.1",
        "log:", "  level: warn", "  accesslog:", "    disabled: false",
        "storage:", "  filesystem:", f"    rootdirectory: {storage}",
        "  delete:", "    enabled: true",
        "http:", f"  addr: 127.0.0.1:{port}", f"  secret: {secrets.token_hex(16)}",
    ]
    if auth:
        [(kind, params)] = auth.items()
        lines += ["auth:", f"  {kind}:"] + [f"    {k}: {v}" for k, v in params.items()]
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def docker_registry(work: Path, auth: dict[str, Any] | None = None
                          ) -> AsyncIterator[Registry]:
    """A running docker-registry (`auth`: None, {"htpasswd": {...}} or {"token": {...}})."""
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = work / "config.yml"
    config.write_text(_config(port, work / "storage", auth))
    log = work / "registry.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            str(REGISTRY_BIN), "serve", str(config), stdout=out, stderr=asyncio.subprocess.STDOUT)
    try:
        await _wait_ready(port, proc, log)
        yield Registry(f"127.0.0.1:{port}", work / "storage", log)
    finally:
        proc.terminate()  # this one process, by its pid
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def _wait_ready(port: int, proc: asyncio.subprocess.Process, log: Path) -> None:
    deadline = time.monotonic() + 20
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if proc.returncode is not None:
                raise RuntimeError(f"docker-registry exited: {log.read_text()[-2000:]}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{port}/v2/") as resp:
                    if resp.status in (200, 401):
                        return
            await asyncio.sleep(0.05)
    raise TimeoutError("docker-registry did not start")


async def push(source: str, registry: Registry, name: str, creds: str | None = None,
               all_platforms: bool = False) -> None:
    """`skopeo copy <source> docker://<registry>/<name>` (async: a token server in this event
    loop must answer skopeo meanwhile)."""
    argv = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false"]
    argv += ["--dest-creds", creds] if creds else []
    argv += ["--all"] if all_platforms else []
    proc = await asyncio.create_subprocess_exec(
        *argv, source, f"docker://{registry.host}/{name}",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"skopeo copy to {registry.host}/{name} failed: {err.decode()[-2000:]}")
