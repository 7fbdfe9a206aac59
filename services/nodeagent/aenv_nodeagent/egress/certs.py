"""The cluster's egress CA and the leaf certificates it mints for hosts with header rules.

A rule (`network.rules`) adds headers to a sandbox's requests to one host. For HTTPS the egress
process can only do that by terminating the guest's TLS itself, so the guest must accept a
certificate for that host that the platform made: every guest trusts one CA per cluster (envd
installs it at /init) and the egress process mints a short-lived leaf for each rule host from it.
Hosts without rules are never terminated: their TLS passes through untouched, end to end.

The CA lives in etcd under `<prefix>/egress-ca` as JSON: its certificate in clear and its private
key sealed with the platform secrets key (`aenv_common.secrets.sealing`, AAD `egress-ca`), in a
versioned format (`aenv_common.state_files`; format 1 is what every agent has written). A newer
format is refused by name; unknown fields are ignored, since the pair of certificate and sealed
key is the CA whatever a newer agent notes beside it (a new sealing would raise the format). The
first node agent to start creates it with a compare-and-create, so racing nodes agree on one; the
agent hands it to its egress process (`configure`), which mints leaves (ECDSA P-256, SAN = the
host, valid a day) and keeps the TLS contexts of the most recent hosts (`LeafContexts`).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import ipaddress
import logging
import os
import ssl
from collections import OrderedDict
from dataclasses import dataclass, field

import aetcd
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aenv_common import errors
from aenv_common.cluster.keys import EtcdKeys
from aenv_common.cluster.store import etcd_errors
from aenv_common.secrets.sealing import SealBroken, SecretsKey, open_sealed, seal
from aenv_common.state_files import StateFormat, Unknown

log = logging.getLogger(__name__)

CA_COMMON_NAME = "aenv egress CA"
CA_VALIDITY = dt.timedelta(days=3650)
LEAF_VALIDITY = dt.timedelta(days=1)
# A guest's clock is set from the host's at /init; the margin covers a guest a little behind.
NOT_BEFORE_MARGIN = dt.timedelta(hours=1)
# A leaf is minted again once half its life is gone, so no guest sees one about to expire.
LEAF_RENEW_AFTER = LEAF_VALIDITY / 2
LEAF_CACHE_SIZE = 1024
_SEAL_AAD = b"egress-ca"
_CA_FORMAT = StateFormat("egress CA", 1, frozenset({"cert_pem", "sealed_key"}), Unknown.IGNORE)


def egress_ca_key(keys: EtcdKeys) -> bytes:
    """The etcd key of the cluster's egress CA (one per cluster, beside the record kinds)."""
    return f"{keys.prefix}/egress-ca".encode()


@dataclass(frozen=True)
class Leaf:
    """A minted server certificate and its key (PEM)."""

    name: str
    cert_pem: bytes
    key_pem: bytes = field(repr=False)
    not_after: dt.datetime


