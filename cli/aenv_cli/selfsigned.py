"""A single node's own TLS: a self-signed CA under `$AENV_HOME/tls` and the gateway certificate
it signs for `<domain>` and `*.<domain>` (the E2B SDKs call `https://api.<domain>` and
`https://<port>-<sandbox id>.<domain>`).

    files = ensure_self_signed(home / "tls", "sbx.example.com")
    files.cert, files.key        # the gateway's (AENV_GATEWAY_TLS_CERT_FILE / _KEY_FILE)
    files.bundle                 # the system's CAs plus ours: SSL_CERT_FILE for SDK programs

The CA is made once and kept, so clients that trust it keep working across restarts and domain
changes; the server certificate is remade when the domain changes or it nears expiry. A cluster
brings its own certificate (the Helm chart's TLS secret) and never uses this.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aenv_cli.files import write_private_file

CA_DAYS = 3650
# Browsers and some TLS stacks refuse leaf certificates valid longer than 398 days.
SERVER_DAYS = 397
RENEW_BEFORE = datetime.timedelta(days=30)
# The system's CA bundle (Debian's ca-certificates), when OpenSSL names none.
DEBIAN_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path
    bundle: Path


def tls_files(directory: Path) -> TlsFiles:
    """Where `ensure_self_signed` keeps its files (known before they exist)."""
    return TlsFiles(
        directory / "ca.pem", directory / "gateway.pem", directory / "gateway-key.pem",
        directory / "ca-bundle.pem",
    )


def ensure_self_signed(directory: Path, domain: str) -> TlsFiles:
    """The CA (made if missing) and a current gateway certificate for `domain`."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = tls_files(directory)
    ca_key_path = directory / "ca-key.pem"
    if not (files.ca.exists() and ca_key_path.exists()):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        write_private_file(ca_key_path, _key_pem(ca_key))
        files.ca.write_text(_cert_pem(_ca_certificate(ca_key)))
    ca_key = _load_key(ca_key_path)
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    if not _current(files.cert, ca, domain):
        key = ec.generate_private_key(ec.SECP256R1())
        write_private_file(files.key, _key_pem(key))
        write_private_file(files.cert, _cert_pem(_server_certificate(key, ca, ca_key, domain)))
    files.bundle.write_text(_system_bundle() + _cert_pem(ca))
    return files


def server_names(domain: str) -> list[str]:
    return [domain, f"*.{domain}"]


def _current(path: Path, ca: x509.Certificate, domain: str) -> bool:
    if not path.exists():
        return False
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (
        cert.issuer == ca.subject
        and sorted(names.get_values_for_type(x509.DNSName)) == sorted(server_names(domain))
        and cert.not_valid_after_utc - _now() > RENEW_BEFORE
    )


def _ca_certificate(key: ec.EllipticCurvePrivateKey) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "aenv single-node CA")])
    return (
        _builder(name, name, key.public_key(), CA_DAYS)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def _server_certificate(
    key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
    domain: str,
) -> x509.Certificate:
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, domain)])
    names = [x509.DNSName(name) for name in server_names(domain)]
    return (
        _builder(subject, ca.subject, key.public_key(), SERVER_DAYS)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, days: int
) -> x509.CertificateBuilder:
    now = _now()
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        # A little in the past: a client whose clock lags ours must not see "not yet valid".
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )


def _system_bundle() -> str:
    """The CAs this machine trusts, so SSL_CERT_FILE=bundle trusts ours without losing them."""
    named = ssl.get_default_verify_paths().openssl_cafile
    for path in (Path(named), DEBIAN_BUNDLE):
        if path.is_file():
            text = path.read_text()
            return text if text.endswith("\n") else text + "\n"
    return ""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _load_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{path} is not the EC key this module writes")
    return key
