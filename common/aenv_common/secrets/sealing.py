"""Sealing with the platform secrets key: what is confidential and must sit in etcd (secret
values, an egress proxy's password, the egress CA's private key) is stored sealed, never in clear.

The key is one file per cluster (`CommonSettings.secrets_key_file`, default `<home>/secrets.key`):
32 random bytes, mode 0600, made once by the platform launcher (or a Kubernetes Secret) and read
by every gateway and node. A sealed blob is AES-256-GCM:

    version byte (1) | nonce (12, random per seal) | ciphertext | tag (16)

The associated data (AAD) is not stored: the caller passes what the blob belongs to (for a secret
value: owner, id and version), so a blob copied to another record, or replayed from an older
version, does not open. Anything wrong — tampering, the wrong AAD, another cluster's key — is one
typed error, `SealBroken`, that names no byte of the blob.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from aenv_common.errors import Internal, InvalidArgument

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
# A new layout gets a new version, so old blobs still name how they were made.
_VERSION = b"\x01"


class SealBroken(Internal):
    """A sealed blob did not open: tampered, truncated, bound to other data or sealed with
    another key."""


class SecretsKey:
    """The platform secrets key. Its bytes never appear in a repr, a log or an error."""

    __slots__ = ("_aead",)

    def __init__(self, material: bytes) -> None:
        if len(material) != KEY_BYTES:
            raise InvalidArgument(f"a secrets key is {KEY_BYTES} bytes, not {len(material)}")
        self._aead = AESGCM(material)

    def __repr__(self) -> str:
        return "SecretsKey(<hidden>)"

    @classmethod
    def generate(cls) -> SecretsKey:
        """A fresh random key (tests; files are made by `create_key_file`)."""
        return cls(secrets.token_bytes(KEY_BYTES))


def seal(key: SecretsKey, plaintext: bytes, aad: bytes) -> bytes:
    nonce = secrets.token_bytes(NONCE_BYTES)
    return _VERSION + nonce + key._aead.encrypt(nonce, plaintext, aad)


def open_sealed(key: SecretsKey, sealed: bytes, aad: bytes) -> bytes:
    """:raise SealBroken: the blob does not open with `key` and `aad`."""
    if len(sealed) < 1 + NONCE_BYTES + TAG_BYTES or sealed[:1] != _VERSION:
        raise SealBroken("sealed value is malformed")
    nonce, body = sealed[1 : 1 + NONCE_BYTES], sealed[1 + NONCE_BYTES :]
    try:
        return key._aead.decrypt(nonce, body, aad)
    except InvalidTag:
        raise SealBroken(
            "sealed value does not open: tampered, bound to other data, or sealed with "
            "another secrets key") from None


def load_key(path: Path) -> SecretsKey:
    """Reads the key file.

    :raise InvalidArgument: it is missing, not exactly 32 bytes, or open to every user of the
        host or writable by its group (a key anyone can read protects nothing; a Kubernetes
        Secret volume may make it group-readable, for the pod's fsGroup, and a symlink).
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise InvalidArgument(f"secrets key file {path} does not exist") from None
    except OSError as err:
        raise InvalidArgument(f"secrets key file {path}: {err.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fh.fileno()).st_mode
        material = fh.read(KEY_BYTES + 1)
    if mode & 0o027:
        raise InvalidArgument(
            f"secrets key file {path} has mode {mode & 0o777:o}; it must be 0600 or 0640 at most")
    if len(material) != KEY_BYTES:
        raise InvalidArgument(f"secrets key file {path} must hold exactly {KEY_BYTES} bytes")
    return SecretsKey(material)


def create_key_file(path: Path) -> SecretsKey:
    """The key at `path`, made there first (32 random bytes, 0600) if there is none.

    O_EXCL makes the creation atomic: of two processes starting at once one writes, and the
    other reads what it wrote (a writer's partial file is retried briefly before it counts as
    malformed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _load_when_written(path)
    with os.fdopen(fd, "wb") as fh:
        fh.write(secrets.token_bytes(KEY_BYTES))
        fh.flush()
        os.fsync(fh.fileno())
    return load_key(path)


def _load_when_written(path: Path) -> SecretsKey:
    for _ in range(50):
        if path.stat().st_size >= KEY_BYTES:
            break
        time.sleep(0.01)
    return load_key(path)