class EgressCA:
    """The CA certificate and its signing key. Its repr names the certificate, never the key."""

    def __init__(self, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
        self._cert = cert
        self._key = key

    @classmethod
    def generate(cls, now: dt.datetime | None = None) -> EgressCA:
        now = now or dt.datetime.now(dt.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aenv"),
            x509.NameAttribute(NameOID.COMMON_NAME, CA_COMMON_NAME),
        ])
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - NOT_BEFORE_MARGIN)
            .not_valid_after(now + CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(cert_sign=True), critical=True)
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> EgressCA:
        """The CA handed over `configure` (raises InvalidArgument on anything else)."""
        try:
            cert = x509.load_pem_x509_certificate(cert_pem)
            key = serialization.load_pem_private_key(key_pem, password=None)
        except ValueError as exc:
            raise errors.InvalidArgument(f"not an egress CA certificate and key: {exc}") from exc
        if not isinstance(key, ec.EllipticCurvePrivateKey) or (
            _spki(key.public_key()) != _spki(cert.public_key())
        ):
            raise errors.InvalidArgument("the egress CA key does not match its certificate")
        return cls(cert, key)

    @property
    def certificate(self) -> x509.Certificate:
        return self._cert

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def key_pem(self) -> bytes:
        """The private key, for the egress process only (over its control channel)."""
        return _private_pem(self._key)

    @property
    def fingerprint(self) -> str:
        return self._cert.fingerprint(hashes.SHA256()).hex()

    def __repr__(self) -> str:
        return f"EgressCA(subject={self._cert.subject.rfc4514_string()!r}, " \
               f"sha256={self.fingerprint[:16]})"

    def mint(self, name: str, now: dt.datetime | None = None) -> Leaf:
        """A server certificate for `name` (a DNS name or an IP literal) signed by this CA."""
        now = now or dt.datetime.now(dt.UTC)
        name = name.rstrip(".").lower()
        key = ec.generate_private_key(ec.SECP256R1())
        not_after = min(now + LEAF_VALIDITY, self._cert.not_valid_after_utc)
        ca_ski = self._cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name[:64])]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - NOT_BEFORE_MARGIN)
            .not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([_general_name(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                critical=False)
            .sign(self._key, hashes.SHA256())
        )
        return Leaf(name, cert.public_bytes(serialization.Encoding.PEM), _private_pem(key),
                    not_after)


class LeafContexts:
    """Server-side TLS contexts toward guests, one per host name, minted on first use and kept
    for the `size` most recent names (minting costs a key generation and a signature)."""

    def __init__(self, ca: EgressCA, size: int = LEAF_CACHE_SIZE) -> None:
        self._ca = ca
        self._size = size
        self._contexts: OrderedDict[str, tuple[ssl.SSLContext, dt.datetime]] = OrderedDict()

    def context_for(self, name: str, now: dt.datetime | None = None) -> ssl.SSLContext:
        now = now or dt.datetime.now(dt.UTC)
        name = name.rstrip(".").lower()
        held = self._contexts.get(name)
        if held is not None and held[1] - now > LEAF_RENEW_AFTER:
            self._contexts.move_to_end(name)
            return held[0]
        leaf = self._ca.mint(name, now)
        context = server_context(leaf)
        self._contexts[name] = (context, leaf.not_after)
        self._contexts.move_to_end(name)
        while len(self._contexts) > self._size:
            self._contexts.popitem(last=False)
        return context

    def __len__(self) -> int:
        return len(self._contexts)


def server_context(leaf: Leaf) -> ssl.SSLContext:
    """TLS 1.2+ toward the guest, offering only HTTP/1.1 (the relay speaks nothing else)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    # ssl loads keys from paths only: an anonymous in-memory file keeps the key off every disk.
    fd = os.memfd_create("aenv-egress-leaf", os.MFD_CLOEXEC)
    try:
        os.write(fd, leaf.cert_pem + leaf.key_pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    return context


async def load_or_create_cluster_ca(
    etcd: aetcd.Client, keys: EtcdKeys, secrets_key: SecretsKey
) -> EgressCA:
    """The cluster's egress CA, created by whichever node asks first (compare-and-create: one
    CA however many nodes race). Raises Internal when the stored key cannot be opened with this
    node's secrets key (the node was given another cluster's key)."""
    key = egress_ca_key(keys)
    with etcd_errors("read the egress CA"):
        found = await etcd.get(key)
    if found is not None:
        return _decode(found.value, secrets_key)
    fresh = EgressCA.generate()
    txn = etcd.transactions
    with etcd_errors("create the egress CA"):
        created, responses = await etcd.transaction(
            compare=[txn.version(key) == 0],
            success=[txn.put(key, _encode(fresh, secrets_key))],
            failure=[txn.get(key)],
        )
    if created:
        log.info("created the cluster egress CA", extra={"sha256": fresh.fingerprint})
        return fresh
    # Another node won the race: use its CA.
    return _decode(responses[0][0][0], secrets_key)


def _encode(ca: EgressCA, secrets_key: SecretsKey) -> bytes:
    sealed = seal(secrets_key, ca.key_pem(), _SEAL_AAD)
    return _CA_FORMAT.encode({
        "cert_pem": ca.cert_pem.decode(),
        "sealed_key": base64.b64encode(sealed).decode(),
    })


def _decode(stored: bytes, secrets_key: SecretsKey) -> EgressCA:
    try:
        doc = _CA_FORMAT.decode(stored, "the stored egress CA")
        sealed = base64.b64decode(doc["sealed_key"], validate=True)
        cert_pem = doc["cert_pem"].encode()
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise errors.Internal(f"the stored egress CA is unreadable: {exc}") from exc
    try:
        key_pem = open_sealed(secrets_key, sealed, _SEAL_AAD)
    except SealBroken as exc:
        raise errors.Internal(
            "the stored egress CA's key does not open with this node's secrets key "
            "(is the node using another cluster's secrets.key?)") from exc
    return EgressCA.from_pem(cert_pem, key_pem)


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())


def _spki(key: CertificatePublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False)


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)
