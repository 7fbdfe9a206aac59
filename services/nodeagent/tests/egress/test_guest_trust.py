"""The node agent's /init hands the cluster's egress CA to a real envd process, which installs it
(paths under the test's folder, never the host's trust) and gives clients its variables; a later
/init (a resume) leaves the install as it was."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
from envd_harness import start_envd, stop_process

from aenv_nodeagent.egress.certs import EgressCA
from aenv_nodeagent.envd_client import EnvdClient


@pytest.fixture
async def envd(tmp_path: Path) -> AsyncIterator[tuple[str, int, Path]]:
    bundle = tmp_path / "ca-certificates.crt"
    bundle.write_text("")
    process, url = start_envd({
        "AENV_ENVD_EGRESS_CA_FILE": str(tmp_path / "aenv-egress.crt"),
        "AENV_ENVD_SYSTEM_CA_BUNDLES": str(bundle)})
    try:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        yield parts.hostname, parts.port, tmp_path
    finally:
        stop_process(process)


async def test_init_installs_the_cluster_ca_in_the_guest(
    envd: tuple[str, int, Path],
) -> None:
    host, port, folder = envd
    ca = EgressCA.generate()
    token = secrets.token_hex(8)
    async with aiohttp.ClientSession() as session:
        client = EnvdClient(session, egress_ca_pem=ca.cert_pem.decode())
        await client.wait_healthy(host, 20, port=port)
        await client.init(host, env_vars={"A": "1"}, access_token=token, port=port)
        installed = (folder / "ca-certificates.crt").read_text()
        await client.init(host, env_vars={}, access_token=token, current_token=token, port=port)
        async with session.get(f"http://{host}:{port}/envs",
                               headers={"X-Access-Token": token}) as response:
            envs = await response.json()
    assert (folder / "aenv-egress.crt").read_bytes() == ca.cert_pem
    assert (folder / "ca-certificates.crt").read_text() == installed
    assert installed.count(ca.cert_pem.decode()) == 1
    assert envs == {"A": "1", "SSL_CERT_FILE": str(folder / "ca-certificates.crt"),
                    "REQUESTS_CA_BUNDLE": str(folder / "ca-certificates.crt"),
                    "NODE_EXTRA_CA_CERTS": str(folder / "aenv-egress.crt")}
