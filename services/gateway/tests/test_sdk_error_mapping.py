"""Every typed error the gateway can answer with reaches the official SDK as its intended
exception (spec e2b-compat §2.1.4), never as a KeyError/JSONDecodeError inside the SDK.

The error starts in a (fake) scheduler behind real gRPC, crosses the gateway's gRPC client
mapping and its HTTP error responses, and is parsed by the unmodified SDK."""

from __future__ import annotations

import pytest
from e2b import AsyncSandbox
from e2b.exceptions import (
    AuthenticationException,
    RateLimitException,
    SandboxException,
    ServiceBusyException,
)

from aenv_common.errors import (
    AenvError,
    AlreadyExists,
    Conflict,
    DeadlineExceeded,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)

from .conftest import Stack

pytestmark = pytest.mark.sdk

CASES: list[tuple[AenvError, int, type[Exception]]] = [
    (InvalidArgument("bad"), 400, SandboxException),
    (Unauthenticated("who"), 401, AuthenticationException),
    (PermissionDenied("no"), 403, SandboxException),
    (NotFound("gone"), 404, SandboxException),
    (Conflict("busy"), 409, SandboxException),
    (AlreadyExists("dup"), 409, SandboxException),
    (ResourceExhausted("full"), 429, RateLimitException),
    (Internal("oops"), 500, SandboxException),
    (Unavailable("later"), 503, ServiceBusyException),
    (DeadlineExceeded("slow"), 504, SandboxException),
]


@pytest.mark.parametrize(("error", "status", "expected"), CASES,
                         ids=[f"{c[1]}-{type(c[0]).__name__}" for c in CASES])
async def test_create_error_maps_to_sdk_exception(
    e2b_env: Stack, error: AenvError, status: int, expected: type[Exception]
) -> None:
    e2b_env.scheduler.failures["failing"] = error
    with pytest.raises(expected) as raised:
        await AsyncSandbox.create("failing", request_timeout=30)
    # Exactly the intended class (ServiceBusyException is deliberately not a SandboxException).
    assert type(raised.value) is expected
    if expected is SandboxException:
        assert str(raised.value).startswith(f"{status}: ") and error.message in str(raised.value)
        assert raised.value.status_code == status  # type: ignore[attr-defined]
    else:
        assert error.message in str(raised.value)
    if status == 429:
        # Should-Retry: false on quota errors: the SDK did not retry.
        assert e2b_env.scheduler.calls == 1
