"""SDK 2.63's sandbox fields against the whole platform, through the official SDK: connect keeps
a sandbox alive 300 s from the connect (E2B's TestConnectV2_Timeout), `network.https_ports`
reaches a guest app serving TLS with a self-signed certificate, workload identity (`iam`) is
refused by name, and a pause of a wedged guest (envd SIGSTOPped in the guest) behaves as E2B's:
refused with `strict=True`, else marked `envd_unresponsive_at_pause`, resumed only by a reboot."""

from __future__ import annotations

import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from e2b import Sandbox
from e2b.exceptions import (
    GuestUnresponsiveException,
    SandboxException,
    ServiceBusyException,
)

from aenv_cli.platform import Platform

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

TLS_PORT = 8443
# A TLS app in the guest: Python's own server over the certificate the test uploads.
TLS_APP = """
import http.server, ssl
class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello over tls"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = http.server.ThreadingHTTPServer(("0.0.0.0", GUEST_PORT), Hello)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain("/home/user/cert.pem", "/home/user/key.pem")
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
""".replace("GUEST_PORT", str(TLS_PORT))
# The guest's envd processes (and tini, pid 1, which the kernel shields from SIGSTOP); the
# bracket keeps grep itself out.
ENVD_PIDS = "grep -l 'aenv_env[d]' /proc/[0-9]*/cmdline | cut -d/ -f3"


def _left_s(sbx_id: str) -> float:
    return (Sandbox.get_info(sbx_id).end_at - datetime.now(UTC)).total_seconds()


def test_connect_keeps_it_alive_300_s_from_now_and_never_shortens(
    e2b_vars: dict[str, str]
) -> None:
    short, long = Sandbox.create(timeout=30), Sandbox.create(timeout=3600)
    try:
        assert _left_s(short.sandbox_id) < 31
        Sandbox.connect(short.sandbox_id)  # no timeout: E2B's 300 s from the connect
        assert 280 < _left_s(short.sandbox_id) <= 300
        Sandbox.connect(long.sandbox_id)
        assert _left_s(long.sandbox_id) > 3500
    finally:
        short.kill()
        long.kill()


def test_iam_workload_identity_is_refused_by_name(e2b_vars: dict[str, str]) -> None:
    with pytest.raises(SandboxException) as refused:
        Sandbox.create(timeout=60, iam={"tokens": {"aws": {
            "audience": "sts.amazonaws.com", "token_type": "JWT-SVID"}}})
    assert str(refused.value).startswith("400: iam.tokens")


def test_https_ports_reach_a_guest_app_serving_tls(
    e2b_vars: dict[str, str], platform: Platform, tmp_path: Path
) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=guest.invalid", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    sbx = Sandbox.create(timeout=300, network={"https_ports": [TLS_PORT]})
    try:
        network = Sandbox.get_info(sbx.sandbox_id).network
        assert network is not None and network["https_ports"] == [TLS_PORT]
        sbx.files.write("/home/user/key.pem", key.read_bytes())
        sbx.files.write("/home/user/cert.pem", cert.read_bytes())
        sbx.files.write("/home/user/tls_app.py", TLS_APP)
        sbx.commands.run("python3 /home/user/tls_app.py", background=True, timeout=0)
        headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": str(TLS_PORT)}
        deadline = time.monotonic() + 60
        while (answer := httpx.get(platform.sandbox_url, headers=headers, timeout=60)
               ).status_code != 200:
            assert time.monotonic() < deadline, f"no TLS app: {answer.status_code} {answer.text}"
            time.sleep(0.5)
        assert answer.text == "hello over tls"
    finally:
        sbx.kill()


def _wedge(sbx: Sandbox, platform: Platform) -> None:
    """SIGSTOPs envd in the guest (a second after this returns), until it stops answering."""
    pids = sbx.commands.run(ENVD_PIDS, user="root").stdout.split()
    assert pids
    sbx.commands.run(f"sleep 1; kill -STOP {' '.join(pids)}", user="root", background=True,
                     timeout=0)
    health = f"{platform.sandbox_url}/health"
    headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            httpx.get(health, headers=headers, timeout=5)
        except httpx.TimeoutException:
            return
        time.sleep(0.5)
    raise AssertionError("envd still answers")


def test_a_wedged_guest_pauses_as_e2bs(e2b_vars: dict[str, str], platform: Platform) -> None:
    sbx = Sandbox.create(timeout=600)
    try:
        sbx.files.write("/home/user/marker", "kept on disk")
        sbx.commands.run("sync", user="root")
        _wedge(sbx, platform)
        with pytest.raises(ServiceBusyException):
            sbx.pause(strict=True)  # refused: it keeps running
        assert Sandbox.get_info(sbx.sandbox_id).state.value == "running"
        assert sbx.pause() is True  # taken anyway, marked
        info = Sandbox.get_info(sbx.sandbox_id)
        assert info.state.value == "paused" and info.envd_unresponsive_at_pause is True
        with pytest.raises(GuestUnresponsiveException):
            Sandbox.connect(sbx.sandbox_id)
        rebooted = Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
        assert rebooted.files.read("/home/user/marker") == "kept on disk"
        assert rebooted.commands.run("echo alive").stdout.strip() == "alive"
        assert Sandbox.get_info(sbx.sandbox_id).envd_unresponsive_at_pause is None
    finally:
        sbx.kill()
