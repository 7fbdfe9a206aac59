"""schemathesis against the gateway's own `/openapi.json`, in-process over the fake backends:
every operation with the key, without one and with a wrong one; no 5xx, every response as the
document says, data the document allows accepted and data it forbids refused (the
edges fuzzed).

The gateway's ASGI app runs on schemathesis's own event loop: the stack (fake scheduler and
node agent, gateway) is started by the app's lifespan there, so its gRPC channels live on the
loop the requests run on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.python import asgi
from starlette.types import Receive, Scope, Send

from aenv_gateway.rest.routes.health import openapi_document

from .conftest import API_KEY, Stack
from .volume_stack import volume_stack

CONFIG = SchemathesisConfig.from_dict({
    # The listing cursor is opaque (base64 of a position): no schema describes which strings
    # decode, so it is sent empty rather than made up.
    "parameters": {"query.nextToken": ""},
    # A metrics window whose start is after its end is refused (400): no schema can say so.
    # Nor that a batch takes count or items, not both, and a templateID, shared or per item.
    "operations": [{"include-path": "/sandboxes/{sandboxID}/metrics",
                    "checks": {"positive_data_acceptance": {
                        "expected-statuses": ["2xx", "400", "401", "404"]}}},
                   {"include-path": "/sandboxes/batch",
                    "checks": {"positive_data_acceptance": {
                        "expected-statuses": ["2xx", "400", "401"]}}},
                   # A secret name is unique (an example sent twice is a 409), its sec_ prefix
                   # reserved and its metadata bounded in bytes: no schema can say so.
                   # An egress rule's host must be one the policy lets through, its placeholders
                   # must name secrets of the key, a proxy's name must resolve, and a name's
                   # labels and length have bounds: no schema can say so.
                   {"include-name-regex": "^POST /(v2/)?sandboxes$",
                    "checks": {"positive_data_acceptance": {
                        "expected-statuses": ["2xx", "400", "401", "404"]}}},
                   {"include-path": "/sandboxes/{sandboxID}/network",
                    "checks": {"positive_data_acceptance": {
                        "expected-statuses": ["2xx", "400", "401", "404"]}}},
                   # A volume name is unique per key (an example sent twice is a 409), and the
                   # volumes the content routes name exist only once made.
                   {"include-path-regex": "^/volume",
                    "checks": {"positive_data_acceptance": {
                        "expected-statuses": ["2xx", "400", "401", "404", "409"]}}},
                   # A lease exists only once taken, its metadata keys are 1..128 characters,
                   # and a bulk operation's empty filter needs all = true: no schema says so.
                   {"include-path-regex": "^/(leases|sandboxes/(kill|pause)$)",
                    "checks": {"positive_data_acceptance": {
                        "expected-statuses": ["2xx", "400", "401", "404"]}}},
                   {"include-path-regex": "^/secrets",
                    "checks": {"positive_data_acceptance": {
                        "expected-statuses": ["2xx", "400", "401", "404", "409"]}}},
                   # A webhook's URL must name a public address (an example may be a private
                   # literal), a key has at most so many webhooks, and the ids the routes name
                   # exist only once made: no schema can say so.
                   {"include-path-regex": "^/events/webhooks",
                    "checks": {"positive_data_acceptance": {
                        "expected-statuses": ["2xx", "400", "401", "404", "429"]}}},
                   # The SSE stream never ends by itself: no case of it could finish.
                   {"include-path": "/events/sandboxes/stream", "enabled": False}],
    "generation": {"deterministic": True, "max-examples": 10, "with-security-parameters": False,
                   "mode": "all"},
    "phases": {"examples": {"enabled": True}, "coverage": {"enabled": True},
               "fuzzing": {"enabled": True}, "stateful": {"enabled": False}},
})
WRONG_KEY = "e2b_" + "f" * 40
# Every case run, by whether it carried the key (the figures of the run).
CASES: dict[str, int] = {"with key": 0, "without key": 0}
# Refusing a missing or wrong key comes before reading anything else: a few cases of each
# operation show it (every case of every operation would triple the run for nothing).
KEYLESS_PER_OPERATION = 4
_keyless: dict[str, int] = {}


class StackApp:
    """The gateway's app, its stack started and stopped by the ASGI lifespan."""

    def __init__(self) -> None:
        self.stack: Stack | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            assert self.stack is not None
            await self.stack.gateway.app(scope, receive, send)
            return
        await receive()  # lifespan.startup
        # With a (fake) snapstore VolumeService: the volume routes have their backend.
        async with volume_stack() as running:
            self.stack = running.stack
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})


APP = StackApp()
schema = schemathesis.openapi.from_dict(openapi_document(), config=CONFIG)
# Requests go to the app in-process; its lifespan (the stack) starts with the first one.
schema.app = APP


@pytest.fixture(scope="module", autouse=True)
def _stop_stack() -> Iterator[None]:
    try:
        yield
    finally:
        print(f"\nschemathesis cases: {CASES}")  # the run's figures (pytest -s)
        with contextlib.suppress(Exception):
            asgi.shutdown_lifespans()


def _needs_key(case: Any) -> bool:
    """The operation's own method (a method it lacks is a 405 to anyone) and not public."""
    if case.method.upper() != case.operation.method.upper():
        return False
    return bool(case.operation.definition.raw.get("security", [{"ApiKey": []}]))


@schema.parametrize()
@settings(derandomize=True, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_operation_conforms(case: Any) -> None:
    case.call_and_validate(headers={"X-API-Key": API_KEY})
    CASES["with key"] += 1
    label = case.operation.label
    if not _needs_key(case) or _keyless.get(label, 0) >= KEYLESS_PER_OPERATION:
        return
    _keyless[label] = _keyless.get(label, 0) + 1
    for headers in ({}, {"X-API-Key": WRONG_KEY}):
        response = case.call(headers=headers)
        CASES["without key"] += 1
        assert response.status_code == 401, (label, headers, response.text)
        assert response.json()["code"] == 401
