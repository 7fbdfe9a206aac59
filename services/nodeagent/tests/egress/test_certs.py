"""The egress CA: leaves a client trusting the CA accepts for their name only, the bounded leaf
cache, and the cluster CA in a real etcd — one CA however many nodes race, its key sealed."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import ssl

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aenv_common import errors
from aenv_common.cluster import ClusterStore
from aenv_common.secrets.sealing import SecretsKey
from aenv_nodeagent.egress.certs import (
    CA_COMMON_NAME,
    LEAF_VALIDITY,
    EgressCA,
    LeafContexts,
    egress_ca_key,
    load_or_create_cluster_ca,
)


def _client_context(ca: EgressCA) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    context.set_alpn_protocols(["h2", "http/1.1"])  # as curl offers
    return context


async def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> str | None:
    """A real TLS handshake over loopback; the ALPN the client got."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    listener = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
    try:
        port = listener.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname=name)
        alpn: str | None = writer.get_extra_info("ssl_object").selected_alpn_protocol()
        writer.close()
        return alpn
    finally:
        listener.close()
        await listener.wait_closed()


def test_a_leaf_names_its_host_and_chains_to_the_ca() -> None:
    ca = EgressCA.generate()
    now = dt.datetime.now(dt.UTC)
    leaf = x509.load_pem_x509_certificate(ca.mint("API.Example.com.", now).cert_pem)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["api.example.com"]
    assert leaf.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == CA_COMMON_NAME
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert not leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    key = leaf.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1"
    assert leaf.not_valid_after_utc - now <= LEAF_VALIDITY
    leaf.verify_directly_issued_by(ca.certificate)


async def test_a_client_trusting_the_ca_accepts_the_leaf_for_its_name_only() -> None:
    ca = EgressCA.generate()
    leaves = LeafContexts(ca)
    client = _client_context(ca)
    assert await _handshake(leaves.context_for("api.example.com"), client,
                            "api.example.com") == "http/1.1"
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(leaves.context_for("api.example.com"), client, "other.example.com")
    stranger = _client_context(EgressCA.generate())
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(leaves.context_for("api.example.com"), stranger, "api.example.com")


def test_leaf_contexts_are_reused_renewed_and_bounded() -> None:
    leaves = LeafContexts(EgressCA.generate(), size=2)
    now = dt.datetime.now(dt.UTC)
    first = leaves.context_for("a.example", now)
    assert leaves.context_for("A.example.", now) is first
    assert leaves.context_for("a.example", now + LEAF_VALIDITY * 0.6) is not first
    leaves.context_for("b.example", now)
    leaves.context_for("c.example", now)
    assert len(leaves) == 2


def test_the_ca_key_stays_out_of_its_repr_and_must_match_its_certificate() -> None:
    ca = EgressCA.generate()
    assert "PRIVATE" not in repr(ca) and CA_COMMON_NAME in repr(ca)
    assert EgressCA.from_pem(ca.cert_pem, ca.key_pem()).fingerprint == ca.fingerprint
    with pytest.raises(errors.InvalidArgument, match="does not match"):
        EgressCA.from_pem(ca.cert_pem, EgressCA.generate().key_pem())


@pytest.mark.etcd
async def test_racing_nodes_agree_on_one_cluster_ca_with_a_sealed_key(
    cluster_store: ClusterStore,
) -> None:
    store = cluster_store
    key = SecretsKey.generate()
    racing = await asyncio.gather(
        *[load_or_create_cluster_ca(store.client, store.keys, key) for _ in range(4)])
    assert len({ca.fingerprint for ca in racing}) == 1
    later = await load_or_create_cluster_ca(store.client, store.keys, key)
    assert later.fingerprint == racing[0].fingerprint
    stored = await store.client.get(egress_ca_key(store.keys))
    assert stored is not None and b"PRIVATE KEY" not in stored.value
    assert racing[0].key_pem().split(b"\n")[1] not in stored.value
    with pytest.raises(errors.Internal, match="another cluster"):
        await load_or_create_cluster_ca(store.client, store.keys, SecretsKey.generate())


@pytest.mark.etcd
async def test_a_stored_ca_of_a_newer_format_is_refused_and_a_newer_note_ignored(
    cluster_store: ClusterStore,
) -> None:
    store, key = cluster_store, SecretsKey.generate()
    made = await load_or_create_cluster_ca(store.client, store.keys, key)
    stored = await store.client.get(egress_ca_key(store.keys))
    assert stored is not None
    document = json.loads(stored.value)
    assert document["format"] == 1
    await store.client.put(egress_ca_key(store.keys),
                           json.dumps(document | {"rotated_at": 1}).encode())
    read = await load_or_create_cluster_ca(store.client, store.keys, key)
    assert read.fingerprint == made.fingerprint
    await store.client.put(egress_ca_key(store.keys), json.dumps(document | {"format": 2}).encode())
    with pytest.raises(errors.Internal, match=re.escape(
            "the stored egress CA is format 2; this node agent reads formats up to 1")):
        await load_or_create_cluster_ca(store.client, store.keys, key)
