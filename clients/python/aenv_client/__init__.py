"""Python client of aenv's native gRPC API, for training code (see client.py)."""

from aenv_client.client import CreateOutcome, ForkOutcome, GatewayClient, new_idempotency_key
from aenv_client.errors import (
    AenvError,
    Conflict,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    SandboxDied,
    Unauthenticated,
    Unavailable,
)
from aenv_client.execs import ExecResult, Execution, Output
from aenv_client.leases import Lease, sandbox_filter
from aenv_client.retries import RetryPolicy
from aenv_client.sync import SyncGatewayClient

__all__ = [
    "AenvError",
    "Conflict",
    "CreateOutcome",
    "DeadlineExceeded",
    "ExecResult",
    "Execution",
    "ForkOutcome",
    "GatewayClient",
    "InvalidArgument",
    "Lease",
    "NotFound",
    "OutOfRange",
    "Output",
    "PermissionDenied",
    "ResourceExhausted",
    "RetryPolicy",
    "SandboxDied",
    "SyncGatewayClient",
    "Unauthenticated",
    "Unavailable",
    "new_idempotency_key",
    "sandbox_filter",
]
