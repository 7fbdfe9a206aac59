"""The client's errors: the typed errors of `aenv_common.errors` (bad input, not found, no
capacity, ...) plus SandboxDied, a sandbox lost or killed under its user — infrastructure
failure, which a training loop must not score as a zero reward."""

from __future__ import annotations

import grpc

from aenv.gateway.v1 import gateway_pb2
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
    from_rpc_error,
    from_status,
)

__all__ = [
    "AenvError",
    "AlreadyExists",
    "Conflict",
    "DeadlineExceeded",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "ResourceExhausted",
    "SandboxDied",
    "Unauthenticated",
    "Unavailable",
    "item_error",
    "rpc_error",
]

# How the gateway says a sandbox's node went away with it (service.py, `_visible`).
_LOST = "was lost with its node"


class SandboxDied(NotFound):
    """A sandbox this client created is gone without this client killing it: its node or VM
    died, its timeout ended it, or another caller killed it. A NotFound, so code that catches
    NotFound still does; a rollout should catch this first and retry the episode."""


def rpc_error(err: grpc.aio.AioRpcError, *, sandbox_died: bool = False) -> AenvError:
    """The typed error of a failed call; NOT_FOUND is SandboxDied when the sandbox was known to
    live (`sandbox_died`) or the gateway says it was lost with its node."""
    typed = from_rpc_error(err)
    if isinstance(typed, NotFound) and (sandbox_died or _LOST in typed.message):
        return SandboxDied(typed.message)
    return typed


def item_error(error: gateway_pb2.SandboxError) -> AenvError:
    """A batch item's error as the typed error its create alone would have raised."""
    code = grpc.StatusCode.__members__.get(error.status, grpc.StatusCode.INTERNAL)
    return from_status(code, error.message)
