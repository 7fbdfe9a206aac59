"""Error paths against the real platform: each condition ends in the SDK's intended exception
(the control plane's typed-error table is in services/gateway/tests/test_sdk_error_mapping.py),
and features these machines do not offer fail cleanly."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

import httpx
import pytest
from e2b import Sandbox, TimeoutException
from e2b.exceptions import (
    AuthenticationException,
    FileNotFoundException,
    InvalidArgumentException,
    NotFoundException,
    SandboxException,
    SandboxNotFoundException,
)

from aenv_cli.platform import Platform

from ..conftest import GATEWAY_DOMAIN

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

MISSING = "nosuchsandbox0000000"


def test_wrong_api_key(e2b_vars: dict[str, str], sbx: Sandbox) -> None:
    wrong = "e2b_" + "0" * 40
    with pytest.raises(AuthenticationException, match="401"):
        Sandbox.create(api_key=wrong)
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key=wrong).next_items()
    with pytest.raises(AuthenticationException):
        Sandbox.get_info(sbx.sandbox_id, api_key=wrong)


def test_control_plane_statuses(e2b_vars: dict[str, str]) -> None:
    with pytest.raises(SandboxException, match=r"^400: .*timeout"):
        Sandbox.create(timeout=10**9)
    with pytest.raises(SandboxException, match=r"^404: .*no-such-template"):
        Sandbox.create("no-such-template")
    for call in (
        lambda: Sandbox.get_info(MISSING),
        lambda: Sandbox.set_timeout(MISSING, 30),
        lambda: Sandbox.connect(MISSING),
        lambda: Sandbox.get_metrics(MISSING),
        lambda: Sandbox.update_network(MISSING, {}),
    ):
        with pytest.raises(SandboxNotFoundException):
            call()
    assert Sandbox.kill(MISSING) is False


def test_envd_statuses(sbx: Sandbox) -> None:
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/no/such/file")
    with pytest.raises(FileNotFoundException):
        sbx.files.list("/no/such/dir")
    with pytest.raises(InvalidArgumentException):
        sbx.files.list("/etc/hostname")
    with pytest.raises(InvalidArgumentException):
        sbx.commands.run("true", cwd="/no/such/dir")
    with pytest.raises(AuthenticationException):
        sbx.commands.run("true", user="ghost")
    with pytest.raises(NotFoundException):
        sbx.commands.send_stdin(999999, "x")
    with pytest.raises(NotFoundException):
        sbx.commands.connect(999999)
    assert sbx.commands.kill(999999) is False
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=1)


def test_wrong_access_token_is_refused(platform: Platform, sbx: Sandbox) -> None:
    """envd enforces the token behind the gateway: 401 JSON, which the SDK maps to
    AuthenticationException (spec §3.1)."""
    headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": "wrong"}
    response = httpx.post(f"{platform.sandbox_url}/filesystem.Filesystem/Stat",
                          headers=headers, json={"path": "/"}, timeout=120)
    assert response.status_code == 401
    assert response.json()["code"] == 401 and "access token" in response.json()["message"]


def test_orchestrator_only_envd_paths_are_not_public(platform: Platform, sbx: Sandbox) -> None:
    response = httpx.post(f"{platform.sandbox_url}/init", json={},
                          headers={"E2b-Sandbox-Id": sbx.sandbox_id}, timeout=120)
    assert response.status_code == 403 and response.json()["code"] == 403


def test_killed_sandbox_fails_fast_everywhere(e2b_vars: dict[str, str]) -> None:
    sandbox = Sandbox.create()
    sandbox.kill()
    # Uploads thrice: a refusal answered before the upload's body was read reached the SDK as a
    # broken connection about 1 time in 4 (the gateway now reads the body first).
    upload = lambda: sandbox.files.write("/tmp/x", "x")  # noqa: E731
    for call in (
        lambda: sandbox.commands.run("true"),
        lambda: sandbox.files.read("/etc/hostname"),
        upload, upload, upload,
        lambda: sandbox.commands.list(),
    ):
        started = time.monotonic()
        with pytest.raises(SandboxException, match="was not found"):
            call()
        assert time.monotonic() - started < 10


def test_mcp_is_refused_by_name(e2b_vars: dict[str, str]) -> None:
    """No MCP gateway runs in sandboxes here: a create that asks for one is a 400 naming the
    field (never a sandbox without it), and the SDK reports it, it does not crash."""
    with pytest.raises(SandboxException, match=r"^400: mcp: "):
        Sandbox.create(mcp={"exa": {"apiKey": "unused"}})


def test_signed_urls_work_through_host_routing(platform: Platform, sbx: Sandbox) -> None:
    """`download_url`/`upload_url` carry no sandbox id: they route only by Host (spec §1.4)."""
    host = sbx.get_host(49983)
    assert host.endswith("." + GATEWAY_DOMAIN)
    upload = urlsplit(sbx.upload_url("/home/user/signed.txt"))
    up = httpx.post(f"{platform.sandbox_url}{upload.path}?{upload.query}",
                    headers={"Host": host}, files={"file": ("signed.txt", b"signed!")},
                    timeout=120)
    assert up.status_code == 200, up.text
    download = urlsplit(sbx.download_url("/home/user/signed.txt"))
    down = httpx.get(f"{platform.sandbox_url}{download.path}?{download.query}",
                     headers={"Host": host}, timeout=120)
    assert down.status_code == 200 and down.content == b"signed!"
    forged = httpx.get(f"{platform.sandbox_url}/files?path=/home/user/signed.txt"
                       "&signature=v1_forged", headers={"Host": host}, timeout=120)
    assert forged.status_code == 401


def test_signed_urls_work_as_the_sdk_returns_them(sbx: Sandbox) -> None:
    """With `E2B_SANDBOX_URL` the URLs name no sandbox: the gateway finds it by the signature,
    which only that sandbox's token reproduces; envd still checks signature and expiry."""
    upload = sbx.upload_url("/home/user/bare.txt", use_signature_expiration=120)
    assert "E2b-Sandbox" not in upload and sbx.sandbox_id not in upload
    up = httpx.post(upload, files={"file": ("bare.txt", b"bare!")}, timeout=120)
    assert up.status_code == 200, up.text
    down = httpx.get(sbx.download_url("/home/user/bare.txt"), timeout=120)
    assert down.status_code == 200 and down.content == b"bare!"
    # A URL signed for reading does not write: E2B's envd answers 401 "invalid signature".
    misuse = httpx.post(sbx.download_url("/home/user/bare.txt"),
                        files={"file": ("bare.txt", b"x")}, timeout=120)
    assert misuse.status_code == 401
    assert misuse.json() == {"code": 401, "message": "invalid signature"}
    assert sbx.files.read("/home/user/bare.txt") == "bare!"


def test_unknown_names_fail_with_sdk_errors(e2b_vars: dict[str, str]) -> None:
    """An unknown template alias and an unknown volume answer JSON errors the SDK reads as its
    own: False for `Template.exists`, `VolumeNotFoundException` for a volume's info.
    (Templates: tests/e2e/test_template_build_sdk.py; volumes: tests/e2e/test_volumes.py.)"""
    from e2b import Template, Volume
    from e2b.exceptions import VolumeNotFoundException

    assert Template.exists("no-such-template-alias") is False
    with pytest.raises(VolumeNotFoundException):
        Volume.get_info("vol-nosuchvolumenosuchvo")
    assert Volume.destroy("vol-nosuchvolumenosuchvo") is False
