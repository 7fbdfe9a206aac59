"""The HTTPS edge's pieces, fast: the node's own CA and certificate, the domain check, the
environment it gives the gateway and SDK programs, and the DNS the ready panel prints."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from rich.console import Console

from aenv_cli.edge import PublicEdge, check_domain, dns_records
from aenv_cli.selfsigned import ensure_self_signed
from aenv_cli.up import edge_text
from aenv_common.errors import InvalidArgument


def _names(path: Path) -> list[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return sorted(san.get_values_for_type(x509.DNSName))


def test_the_certificate_is_for_the_domain_and_its_wildcard_signed_by_the_ca(
    tmp_path: Path,
) -> None:
    files = ensure_self_signed(tmp_path / "tls", "sbx.example.com")
    assert _names(files.cert) == ["*.sbx.example.com", "sbx.example.com"]
    # A client trusting the CA accepts the certificate for the names the SDK uses.
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(files.cert, files.key)
    client = ssl.create_default_context(cafile=str(files.ca))
    for name in ("api.sbx.example.com", "49983-abc123.sbx.example.com"):
        assert _handshake(server, client, name)
    assert not _handshake(server, client, "deep.name.sbx.example.com")
    for private in (files.key, tmp_path / "tls" / "ca-key.pem"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600
    # The bundle keeps the machine's CAs and adds ours.
    bundle = files.bundle.read_text()
    assert files.ca.read_text() in bundle and bundle.count("BEGIN CERTIFICATE") > 1


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> bool:
    """A TLS handshake in memory: does the client accept the server's certificate for `name`?"""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    tls_client = client.wrap_bio(c_in, c_out, server_hostname=name)
    tls_server = server.wrap_bio(s_in, s_out, server_side=True)
    for _ in range(10):
        for side in (tls_client, tls_server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLCertVerificationError:
                return False
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        try:
            tls_client.do_handshake()
            return True
        except ssl.SSLWantReadError:
            continue
        except ssl.SSLCertVerificationError:
            return False
    raise AssertionError("handshake did not finish")


def test_the_ca_is_kept_and_the_certificate_follows_the_domain(tmp_path: Path) -> None:
    first = ensure_self_signed(tmp_path, "a.example.com")
    ca, cert = first.ca.read_bytes(), first.cert.read_bytes()
    assert ensure_self_signed(tmp_path, "a.example.com").cert.read_bytes() == cert
    second = ensure_self_signed(tmp_path, "b.example.com")
    assert second.ca.read_bytes() == ca
    assert _names(second.cert) == ["*.b.example.com", "b.example.com"]


@pytest.mark.parametrize("bad", ["localhost", "UPPER.example.com", "-x.example.com",
                                 "a..example.com", "sbx.example.com.", "x" * 64 + ".com"])
def test_a_domain_must_be_a_lower_case_dns_name(bad: str) -> None:
    with pytest.raises(InvalidArgument, match="not a DNS name"):
        check_domain(bad)


def test_a_given_certificate_needs_its_key() -> None:
    with pytest.raises(InvalidArgument, match="needs its key"):
        PublicEdge("sbx.example.com", cert_file=Path("/etc/cert.pem"))


def test_the_edge_environment_for_gateway_and_sdk(tmp_path: Path) -> None:
    own = PublicEdge("sbx.example.com", "10.0.0.5:443")
    env = own.gateway_environment(tmp_path)
    assert env == {
        "AENV_GATEWAY_DOMAIN": "sbx.example.com",
        "AENV_GATEWAY_TLS_LISTEN": "10.0.0.5:443",
        "AENV_GATEWAY_TLS_CERT_FILE": str(tmp_path / "tls" / "gateway.pem"),
        "AENV_GATEWAY_TLS_KEY_FILE": str(tmp_path / "tls" / "gateway-key.pem"),
    }
    assert own.e2b_env_lines("e2b_key", tmp_path) == [
        "E2B_API_KEY=e2b_key", "E2B_DOMAIN=sbx.example.com",
        f"SSL_CERT_FILE={tmp_path / 'tls' / 'ca-bundle.pem'}",
    ]
    given = PublicEdge("sbx.example.com", cert_file=Path("/c.pem"), key_file=Path("/k.pem"))
    assert given.gateway_environment(tmp_path)["AENV_GATEWAY_TLS_CERT_FILE"] == "/c.pem"
    # A certificate from a real CA needs nothing beyond the two E2B variables.
    assert given.e2b_env_lines("k", tmp_path) == ["E2B_API_KEY=k", "E2B_DOMAIN=sbx.example.com"]


def test_the_ready_panel_says_which_dns_the_domain_needs(tmp_path: Path) -> None:
    edge = PublicEdge("sbx.example.com")
    console = Console(width=200, record=True)
    console.print(edge_text(edge, tmp_path, ["192.0.2.10"]))
    text = console.export_text()
    assert "api.sbx.example.com.  A  192.0.2.10" in text
    assert "*.sbx.example.com.    A  192.0.2.10" in text
    assert "dnsmasq: address=/sbx.example.com/192.0.2.10" in text
    assert f"SSL_CERT_FILE={tmp_path / 'tls' / 'ca-bundle.pem'}" in text
    assert dns_records("d.example", ["2001:db8::1"])[0] == "api.d.example.  AAAA  2001:db8::1"
