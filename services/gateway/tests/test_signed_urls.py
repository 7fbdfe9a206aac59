"""Routing of signed /files URLs that carry no sandbox id (pure)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import Unauthenticated
from aenv_common.sandbox_routing import ENVD_PORT, SandboxTarget
from aenv_envd.signing import file_signature
from aenv_gateway.rest.signed_urls import SignedFileRouter

RECORDS = [
    cluster_pb2.SandboxRecord(sandbox_id="a", envd_access_token="token-a"),
    cluster_pb2.SandboxRecord(sandbox_id="b", envd_access_token="token-b"),
    cluster_pb2.SandboxRecord(sandbox_id="open"),  # no token: nothing is signed for it
]


def scope(method: str, route: str = "/files", **query: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": route,
            "query_string": urlencode(query).encode()}


def signed(token: str, operation: str, user: str = "", expiration: int | None = None
           ) -> dict[str, str]:
    query = {"path": "/tmp/f", "signature": file_signature("/tmp/f", operation, user, token,
                                                           expiration)}
    if user:
        query["username"] = user
    if expiration is not None:
        query["signature_expiration"] = str(expiration)
    return query


def test_the_signing_sandbox_is_found() -> None:
    router = SignedFileRouter(lambda: RECORDS)
    assert router.target(scope("GET", **signed("token-b", "read"))) == SandboxTarget(
        "b", ENVD_PORT)
    assert router.target(scope("POST", **signed("token-a", "write", "root", 99))) == (
        SandboxTarget("a", ENVD_PORT))


def test_no_sandbox_for_another_operation_or_a_forged_signature_is_e2bs_401() -> None:
    router = SignedFileRouter(lambda: RECORDS)
    for request in (scope("POST", **signed("token-b", "read")),
                    scope("GET", path="/tmp/f", signature="v1_forged")):
        with pytest.raises(Unauthenticated, match=r"^invalid signature$"):
            router.target(request)


def test_unsigned_requests_and_other_paths_are_no_signed_file_requests() -> None:
    router = SignedFileRouter(lambda: RECORDS)
    assert router.target(scope("GET", "/elsewhere", **signed("token-b", "read"))) is None
    assert router.target(scope("GET", path="/tmp/f")) is None
    assert router.target(scope("DELETE", **signed("token-b", "read"))) is None


def test_a_remembered_signature_stops_matching_once_its_sandbox_is_gone() -> None:
    records = list(RECORDS)
    router = SignedFileRouter(lambda: records)
    request = scope("GET", **signed("token-a", "read"))
    assert router.target(request) == SandboxTarget("a", ENVD_PORT)
    records.pop(0)
    with pytest.raises(Unauthenticated):
        router.target(request)
