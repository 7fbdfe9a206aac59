"""What a sandbox's network settings ask of traffic to its app ports (pure)."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv_common.errors import PermissionDenied
from aenv_common.sandbox_routing import ENVD_PORT
from aenv_nodeagent.proxy import TRAFFIC_TOKEN_HEADER, app_port_headers


def record(private: bool = False, mask: str = "") -> cluster_pb2.SandboxRecord:
    return cluster_pb2.SandboxRecord(
        sandbox_id="sbx1",
        traffic_access_token="secret-token" if private else "",
        network=cluster_pb2.NetworkPolicy(private_traffic=private, mask_request_host=mask),
    )


def test_public_sandbox_ports_need_nothing() -> None:
    assert app_port_headers(record(), 8080, {}) == {}


def test_private_sandbox_ports_need_the_traffic_token() -> None:
    with pytest.raises(PermissionDenied, match=TRAFFIC_TOKEN_HEADER):
        app_port_headers(record(private=True), 8080, {})
    with pytest.raises(PermissionDenied):
        app_port_headers(record(private=True), 8080, {TRAFFIC_TOKEN_HEADER: "wrong"})
    assert app_port_headers(record(private=True), 8080,
                            {TRAFFIC_TOKEN_HEADER: "secret-token"}) == {}


def test_envd_port_is_guarded_by_its_own_token_not_the_traffic_one() -> None:
    assert app_port_headers(record(private=True, mask="x"), ENVD_PORT, {}) == {}


def test_masked_host_names_the_port() -> None:
    masked = app_port_headers(record(mask="${PORT}-app.example.com"), 3000, {})
    assert masked == {"Host": "3000-app.example.com"}
