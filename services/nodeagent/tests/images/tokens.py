"""A token server for the registry's `auth: token` mode: Docker's token protocol, issuing JWTs
signed (RS256) by a test key whose self-signed certificate the registry trusts, named by the
libtrust key id distribution 2.8 looks keys up by."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from .emulator import serve

SERVICE, ISSUER = "test-registry", "test-token-issuer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def libtrust_key_id(key: rsa.RSAPublicKey) -> str:
    """sha256 of the DER public key, first 240 bits, base32, in 12 groups of 4."""
    der = key.public_bytes(serialization.Encoding.DER,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    b32 = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode()
    return ":".join(b32[i:i + 4] for i in range(0, 48, 4))


@dataclass
class TokenServer:
    user: str
    password: str
    work: Path
    issued: int = 0
    refused: int = 0
    port: int = 0
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    def write_certificate(self) -> Path:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test token signer")])
        now = datetime.datetime.now(datetime.UTC)
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=1))
                .sign(self.key, hashes.SHA256()))
        path = self.work / "token.crt"
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    def registry_auth(self) -> dict[str, Any]:
        return {"token": {"realm": self.realm, "service": SERVICE, "issuer": ISSUER,
                          "rootcertbundle": str(self.write_certificate())}}

    def _jwt(self, subject: str, access: list[dict[str, Any]]) -> str:
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "kid": libtrust_key_id(self.key.public_key())}
        claims = {"iss": ISSUER, "sub": subject, "aud": SERVICE, "exp": now + 300,
                  "nbf": now - 10, "iat": now, "jti": secrets.token_hex(8), "access": access}
        signing = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self.key.sign(signing.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing}.{_b64(signature)}"

    async def token(self, request: web.Request) -> web.Response:
        expected = "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
        if request.headers.get("Authorization") != expected:
            self.refused += 1
            return web.json_response({"details": "bad credentials"}, status=401)
        access = []
        for scope in request.query.getall("scope", []):
            for item in scope.split(" "):
                kind, _, rest = item.partition(":")
                name, _, actions = rest.rpartition(":")
                access.append({"type": kind, "name": name, "actions": actions.split(",")})
        self.issued += 1
        token = self._jwt(self.user, access)
        return web.json_response({"token": token, "access_token": token, "expires_in": 300})


@asynccontextmanager
async def token_server(server: TokenServer) -> AsyncIterator[TokenServer]:
    app = web.Application()
    app.router.add_get("/token", server.token)
    runner, server.port = await serve(app)
    try:
        yield server
    finally:
        await runner.cleanup()
