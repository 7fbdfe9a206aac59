"""The HTTPS edge an SDK reaches with only E2B_DOMAIN set: `https://api.<domain>` is the control
plane, `https://<port>-<id>.<domain>` a sandbox's port, both on one certificate for the domain.
The client resolves every name to the gateway's loopback listener, as wildcard DNS would."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pydantic
import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from aenv_cli.selfsigned import TlsFiles, ensure_self_signed
from aenv_common.errors import InvalidArgument
from aenv_gateway.config import GatewaySettings

from .conftest import API_KEY, Stack, running_stack

DOMAIN = "aenv.test"


class ToLoopback(AbstractResolver):
    """Wildcard DNS for the test: every name is 127.0.0.1."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self) -> None:
        pass


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return ensure_self_signed(tmp_path / "tls", DOMAIN)


def _client(tls: TlsFiles) -> aiohttp.ClientSession:
    # Only our CA: a certificate the gateway did not get from it fails verification.
    context = ssl.create_default_context(cafile=str(tls.ca))
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, resolver=ToLoopback()))


def _tls_settings(tls: TlsFiles) -> dict[str, Any]:
    return {"tls_listen": "127.0.0.1:0", "tls_cert_file": tls.cert, "tls_key_file": tls.key}


async def _create(http: aiohttp.ClientSession, api: str) -> str:
    async with http.post(f"{api}/v2/sandboxes", headers={"X-API-Key": API_KEY},
                         json={"templateID": "base"}) as resp:
        assert resp.status == 201, await resp.text()
        return str((await resp.json())["sandboxID"])


async def test_api_and_sandbox_hosts_are_served_over_tls(tls: TlsFiles) -> None:
    async with running_stack(**_tls_settings(tls)) as stack, _client(tls) as http:
        port = stack.gateway.https_port
        assert port is not None
        api = f"https://api.{DOMAIN}:{port}"
        async with http.get(f"{api}/health") as resp:
            assert resp.status == 200
        sid = await _create(http, api)
        async with http.get(f"{api}/sandboxes/{sid}", headers={"X-API-Key": API_KEY}) as resp:
            assert resp.status == 200 and (await resp.json())["domain"] == DOMAIN
        app = f"https://{stack.guest_port}-{sid}.{DOMAIN}:{port}"
        async with http.post(f"{app}/echo?q=1", data=b"hi") as resp:
            assert resp.status == 200
            assert await resp.json() == {"method": "POST", "path": "/echo", "query": "q=1",
                                         "body": "hi"}
        # The plain HTTP edge keeps serving beside it.
        async with http.get(f"{stack.url}/health") as resp:
            assert resp.status == 200


async def test_a_sandbox_host_reaches_the_app_even_on_a_control_plane_path(
    stack: Stack,
) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{stack.url}/v2/sandboxes", headers={"X-API-Key": API_KEY},
                             json={"templateID": "base"}) as resp:
            sid = (await resp.json())["sandboxID"]
        host = {"Host": f"{stack.guest_port}-{sid}.{DOMAIN}"}
        async with http.get(f"{stack.url}/sandboxes", headers=host) as resp:
            assert resp.status == 200
            assert (await resp.json())["path"] == "/sandboxes"
        # Without the sandbox's Host the same path is the control plane's (no key: 401).
        async with http.get(f"{stack.url}/sandboxes") as resp:
            assert resp.status == 401


async def test_the_certificate_covers_the_domain_only(tls: TlsFiles) -> None:
    async with running_stack(**_tls_settings(tls)) as stack, _client(tls) as http:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            async with http.get(f"https://api.other.test:{stack.gateway.https_port}/health"):
                pass


def test_a_tls_edge_needs_a_domain_and_a_certificate() -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        GatewaySettings(tls_listen="127.0.0.1:0", domain=None)
    message = str(err.value)
    for name in ("AENV_GATEWAY_DOMAIN", "AENV_GATEWAY_TLS_CERT_FILE", "AENV_GATEWAY_TLS_KEY_FILE"):
        assert name in message


async def test_an_unreadable_certificate_fails_with_its_reason(tls: TlsFiles) -> None:
    tls.key.write_text("not a key\n")
    with pytest.raises(InvalidArgument, match=str(tls.key)):
        async with running_stack(**_tls_settings(tls)):
            pass
