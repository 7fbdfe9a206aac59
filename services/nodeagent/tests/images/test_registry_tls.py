"""A registry over HTTPS (Debian's docker-registry with a certificate made here, on loopback,
named as a mirror `https://...` of a registry that is not): the image pulls over TLS when the
certificate's issuer is trusted, and fails with the registry unavailable — never over plain
HTTP — when it is not."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from aenv_nodeagent.images import BlobCache, RegistrySource, build_base_disk
from aenv_nodeagent.images.errors import RegistryUnavailable
from aenv_nodeagent.images.reference import RegistryHosts
from aenv_nodeagent.images.registry import TIMEOUT
from aenv_testing.oci_layouts import busybox_layout
from aenv_testing.ports import free_port
from aenv_testing.registry import REGISTRY_BIN, Registry, push

from .test_registry import check_busybox

pytestmark = [
    pytest.mark.registry,
    pytest.mark.skipif(not REGISTRY_BIN.exists(), reason="docker-registry is not installed"),
]
MIRRORED = "registry.test"  # never reached: its only endpoint is the TLS mirror


def _certificate(work: Path) -> tuple[Path, Path]:
    cert, key = work / "cert.pem", work / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


@contextlib.asynccontextmanager
async def _tls_registry(work: Path) -> AsyncIterator[tuple[Registry, Path]]:
    """A docker-registry serving HTTPS only; yields it and its certificate."""
    work.mkdir(parents=True)
    cert, key = _certificate(work)
    port = free_port()
    config = work / "config.yml"
    config.write_text("\n".join([
        "version: 0.1", "log:", "  level: warn",
        "storage:", "  filesystem:", f"    rootdirectory: {work / 'storage'}",
        "http:", f"  addr: 127.0.0.1:{port}", "  secret: tls-test-secret",
        "  tls:", f"    certificate: {cert}", f"    key: {key}", ""]))
    log = work / "registry.log"
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            str(REGISTRY_BIN), "serve", str(config), stdout=out, stderr=asyncio.subprocess.STDOUT)
    try:
        trusted = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trusted)) as http:
            for _ in range(200):
                assert proc.returncode is None, log.read_text()[-2000:]
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"https://127.0.0.1:{port}/v2/") as resp:
                        if resp.status == 200:
                            break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(f"the TLS registry never answered: {log.read_text()}")
        yield Registry(f"127.0.0.1:{port}", work / "storage", log), cert
    finally:
        proc.terminate()  # this one process, by its pid
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def _session(cafile: Path | None) -> aiohttp.ClientSession:
    """A registry session as images.registry.new_session makes, trusting `cafile` alone."""
    context = ssl.create_default_context(cafile=str(cafile)) if cafile else (
        ssl.create_default_context())
    return aiohttp.ClientSession(timeout=TIMEOUT, auto_decompress=False,
                                 connector=aiohttp.TCPConnector(ssl=context))


async def test_an_image_pulls_over_https_only_from_a_trusted_registry(tmp_path: Path) -> None:
    layout = busybox_layout(tmp_path / "layout")
    async with _tls_registry(tmp_path / "registry") as (registry, cert):
        await push(f"oci:{layout}:1", registry, "tls/bb:1")
        hosts = RegistryHosts(mirrors={MIRRORED: [f"https://{registry.host}"]},
                              mirror_only=[MIRRORED])
        name = f"{MIRRORED}/tls/bb:1"
        async with _session(cert) as session:
            disk = await build_base_disk(RegistrySource(name, hosts, session=session),
                                         BlobCache(tmp_path / "cache"), tmp_path / "out", 64)
        check_busybox(disk.path, tmp_path)

        # Its issuer not trusted: the pull fails, and is not tried over plain HTTP.
        async with _session(None) as session:
            with pytest.raises(RegistryUnavailable, match="CERTIFICATE_VERIFY_FAILED") as err:
                await RegistrySource(name, hosts, session=session).pull(
                    BlobCache(tmp_path / "untrusted"))
        assert err.value.message.startswith(f"registry {registry.host} is unavailable")
        assert not list((tmp_path / "untrusted").rglob("sha256/*"))
