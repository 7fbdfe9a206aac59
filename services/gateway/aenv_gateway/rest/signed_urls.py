"""Signed /files URLs name no sandbox: `download_url()`/`upload_url()` with `E2B_SANDBOX_URL`
give `<gateway>/files?path=…&signature=…`. The signature is keyed by the sandbox's envd token,
which only that sandbox has, so the sandbox whose token reproduces it is the one meant.

envd still verifies the signature and its expiry; this only picks where the request goes.
"""

from __future__ import annotations

import hmac
from collections import OrderedDict
from collections.abc import Callable, Iterable
from urllib.parse import parse_qs

from starlette.types import Scope

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Unauthenticated
from aenv_common.sandbox_routing import ENVD_PORT, SandboxTarget
from aenv_envd.signing import file_signature

_OPERATIONS = {"GET": "read", "POST": "write"}
_REMEMBERED = 4096  # signatures of recent URLs (repeat downloads skip the scan)


class SignedFileRouter:
    def __init__(self, records: Callable[[], Iterable[cluster_pb2.SandboxRecord]]) -> None:
        self._records = records
        self._recent: OrderedDict[str, str] = OrderedDict()

    def target(self, scope: Scope) -> SandboxTarget | None:
        """The sandbox a signed /files request is for; None for a request that is no signed
        /files request.

        :raise Unauthenticated: signed, but no sandbox's token reproduces the signature (a URL
            signed for reading used to write, a forged one): E2B's envd answers it so.
        """
        operation = _OPERATIONS.get(scope.get("method", ""))
        if scope["path"] != "/files" or operation is None:
            return None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        signature = _one(query, "signature")
        if not signature:
            return None
        expiration = _one(query, "signature_expiration")
        expires = expiration.isascii() and expiration.isdigit()  # isdigit() alone takes "²"
        material = _SignedRequest(_one(query, "path"), operation, _one(query, "username"),
                                  int(expiration) if expires else None)
        sandbox_id = self._find(signature, material)
        if sandbox_id is None:
            raise Unauthenticated("invalid signature")
        return SandboxTarget(sandbox_id, ENVD_PORT)

    def _find(self, signature: str, request: _SignedRequest) -> str | None:
        tokens = {r.sandbox_id: r.envd_access_token for r in self._records()
                  if r.envd_access_token}
        remembered = self._recent.get(signature)
        candidates = (
            [remembered] if remembered is not None and remembered in tokens else list(tokens))
        for sandbox_id in candidates:
            if request.signed_by(tokens[sandbox_id], signature):
                self._remember(signature, sandbox_id)
                return sandbox_id
        return None

    def _remember(self, signature: str, sandbox_id: str) -> None:
        self._recent[signature] = sandbox_id
        self._recent.move_to_end(signature)
        while len(self._recent) > _REMEMBERED:
            self._recent.popitem(last=False)


class _SignedRequest:
    def __init__(self, path: str, operation: str, username: str, expiration: int | None) -> None:
        self._parts = (path, operation, username)
        self._expiration = expiration

    def signed_by(self, token: str, signature: str) -> bool:
        expected = file_signature(*self._parts, token, self._expiration)
        return hmac.compare_digest(expected.encode(), signature.encode())


def _one(query: dict[str, list[str]], name: str) -> str:
    values = query.get(name)
    return values[0] if values else ""
