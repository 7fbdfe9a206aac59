"""Signed /files URLs (spec §3.6.3): v1_ + base64-nopad(SHA-256("path:op:user:token[:exp]"))."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time


def file_signature(
    path: str, operation: str, username: str, token: str, expiration: int | None
) -> str:
    material = f"{path}:{operation}:{username}:{token}"
    if expiration is not None:
        material += f":{expiration}"
    digest = hashlib.sha256(material.encode()).digest()
    return "v1_" + base64.b64encode(digest).decode().rstrip("=")


def signature_valid(
    signature: str,
    expiration: str | None,
    path: str,
    operation: str,
    username: str,
    token: str,
    now: float | None = None,
) -> bool:
    expires_at: int | None = None
    if expiration:
        try:
            expires_at = int(expiration)
        except ValueError:
            return False
        if expires_at < (time.time() if now is None else now):
            return False
    expected = file_signature(path, operation, username, token, expires_at)
    return hmac.compare_digest(signature.encode(), expected.encode())
