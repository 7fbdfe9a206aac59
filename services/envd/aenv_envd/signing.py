"""Signed /files URLs (spec §3.6.3): v1_ + base64-nopad(SHA-256("path:op:user:token[:exp]")).

The refusals say what upstream envd says (its validateSigning), because the SDK and its users
see these messages: `{"code": 401, "message": "signature is already expired"}`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

INVALID_SIGNATURE = "invalid signature"
EXPIRED_SIGNATURE = "signature is already expired"
MISSING_SIGNATURE = "missing signature query parameter"


def file_signature(
    path: str, operation: str, username: str, token: str, expiration: int | None
) -> str:
    material = f"{path}:{operation}:{username}:{token}"
    if expiration is not None:
        material += f":{expiration}"
    digest = hashlib.sha256(material.encode()).digest()
    return "v1_" + base64.b64encode(digest).decode().rstrip("=")


def signature_error(
    signature: str | None,
    expiration: str | None,
    path: str,
    operation: str,
    username: str,
    token: str,
    now: float | None = None,
) -> str | None:
    """Why the signed request is refused, or None when it is allowed.

    As upstream, the signature is checked before its expiry: a tampered expired URL is an
    "invalid signature", a genuine one past its time "already expired"."""
    if not signature:
        return MISSING_SIGNATURE
    expires_at: int | None = None
    if expiration:
        try:
            expires_at = int(expiration)
        except ValueError:
            return INVALID_SIGNATURE
    expected = file_signature(path, operation, username, token, expires_at)
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        return INVALID_SIGNATURE
    # Whole seconds, as upstream compares with time.Now().Unix().
    if expires_at is not None and expires_at < int(time.time() if now is None else now):
        return EXPIRED_SIGNATURE
    return None


def signature_valid(
    signature: str,
    expiration: str | None,
    path: str,
    operation: str,
    username: str,
    token: str,
    now: float | None = None,
) -> bool:
    return signature_error(signature, expiration, path, operation, username, token, now) is None
